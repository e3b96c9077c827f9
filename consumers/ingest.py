"""Exactly-once ingestion of an external topic of JSON records into the documents topic.

A live source seldom speaks sparsewatch's message format: a tweet carries ``id_str``,
``full_text`` and ``created_at`` (``Wed Oct 10 20:19:24 +0000 2018``), a news feed its own
names, and neither is keyed by stream, while the workers need each stream's messages on one
partition. :func:`run_ingest` (``sparsewatch ingest``) bridges such a topic to
``<prefix>.docs``: every record is mapped by the field mapping the replay tool uses too
(:func:`~sparsewatch.consumers.field_mapping.to_document`: named fields, paths into nested objects
such as ``user.lang``, or the record's own Kafka timestamp as the event time) to a document message
keyed by its stream; a record that cannot be mapped (not JSON, a missing field, a bad date, a
text the detector would refuse, a tombstone) goes to ``<prefix>.dlq`` with the reason and its
source ``topic:partition:offset``, as the workers' dead letters do, with its own key in a
``source_key`` header and, for a tombstone (an empty value there), a ``null_value`` header
(:func:`~sparsewatch.consumers.kafka_client.dead_letter_message`), and (given a sink) to the
results database's ``dead_letters`` table, where ``sparsewatch dead-letters`` finds it.

Consume-transform-produce runs in Kafka transactions: a batch's documents, its dead letters and
its consumed offsets (``send_offsets_to_transaction``) commit together or not at all, so a crash,
a kill or a restart never loses or duplicates a document for the workers, which read committed
messages only. A restarted bridge with the same transactional id fences its predecessor and
aborts the transaction it left open at once (without the id, readers would wait for the
transaction's timeout); several bridges in one consumer group need distinct ids
(:func:`transactional_id`), which with a digest of their sources are also their static group
memberships (:func:`static_member_id`), so a restart takes its partitions back without waiting
for its predecessor's session to time out. An abortable error (a rebalance fencing a stale
member, a delivery failure) aborts the batch and re-reads it from the committed offsets; so does
a client call that hangs past its timeout after a broker restart (a librdkafka bug:
:func:`_send_offsets`), and an abort that times out while the broker is down (:func:`_abort`),
with a new producer fencing the old one. A bridge started with its broker (whose transaction
coordinator is still loading) waits for it: :func:`_transactional_producer`.

The documents and dead-letter topics may take smaller messages than the producer's 1,000,000
bytes (their ``max.message.bytes``; 512 KB and less are common). The broker refuses a record
batch over that limit whole, which aborted the transaction, and the batch read again failed
again, for ever: the bridge forwarded nothing more. Their limits are read once the broker
answers (:func:`_limited`; a dead-letter topic below
:data:`~sparsewatch.consumers.kafka_admin.MIN_DEAD_LETTER_TOPIC_BYTES` is a one-line error):
the producer batches at most the smaller one, a document over the documents topic's is a dead
letter whose reason names that limit, and a dead letter's copy of the refused record is cut to
fit the dead-letter topic (a ``truncated_from_bytes`` header gives the record's size; the
database keeps it whole, and the source topic holds it at the coordinates the dead letter
names). A batch the broker still refuses as too large (a limit lowered while the bridge runs)
makes the bridge read the limits again and go on with them; the same limits again are a
one-line error, not a loop. So is any other refusal the same records would get again (a topic's
timestamp bounds, a record the broker cannot validate, a policy, a missing write permission:
``_REFUSALS``): nothing of the batch is committed, and it is read again at the next start.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from sparsewatch.consumers.field_mapping import (
    DEFAULT_MAX_TEXT_BYTES,
    PRODUCER_LIMIT,
    FieldMapping,
    MessageLimit,
    parse_json_object,
    to_document,
)
from sparsewatch.consumers.health import ConsumerReadiness, Heartbeat
from sparsewatch.consumers.kafka_admin import TopicLimits
from sparsewatch.consumers.kafka_client import (
    BatchConsumer,
    dead_letter_message,
    make_producer,
    next_offsets,
    produce,
    source_of,
)
from sparsewatch.consumers.messages import RecordError, encode
from sparsewatch.consumers.metrics import IngestMetrics
from sparsewatch.consumers.retry import StopFlag
from sparsewatch.consumers.timestamps import parse_timestamp_ms

from sparsewatch.errors import SparsewatchError

log = logging.getLogger(__name__)

DeadLetterSink = Callable[[list[dict[str, Any]]], None]
"""Records a batch's dead letters (topic, partition, offset, reason, payload) idempotently."""

_TXN_TIMEOUT_S = 60.0  # one call's wait on the transaction coordinator
_HUNG_AFTER_S = 5.0  # past a call's timeout, when it counts as hung
_PATTERN_REFRESH_MS = 10_000  # how soon a new topic that a ^pattern source matches is read
_STATIC_SESSION_TIMEOUT_MS = 45_000  # librdkafka's default since 2.0: see _bridge_consumer
_START_RETRY_S = 120.0  # how long a start waits for the transaction coordinator
_RETRY_FIRST_DELAY_S = 0.5  # the wait before init_transactions is retried, doubled each time ...
_RETRY_MAX_DELAY_S = 5.0  # ... up to this


def transactional_id(group_id: str, instance: int) -> str:
    """The transactional id of bridge ``instance`` of consumer group ``group_id``: stable across
    restarts (so a restart fences the instance it replaces), distinct between instances."""
    return f"{group_id}-{instance}"


def static_member_id(group_id: str, instance: int, sources: tuple[str, ...]) -> str:
    """The static group membership (``group.instance.id``) of bridge ``instance`` reading
    ``sources``: its transactional id and a digest of its sources (in any order). A static member
    that rejoins is handed its old assignment without a rebalance, whatever it now subscribes to
    (the broker does so for clients without KIP-814, librdkafka 2.16 among them): a bridge
    restarted with other sources under the same id forwarded its predecessor's topics, which it
    was not given, and never read its own. Under a new id it joins as a new member, and gets its
    partitions once its predecessor's session has ended."""
    digest = hashlib.sha256("\n".join(sorted(set(sources))).encode()).hexdigest()[:8]
    return f"{transactional_id(group_id, instance)}-{digest}"


def map_record(
    msg: Message,
    mapping: FieldMapping,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    kafka_time: bool = False,
    limit: MessageLimit = PRODUCER_LIMIT,
) -> tuple[bytes, bytes]:
    """The key (stream id) and value of the document message for one source record; a
    RecordError says why there is none (also a message over the documents topic's ``limit``).
    With ``kafka_time`` the record's Kafka timestamp is the event time."""
    value = msg.value()
    if value is None:
        raise RecordError("null value (a tombstone), not a document")
    fields = parse_json_object(value, "message")
    timestamp_ms = None
    if kafka_time:
        kind, ms = msg.timestamp()
        if kind == TIMESTAMP_NOT_AVAILABLE:
            raise RecordError("the record has no Kafka timestamp")
        timestamp_ms = parse_timestamp_ms(ms)
    document = to_document(fields, mapping, max_text_bytes, timestamp_ms, limit)
    return document["stream"].encode(), encode(document)


@dataclass
class IngestStats:
    """What committed transactions carried: records read, documents forwarded, records
    dead-lettered; how many transactions committed and aborted, and the seconds spent on batches
    (from a batch in hand to its commit or abort: the bridge's working time, not its waits)."""

    read: int = 0
    forwarded: int = 0
    dead_lettered: int = 0
    transactions: int = 0
    aborted: int = 0
    busy_s: float = 0.0
    per_reason: dict[str, int] = field(default_factory=dict)

    def add(self, read: int, forwarded: int, reasons: dict[str, int]) -> None:
        """Count one committed transaction."""
        self.transactions += 1
        self.read += read
        self.forwarded += forwarded
        for reason, n in reasons.items():
            self.dead_lettered += n
            self.per_reason[reason] = self.per_reason.get(reason, 0) + n


@dataclass(frozen=True)
class IngestRoute:
    """Where the bridge reads and writes."""

    bootstrap: str
    group_id: str
    source_topics: tuple[str, ...]  # names, or regular expressions starting with ^
    docs_topic: str
    dlq_topic: str
    instance: int = 0


def run_ingest(
    route: IngestRoute,
    mapping: FieldMapping,
    stop: StopFlag,
    *,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    kafka_time: bool = False,
    until_idle_s: float | None = None,
    batch_size: int = 1000,
    metrics: IngestMetrics | None = None,
    record_dead_letters: DeadLetterSink | None = None,
    health: Heartbeat | None = None,
) -> IngestStats:
    """Bridge ``route.source_topics`` to ``route.docs_topic`` until ``stop`` is set or the
    sources have been drained for ``until_idle_s`` seconds; the batch in progress commits
    first. A batch (one transaction) holds what arrived within half a second, at most
    ``batch_size`` records.
    Fencing by a newer bridge with the same transactional id, and other fatal Kafka errors, are
    SparsewatchErrors. Committed transactions and the source lag also go to ``metrics``; each
    batch's dead letters, whole, to ``record_dead_letters`` (the results database's
    ``dead_letters`` table, keyed by source coordinates) before its transaction. Stopped while
    it waits at start for the broker's transaction coordinator, it returns having read nothing.
    A dead-letter topic too small for dead letters is a SparsewatchError (see the module doc).
    Each poll goes to ``health`` (:mod:`~sparsewatch.consumers.health`), with whether the bridge
    has joined its group and reaches the broker; its waits before retrying are counted in
    ``metrics``."""
    stats = IngestStats()
    to_message = partial(
        map_record, mapping=mapping, max_text_bytes=max_text_bytes, kafka_time=kafka_time
    )
    tid = transactional_id(route.group_id, route.instance)
    metrics = metrics or IngestMetrics()
    health = health or Heartbeat("ingest")
    health.count_waits(metrics.retried)
    replaced: list[Producer] = []  # kept alive: a call may never return from one
    started = _started(route, tid, stop, metrics, replaced)
    if started is None:
        return stats
    producer, limits, consumer = started
    # (the records are mapped in _transfer, called from this frame: a frame more or less between
    # them and the caller moves the nesting depth at which a record's JSON is refused)
    try:
        health.started()
        readiness = ConsumerReadiness(
            consumer, health, patterns=any(s.startswith("^") for s in route.source_topics)
        )
        idleness = _Idleness(route, consumer, until_idle_s)
        while not stop.is_set():
            batch = _poll(consumer, batch_size, tid)
            now = time.monotonic()
            health.beat(readiness.why_not(now))
            lag = consumer.lag()
            metrics.set_lag(lag)
            idleness.observe(batch, lag, now)
            if not batch:
                if idleness.drained(now):
                    break
                continue
            mapper = partial(to_message, limit=limits.message_limit(route.docs_topic))
            try:
                outcome = _transfer(
                    batch, route, mapper, producer, consumer, record_dead_letters, limits, stop
                )
            except _TakeOverError as exc:
                replacement = _taking_over(exc, route, tid, stop, limits)
                if replacement is None:  # stopped while the broker was still down
                    break
                replaced.append(producer)
                producer = replacement  # (it fenced the old one, aborting its transaction)
                consumer.rewind_to_committed()
                outcome = None
            except _StoppedInTransactionError as exc:
                log.warning(
                    "%s; stopped: the transaction is left open, for the next start's producer "
                    "to abort, and the batch is read again then",
                    exc,
                )
                break
            except _TooLargeError as exc:  # (aborted, and sent back to the committed offsets)
                fitted, fresh = _refitted(exc, route, tid, stop, producer, limits, replaced)
                if fitted is None:  # stopped while the broker was down
                    break
                producer, limits, outcome = fitted, fresh, None
            _count(stats, metrics, len(batch), outcome, time.monotonic() - now)
    except BaseException:
        _close_after_error(consumer, producer)
        raise
    _close_at_end(consumer, producer)
    return stats


def _started(
    route: IngestRoute,
    tid: str,
    stop: StopFlag,
    metrics: IngestMetrics,
    replaced: list[Producer],
) -> tuple[Producer, TopicLimits, BatchConsumer] | None:
    """The bridge's clients: its transactional producer (waiting at start for the broker's
    transaction coordinator: :func:`_transactional_producer`) made for the documents and
    dead-letter topics' limits (:func:`_limited`; the first producer, when another one is made
    for them, goes to ``replaced``), those limits, and its consumer (:func:`_bridge_consumer`).
    None when stopped while it waited. A start check that fails (a one-line SparsewatchError: a
    compacted documents topic, a dead-letter topic too small) or a consumer that cannot be made
    releases the producers made so far (:func:`_release`) before the error goes on: they were
    left open (their threads and connections) for as long as the error was held."""
    first = _transactional_producer(route.bootstrap, tid, stop, _START_RETRY_S)
    if first is None:  # stopped while the transaction coordinator was loading
        return None
    producer: Producer | None = first
    try:
        # (a new producer's limits are the producer's own)
        producer, limits = _limited(route, tid, stop, first, TopicLimits(), replaced)
        if producer is not None:
            return producer, limits, _bridge_consumer(route, metrics)
    except BaseException:
        _release(first, producer)
        raise
    _release(first)  # stopped while the broker was down
    return None


def _release(*producers: Producer | None) -> None:
    """Close the producers of a start that failed or was stopped (each once; None is none).
    Nothing was produced with them, so nothing is delivered or aborted: their threads and
    connections end now. Closing one whose ``init_transactions`` did not finish warns that it
    could not abort a transaction, though none was begun, and raises the fatal error that ended
    its start, if any, once it is closed: neither is passed on (the start's own error, or its
    stop, goes on)."""
    for producer in {id(p): p for p in producers if p is not None}.values():
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", "Producer abort_transaction failed during close", RuntimeWarning
            )
            try:
                producer.close()
            except KafkaException as exc:
                log.debug("closed a producer of a failed start: %s", exc.args[0].str())


def _bridge_consumer(route: IngestRoute, metrics: IngestMetrics) -> BatchConsumer:
    """The consumer of ``route``'s sources, a static member of its group (a skipped range of
    records counted in ``metrics``).

    Static membership under the same id (for the same sources: static_member_id): a restarted
    bridge takes its partitions back at once instead of after its killed predecessor's session
    timeout. Its session must outlast a coordinator outage (a broker restart): a static member
    whose session timed out on its own side rejoins under a new member id while the coordinator
    still holds the old one, and may fence ITSELF ("Static consumer fenced by other consumer
    with same group.instance.id", fatal; librdkafka issue 3437), which the workers' 10 s session
    did under load. The longer session costs only the failover of a bridge that is gone for good
    (killed, or stopped: a static member does not leave its group on close) to the OTHER bridges
    of its group, and to a bridge restarted with other sources; one restarted with its instance
    and sources takes its partitions back at once anyway."""
    overrides: dict[str, Any] = {
        "group.instance.id": static_member_id(route.group_id, route.instance, route.source_topics),
        "session.timeout.ms": _STATIC_SESSION_TIMEOUT_MS,
    }
    if any(source.startswith("^") for source in route.source_topics):
        # a topic created later is seen at the next metadata refresh (5 minutes by default)
        overrides["topic.metadata.refresh.interval.ms"] = _PATTERN_REFRESH_MS
    return BatchConsumer(
        route.bootstrap,
        route.group_id,
        route.source_topics,
        on_reset=metrics.skipped,
        **overrides,
    )


def _poll(consumer: BatchConsumer, batch_size: int, tid: str) -> list[Message]:
    """The next batch (what arrived within half a second, at most ``batch_size`` records); a
    fatal error of the consumer (fenced by a bridge of the same instance ``tid``) is a
    SparsewatchError."""
    try:
        return consumer.poll_batch(batch_size, timeout=0.5)
    except KafkaException as exc:
        if not exc.args[0].fatal():
            raise
        raise _fatal_error(exc.args[0], tid, " of its consumer") from None


class _Idleness:
    """Since when the bridge's sources have been drained, for ``until_idle_s``.

    "Idle" means drained, as for the workers: nothing read, partitions assigned and none of
    them behind (an unknown lag is not "caught up"), so a bridge still joining its group or
    waiting for its first fetch does not stop before it read anything; nothing assigned because
    no topic is a source is drained too."""

    def __init__(
        self, route: IngestRoute, consumer: BatchConsumer, until_idle_s: float | None
    ) -> None:
        self._sources = route.source_topics
        self._consumer = consumer
        self._until_idle_s = until_idle_s
        self._quiet_since = time.monotonic()
        self._warned = False

    def observe(
        self, batch: list[Message], lag: dict[tuple[str, int], int | None], now: float
    ) -> None:
        """One poll's ``batch`` and the source ``lag`` after it, at ``now``."""
        if batch or any(n != 0 for n in lag.values()):
            self._quiet_since = now
        elif not lag:
            if self._until_idle_s is None or not self._consumer.matches_no_topic():
                self._quiet_since = now
            elif not self._warned:
                log.warning("no topic matches %s: nothing to read", ", ".join(self._sources))
                self._warned = True

    def drained(self, now: float) -> bool:
        """Whether the sources have been drained for ``until_idle_s`` (never without it)."""
        return self._until_idle_s is not None and now - self._quiet_since >= self._until_idle_s


def _taking_over(
    exc: _TakeOverError, route: IngestRoute, tid: str, stop: StopFlag, limits: TopicLimits
) -> Producer | None:
    """A new producer, made for ``limits``, to take over from one that cannot end its
    transaction (``exc`` says why): it fences the old one, aborting its transaction. None when
    stopped while the broker was still down."""
    log.warning("%s; a new producer takes over, the batch is read again", exc.reason)
    return _replacement_producer(route.bootstrap, tid, stop, limits.producer_settings())


def _refitted(
    exc: _TooLargeError,
    route: IngestRoute,
    tid: str,
    stop: StopFlag,
    producer: Producer,
    limits: TopicLimits,
    replaced: list[Producer],
) -> tuple[Producer | None, TopicLimits]:
    """After the broker refused a batch as too large (``exc``): the topics' limits read again,
    and a producer whose batches fit them (:func:`_limited`; None when stopped while the broker
    was down). The same limits as ``limits`` again are a one-line error (:func:`_too_large_error`),
    not a loop."""
    fitted, fresh = _limited(route, tid, stop, producer, limits, replaced)
    if fresh == limits:
        raise _too_large_error(exc, route, limits) from None
    return fitted, fresh


def _count(
    stats: IngestStats,
    metrics: IngestMetrics,
    read: int,
    outcome: tuple[int, dict[str, int]] | None,
    busy: float,
) -> None:
    """Count a batch of ``read`` records that took ``busy`` seconds in ``stats`` and
    ``metrics``: committed (``outcome``: the documents forwarded, the dead letters per reason)
    or aborted (None)."""
    stats.busy_s += busy
    if outcome is None:
        stats.aborted += 1
        metrics.aborted()
        return
    stats.add(read, *outcome)
    metrics.committed(outcome[0], sum(outcome[1].values()), busy)


def _fatal_error(error: KafkaError, tid: str, client: str = "") -> SparsewatchError:
    """The one-line error that ends the bridge on a fatal Kafka error of its producer (or of
    ``client``, e.g. ``" of its consumer"``), naming the likely cause: a second bridge with its
    transactional id ``tid`` fenced it."""
    return SparsewatchError(
        f"ingest stopped by a fatal Kafka error{client}: {error.str()}"
        f" (two bridges of instance {tid}? give each its own --instance)"
    )


def _limited(
    route: IngestRoute,
    tid: str,
    stop: StopFlag,
    producer: Producer,
    made_for: TopicLimits,
    replaced: list[Producer],
) -> tuple[Producer | None, TopicLimits]:
    """The documents and dead-letter topics' limits, read now (a one-line error for a
    dead-letter topic too small for dead letters), and a producer whose batches fit them:
    ``producer`` when it was made for the same batches (``made_for``'s), else a new one with
    its transactional id, which fences it (kept in ``replaced``); None when stopped while the
    broker was down."""
    limits = TopicLimits.read(route.bootstrap, (route.docs_topic, route.dlq_topic))
    limits.check_dead_letter_topic(route.dlq_topic)
    limits.check_not_compacted(route.docs_topic)
    settings = limits.producer_settings()
    if settings == made_for.producer_settings():
        return producer, limits
    replaced.append(producer)
    return _transactional_producer(route.bootstrap, tid, stop, None, settings), limits


def _too_large_error(
    exc: _TooLargeError, route: IngestRoute, limits: TopicLimits
) -> SparsewatchError:
    """The one-line error that ends the bridge when the broker refuses a batch as too large
    although the topics' limits, read again, have not changed (the broker did not say them)."""
    said = ", ".join(
        f"{topic}: {limits.max_message_bytes.get(topic, 'not known')}"
        for topic in (route.docs_topic, route.dlq_topic)
    )
    return SparsewatchError(
        f"ingest stopped: the broker refused a batch as too large ({exc}), though the topics' "
        f"max.message.bytes ({said}) did not change; the batch is read again at the next start"
    )


def _close(consumer: BatchConsumer, producer: Producer) -> list[str]:
    """Close the consumer, then deliver what the producer still holds (10 s at most): each
    KafkaException either raised, as ``"<client>: <reason>"``. The client raises a producer's
    fatal error (fenced by a newer producer with the same transactional id, its transaction
    timed out) from the first flush after it, so also after the error ended the bridge."""
    failures: list[str] = []
    for client, close in (("consumer", consumer.close), ("producer", lambda: producer.flush(10))):
        try:
            close()
        except KafkaException as exc:
            failures.append(f"{client}: {exc.args[0].str()}")
    return failures


def _close_after_error(consumer: BatchConsumer, producer: Producer) -> None:
    """Close the Kafka clients after the error that ends the bridge, which comes first: their
    own failures are only logged."""
    for failure in _close(consumer, producer):
        log.warning("closing the Kafka clients after an error: %s", failure)


def _close_at_end(consumer: BatchConsumer, producer: Producer) -> None:
    """Close the Kafka clients when the bridge stops; a failure is a SparsewatchError."""
    failures = _close(consumer, producer)
    if failures:
        raise SparsewatchError(
            f"ingest stopped by a Kafka error while closing its {failures[0]}"
            " (what was not committed is read again at the next start)"
        )


def _transfer(
    batch: list[Message],
    route: IngestRoute,
    to_message: Callable[[Message], tuple[bytes, bytes]],
    producer: Producer,
    consumer: BatchConsumer,
    record_dead_letters: DeadLetterSink | None,
    limits: TopicLimits,
    stop: StopFlag,
) -> tuple[int, dict[str, int]] | None:
    """One batch in one transaction: the documents forwarded and the dead letters (cut to fit
    ``limits``) per reason it committed. On an abortable error the transaction is aborted
    (:func:`_abort`) and the consumer sent back to the committed offsets, so the batch is read
    again: None, or a :class:`_TooLargeError` when the broker refused a message as too large.

    The dead letters go to ``record_dead_letters`` first, before the transaction begins (a slow
    database does not hold a transaction open); the sink must ignore a record it already holds,
    as a batch read again records them again."""
    documents: list[tuple[bytes, bytes]] = []
    dead: list[tuple[Message, str]] = []
    for msg in batch:
        try:
            documents.append(to_message(msg))
        except RecordError as exc:
            dead.append((msg, str(exc)))
        except Exception as exc:  # a record the mapping did not foresee: never a crash loop
            log.exception("record %s:%d:%d could not be mapped", *source_of(msg))
            dead.append((msg, f"cannot be mapped ({type(exc).__name__}: {exc})"[:500]))
    if dead and record_dead_letters is not None:
        record_dead_letters(
            [
                {
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                    "reason": reason,  # (a tombstone's says so: a payload is never null here)
                    "payload": msg.value() or b"",
                }
                for msg, reason in dead
            ]
        )
    reasons: dict[str, int] = {}
    try:
        producer.begin_transaction()
        for msg, reason in dead:
            reasons[reason] = reasons.get(reason, 0) + 1
            dkey, payload, headers = dead_letter_message(
                *source_of(msg), reason, msg.value(), msg.key()
            )
            payload, headers = limits.fit(route.dlq_topic, dkey, payload, headers)
            produce(producer, route.dlq_topic, dkey, payload, headers=headers)
        for key, value in documents:
            produce(producer, route.docs_topic, key, value)
        _send_offsets(
            producer, consumer.positions_for(next_offsets(batch)), consumer.group_metadata(), stop
        )
        _commit(producer, stop)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        if error.fatal():
            raise _fatal_error(error, transactional_id(route.group_id, route.instance)) from None
        refused = error.code() in _REFUSALS
        if not refused and not error.txn_requires_abort():
            raise
        log.warning("transaction aborted, the batch is read again: %s", error.str())
        _abort(producer)
        consumer.rewind_to_committed()
        if error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            raise _TooLargeError(error.str()) from None
        if refused:
            raise SparsewatchError(
                f"ingest stopped: the broker refuses the batch's messages ({error.str()}), and "
                "would refuse them again if it were read again; change the topic's settings or "
                "the records, the batch is read again at the next start"
            ) from None
        return None
    return len(documents), reasons


# The broker's answers to a produce that the same records get again when their batch is read
# again (a topic's timestamp bounds, a record it cannot validate, a policy, a missing write
# permission): the bridge stops in one line instead of aborting and re-reading them for ever.
# The answer comes as the commit's error, or from producing itself once the client has learnt
# that the topic refuses this producer: a missing write permission fails the first commit with
# "N message(s) failed delivery" only (the batch is read again), the next produce() with
# TOPIC_AUTHORIZATION_FAILED. (The deliveries' own errors would say it at once, but a delivery
# callback that confluent-kafka runs from the flush raising a fatal error, as after the producer
# was fenced, turns that error into a SystemError.)
_REFUSALS = frozenset(
    {
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.INVALID_RECORD,
        KafkaError.POLICY_VIOLATION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)


class _StoppedInTransactionError(Exception):
    """A stop was requested while ending a transaction waited for the broker (down): the
    transaction is left open; the next start's producer aborts it (``init_transactions``), and
    the batch is read again then."""


class _TakeOverError(Exception):
    """The producer cannot end its transaction: a new one with the same transactional id takes
    over (fencing it and aborting the transaction), and the batch is read again."""

    reason: str  # why, for the warning (each subclass says)


class _TooLargeError(Exception):
    """The broker refused a message of the transaction (and so its batch) as too large for its
    topic: the transaction was aborted, the batch is read again with the topics' limits read
    again."""


class _HungClientError(_TakeOverError):
    """The Kafka client did not return from a transactional call long after its timeout."""

    reason = (
        "the Kafka client did not return from committing offsets to the transaction (after a "
        "broker restart)"
    )


class _AbortTimedOutError(_TakeOverError):
    """Aborting the transaction timed out: the broker (its transaction coordinator) is down."""

    reason = "aborting the transaction timed out (the broker is down)"


def _transactional_producer(
    bootstrap: str,
    tid: str,
    stop: StopFlag,
    give_up_after_s: float | None,
    settings: dict[str, Any] | None = None,
) -> Producer | None:
    """A producer with transactional id ``tid`` (and librdkafka ``settings``), its transactions
    initialised: a producer of the same id before it is fenced, and the transaction it left
    open aborted.

    A retriable error (a timeout, the coordinator not known yet or still loading its state, as
    on a broker that has just started) is retried, the client resuming the call, after a wait
    of 0.5 s, 1 s, ... (at most 5 s), until the broker answers, ``stop`` is set (None then: the
    waits end at once, a call in progress within ``_TXN_TIMEOUT_S``) or, unless it is None,
    ``give_up_after_s`` has passed; such an error then, and any other error, is a one-line
    SparsewatchError. The producer is closed when it is not returned (:func:`_release`)."""
    producer = make_producer(bootstrap, **{"transactional.id": tid, **(settings or {})})
    try:
        if _initialised(producer, tid, stop, give_up_after_s):
            return producer
    except BaseException:
        _release(producer)
        raise
    _release(producer)
    return None


def _initialised(
    producer: Producer, tid: str, stop: StopFlag, give_up_after_s: float | None
) -> bool:
    """Whether ``producer``'s transactions were initialised (False: ``stop`` was set first),
    retrying as :func:`_transactional_producer` says."""
    started, delay = time.monotonic(), _RETRY_FIRST_DELAY_S
    while True:
        try:
            producer.init_transactions(_TXN_TIMEOUT_S)
            return True
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if not error.retriable():
                raise SparsewatchError(f"cannot start Kafka transactions ({tid}): {exc}") from None
            waited = time.monotonic() - started
            if give_up_after_s is not None and waited >= give_up_after_s:
                raise SparsewatchError(
                    f"cannot start Kafka transactions ({tid}; retried for {waited:.0f}s): {exc}"
                ) from None
        if stop.is_set():
            return False
        log.warning(
            "starting Kafka transactions (%s): %s; retrying in %.1fs", tid, error.str(), delay
        )
        if stop.wait(delay):
            return False
        delay = min(2 * delay, _RETRY_MAX_DELAY_S)


def _replacement_producer(
    bootstrap: str, tid: str, stop: StopFlag, settings: dict[str, Any] | None = None
) -> Producer | None:
    """A producer (with ``settings``) to replace a hung one (:func:`_transactional_producer`),
    made while the broker may still be down: the hang follows a broker restart, which can
    outlast any bound, so a retriable error is retried until the broker answers or ``stop`` is
    set (None then)."""
    return _transactional_producer(bootstrap, tid, stop, None, settings)


def _send_offsets(
    producer: Producer, offsets: list[TopicPartition], group: Any, stop: StopFlag
) -> None:
    """``send_offsets_to_transaction``, retried while the client calls its error retriable
    (:class:`_StoppedInTransactionError` once ``stop`` is set); a :class:`_HungClientError` when
    a call has not returned ``_HUNG_AFTER_S`` after its own timeout. librdkafka (2.16 and
    before: issues 5456 and 5511) can wait for ever for a group coordinator it cached as down
    when a broker restarts, ignoring the call's timeout; the call therefore runs on a thread of
    its own, left behind if it hangs."""
    while True:
        exc = _on_a_thread(
            lambda: producer.send_offsets_to_transaction(offsets, group, _TXN_TIMEOUT_S),
            _TXN_TIMEOUT_S + _HUNG_AFTER_S,
        )
        if exc is None:
            return
        error: KafkaError = exc.args[0]
        if not error.retriable() or error.txn_requires_abort():
            raise exc
        if stop.is_set():
            raise _StoppedInTransactionError(
                f"committing offsets to the transaction: {error.str()}"
            ) from None
        log.warning("committing offsets to the transaction: %s; retrying", error.str())


def _on_a_thread(action: Callable[[], object], deadline_s: float) -> KafkaException | None:
    """Run ``action`` on a daemon thread: the KafkaException it raised, None when it returned,
    a :class:`_HungClientError` when it did not within ``deadline_s``; another exception it
    raised is raised here."""
    done = threading.Event()
    raised: list[BaseException] = []

    def call() -> None:
        try:
            action()
        except BaseException as exc:
            raised.append(exc)
        finally:
            done.set()

    threading.Thread(target=call, name="kafka-call", daemon=True).start()
    if not done.wait(deadline_s):
        raise _HungClientError
    if not raised:
        return None
    if isinstance(raised[0], KafkaException):
        return raised[0]
    raise raised[0]


def _abort(producer: Producer) -> None:
    """Abort the open transaction; a timeout (the broker down) is an
    :class:`_AbortTimedOutError`, other errors are raised.

    The abort is not retried: once the broker is back, its transaction coordinator aborts a
    transaction older than ``transaction.timeout.ms`` (60 s) by itself and fences the producer,
    and a retried abort reaches it later than that (the call waited ``_TXN_TIMEOUT_S``, as long);
    its EndTxn then failed with INVALID_PRODUCER_EPOCH, a fatal error that ended the bridge
    (librdkafka 2.16, Kafka 3.9). A new producer's ``init_transactions`` aborts the transaction
    instead, and the bridge goes on."""
    try:
        producer.abort_transaction(_TXN_TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].retriable():
            raise _AbortTimedOutError from None
        raise


def _commit(producer: Producer, stop: StopFlag) -> None:
    """Commit the open transaction, retrying what the client calls retriable (the broker down:
    until it is back) until ``stop`` is set (:class:`_StoppedInTransactionError`)."""
    while True:
        try:
            producer.commit_transaction(_TXN_TIMEOUT_S)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            if stop.is_set():
                raise _StoppedInTransactionError(
                    f"committing the transaction: {exc.args[0].str()}"
                ) from None
            log.warning("committing the transaction: %s; retrying", exc.args[0].str())
