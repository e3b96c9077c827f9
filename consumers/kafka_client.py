"""Thin, explicit wrappers around confluent-kafka: consumers that commit only when told to.

Offsets are never auto-committed. A worker consumes a batch, makes its effects durable (SQL), and
only then commits the offsets it has finished (:meth:`BatchConsumer.commit_offsets`; the workers
send them asynchronously, as the SQL store holds the offsets they restart from; :meth:`commit` is
the synchronous form for a list of messages), so a crash between the two re-delivers the batch
instead of losing it; idempotent writes downstream make the re-delivery harmless.

Topic and consumer-group administration is in :mod:`sparsewatch.consumers.kafka_admin`; the
logging of each connection failure once, in
:mod:`sparsewatch.consumers.kafka_connection_failures`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from sparsewatch.consumers.kafka_connection_failures import ConnectionFailures, failure_key
from sparsewatch.consumers.retry import RetryAbandonedError, Stop

from sparsewatch.errors import SparsewatchError

log = logging.getLogger(__name__)

TopicOffsets = dict[tuple[str, int], int]
"""Next offset to read for each (topic, partition)."""

_EVENT = "an event, not a message: only events (errors) lack a topic, partition or offset"

# The copy of a dead letter on the DLQ topic keeps at most this much of the original bytes: the
# original may be as large as the broker accepts, and the copy (a longer key, two headers) must
# not exceed the producer's 1,000,000-byte message limit. The SQL row keeps every byte.
DLQ_MAX_PAYLOAD_BYTES = 512 * 1024
# ... and at most this much of its key (a header): with the coordinates, the reason and the
# framing, a copy still fits a dead-letter topic of the smallest size allowed (4,096 bytes).
DLQ_MAX_KEY_BYTES = 1024


def source_of(msg: Message) -> tuple[str, int, int]:
    """A consumed message's topic, partition and offset (what :meth:`BatchConsumer.poll_batch`
    hands out always has them)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None, _EVENT
    return topic, partition, offset


def dead_letter_message(
    topic: str,
    partition: int,
    offset: int,
    reason: str,
    payload: bytes | None,
    source_key: bytes | None = None,
) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """Key, value and headers of a refused message's copy on the dead-letter topic: the key and
    the ``source`` header are ``topic:partition:offset``, the ``reason`` header says why, the value
    is the original bytes (cut at ``DLQ_MAX_PAYLOAD_BYTES``, the original size then in a
    ``truncated_from_bytes`` header). A null ``payload`` (a tombstone) is an empty value with a
    ``null_value`` header (``true``), so that it is told from an empty message. A ``source_key``
    (the refused message's own key) goes to a ``source_key`` header, cut at
    ``DLQ_MAX_KEY_BYTES`` (the original size then in a ``source_key_truncated_from_bytes``
    header); without one (a message without a key, and the workers' dead letters, which give
    none) there is no such header."""
    source = f"{topic}:{partition}:{offset}".encode()
    headers = [("reason", reason.encode()), ("source", source)]
    if source_key is not None:
        headers.append(("source_key", source_key[:DLQ_MAX_KEY_BYTES]))
        if len(source_key) > DLQ_MAX_KEY_BYTES:
            headers.append(("source_key_truncated_from_bytes", str(len(source_key)).encode()))
    if payload is None:
        headers.append(("null_value", b"true"))
        payload = b""
    if len(payload) > DLQ_MAX_PAYLOAD_BYTES:
        headers.append(("truncated_from_bytes", str(len(payload)).encode()))
        payload = payload[:DLQ_MAX_PAYLOAD_BYTES]
    return source, payload, headers


RECONNECT_BACKOFF_MS = 1_000
"""librdkafka's ``reconnect.backoff.ms`` for the consumers, producers and AdminClients made
here (its default: 100). With every broker down, librdkafka 2.16 re-bootstraps after each failed
attempt: it replaces the bootstrap broker with a new one, whose backoff starts afresh (the
exponential backoff never grows), and tries that one as soon as its pacing of such connections
allows, half this value (at most 1 s) later. With the default a consumer tried, and logged a
failure, 20 times a second; now twice, and the broker is still reached within half a second of
its return. (A broker down while others answer is retried with the exponential backoff: from
1 s, up to 10 s.)"""

STATISTICS_INTERVAL_MS = 1_000
"""How often a :class:`BatchConsumer` receives librdkafka's statistics (read only after all
brokers were down, to see one up again)."""

KEEPALIVE_LAG_EVERY_S = 5.0
"""How often the keep-alive helper of a :class:`BatchConsumer` asks the brokers for the owned
partitions' high watermarks and reports the lag to ``on_lag`` (:meth:`BatchConsumer.keepalive`)."""

KEEPALIVE_LAG_BUDGET_S = 2.0
"""At most this long (all partitions together) for one such query: the helper must go on polling,
and the caller waits for the query in progress when its work ends."""

# the errors of the error callback that are connection failures (librdkafka logs most of them too)
_CONNECTION_ERRORS = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
        KafkaError._TIMED_OUT,
    }
)

# A consumer the broker does not allow to read its topics or to join its group (ACLs): librdkafka
# reports it, once, and then waits for ever, fetching nothing (a worker sat idle without end, also
# with --until-idle). Raised by :meth:`BatchConsumer.poll_batch` as a one-line error.
_READ_REFUSALS = frozenset(
    {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}
)


ClientKind = Literal["consumer", "producer"]
"""librdkafka's two kinds of client (an AdminClient is a producer)."""

OWNED_PROPERTIES: dict[str, str] = {
    "bootstrap.servers": "it is kafka.bootstrap_servers",
    "metadata.broker.list": "it is kafka.bootstrap_servers",
    "group.id": "the groups are named after kafka.group_id",
    "group.instance.id": "members must not fence each other",
    "group.protocol": "the workers rely on the classic protocol's cooperative rebalances",
    "group.remote.assignor": "the workers rely on the classic protocol's cooperative rebalances",
    "partition.assignment.strategy": "the workers rely on cooperative rebalances",
    "enable.auto.commit": "offsets are committed only once results are stored",
    "auto.commit.enable": "offsets are committed only once results are stored",
    "enable.auto.offset.store": "offsets are committed only once results are stored",
    "offset.store.method": "offsets are committed only once results are stored",
    "auto.offset.reset": "a lost offset is reported, not skipped",
    "isolation.level": "only committed messages are read (exactly-once)",
    "enable.partition.eof": "the consumers do not expect end-of-partition events",
    "allow.auto.create.topics": "sparsewatch creates its topics with their partition counts",
    "transactional.id": "the ingest bridge names its transactions",
    "enable.idempotence": "the producers are idempotent (exactly-once)",
    "enable.gapless.guarantee": "the producers handle their errors themselves",
    "acks": "every message is acknowledged by all replicas (exactly-once)",
    "request.required.acks": "every message is acknowledged by all replicas (exactly-once)",
    "statistics.interval.ms": "the consumers read the statistics to see a broker come back",
    "logger": "librdkafka's lines go to sparsewatch's log",
    "log_level": "librdkafka's lines go to sparsewatch's log",
    "log.queue": "librdkafka's lines go to sparsewatch's log",
    "default.topic.config": "topic properties are set in [kafka.client] directly",
}
"""librdkafka properties sparsewatch sets itself, which ``[kafka.client]`` may not set, and why;
:func:`owned_property_reason` adds callbacks (``*_cb``, ``on_*``)."""

_SENSITIVE_WORDS = (
    "password",
    "secret",
    "token",
    "jaas",
    "credential",
    "key",
    "oauthbearer.config",
)
_REDACTED = "[redacted]"


# librdkafka's partitioners that hash a message's key: a stream's messages (keyed by stream) then
# share one partition, which the workers require. ``consistent_random`` (CRC32) is librdkafka's
# default and sparsewatch's; the Java clients (and Kafka Connect) hash with murmur2, so other
# producers of a documents topic written by those take ``murmur2_random``.
HASHING_PARTITIONERS = frozenset(
    {"consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a", "fnv1a_random"}
)
DEFAULT_PARTITIONER = "consistent_random"


def refused_value_reason(name: str, value: str) -> str | None:
    """Why ``[kafka.client]`` may not give the librdkafka property ``name`` this ``value``, or
    None when it may: a partitioner that does not hash the key (``random``) would spread a
    stream's messages over partitions, and the workers send those off a stream's partition to
    the dead letters."""
    if name == "partitioner" and value not in HASHING_PARTITIONERS:
        hashing = ", ".join(sorted(HASHING_PARTITIONERS))
        return (
            f"must hash the key (one of {hashing}): a stream's messages, keyed by stream, must "
            "share one partition"
        )
    return None


def owned_property_reason(name: str) -> str | None:
    """Why ``[kafka.client]`` may not set the librdkafka property ``name``, or None when it may:
    one of :data:`OWNED_PROPERTIES`, or a callback (``*_cb``, ``on_*``: sparsewatch's own, and
    no configuration value can be one)."""
    if name.endswith("_cb") or name.startswith("on_"):
        return "it is a callback, which sparsewatch sets"
    return OWNED_PROPERTIES.get(name)


def is_sensitive(name: str) -> bool:
    """Whether the value of property ``name`` is a secret never shown: its name holds
    ``password``, ``secret``, ``token``, ``jaas``, ``credential`` or ``key`` (``ssl.key.pem``), or
    it is ``sasl.oauthbearer.config``, but for a path (``*.location``: ``ssl.key.location``)."""
    return any(word in name for word in _SENSITIVE_WORDS) and not name.endswith(".location")


def redacted(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with the value of each sensitive one (:func:`is_sensitive`) replaced."""
    return {k: _REDACTED if is_sensitive(k) else v for k, v in properties.items()}


class _Warnings:
    """A librdkafka logger keeping the lines of a probe client."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, fmt: str, *args: Any) -> None:
        self.lines.append(fmt % args if args else fmt)


# The group timeouts of sparsewatch's consumers (:func:`consumer_config`), which the client
# properties replace.
CONSUMER_TIMEOUTS = {
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1_000,
    "max.poll.interval.ms": 300_000,
}


def _probe(properties: Mapping[str, str], kind: ClientKind) -> list[str]:
    """The lines librdkafka logs making a client of ``kind`` with ``properties`` (and no broker:
    it connects to nothing); :class:`KafkaException` when it refuses them. A consumer is made
    over sparsewatch's own timeouts (:data:`CONSUMER_TIMEOUTS`), as the workers' are: over
    librdkafka's defaults, ``max.poll.interval.ms`` below their 45 s session was refused for a
    session the workers do not have."""
    warnings = _Warnings()
    config = {**properties, "logger": warnings}
    if kind == "consumer":
        consumer = Consumer(
            {**CONSUMER_TIMEOUTS, **config, "group.id": "sparsewatch-property-check"}
        )
        consumer.poll(0)  # serves the log queue
        consumer.close()
    else:
        Producer(config).poll(0)
    return warnings.lines


def _kinds(name: str, value: str) -> tuple[ClientKind, ...]:
    """The kinds of client property ``name`` applies to: librdkafka warns, and ignores it, on a
    client of the other kind (consumer-only, producer-only properties). :class:`KafkaException`
    when it is no property, or ``value`` not one of its values. A property librdkafka accepts
    but cannot make a client with alone (``security.protocol`` needs ``sasl.mechanisms``)
    applies to both."""
    kinds: list[ClientKind] = []
    pairs: tuple[tuple[ClientKind, ClientKind], ...] = (
        ("consumer", "producer"),
        ("producer", "consumer"),
    )
    for kind, other in pairs:
        try:
            lines = _probe({name: value}, kind)
        except KafkaException as exc:
            if exc.args[0].str().startswith("Failed to create"):
                return ("consumer", "producer")
            raise
        if not any(f"is a {other} property" in line for line in lines):
            kinds.append(kind)
    return tuple(kinds)


class ClientPropertyError(ValueError):
    """A client property librdkafka or sparsewatch refuses (``name``), or a set of them
    librdkafka cannot make a client with (``name`` None); the message never holds a secret."""

    def __init__(self, name: str | None, why: str) -> None:
        super().__init__(f"property {name!r} {why}" if name else f"librdkafka refused them: {why}")
        self.name = name


class KafkaConnection(str):
    """A bootstrap address (the string itself: it is shown, compared and passed as one) that
    carries the librdkafka client properties (``[kafka.client]``: security, timeouts, ...) of
    every client made for it: pass it wherever a bootstrap string goes, and
    :func:`client_properties` gives each client the properties that apply to its kind.

    Made with the properties (:meth:`of`), it asks librdkafka which kind each applies to (a
    consumer-only property given to a producer is ignored with a warning at every client made),
    refusing an unknown property or value and a set librdkafka cannot make a client with
    (:class:`ClientPropertyError`, naming the property, never a secret value), and those sparsewatch
    sets itself (:func:`owned_property_reason`). Its ``repr`` and ``str`` are the address
    alone: the properties never reach a log line."""

    consumer: Mapping[str, str]
    producer: Mapping[str, str]

    def __new__(
        cls,
        bootstrap: str,
        consumer: Mapping[str, str] | None = None,
        producer: Mapping[str, str] | None = None,
    ) -> KafkaConnection:
        made = super().__new__(cls, bootstrap)
        made.consumer = dict(consumer or {})
        made.producer = dict(producer or {})
        return made

    @classmethod
    def of(cls, bootstrap: str, properties: Mapping[str, str]) -> KafkaConnection:
        """The connection to ``bootstrap`` whose clients get ``properties``, each only on the
        kinds of client it applies to (:class:`ClientPropertyError`: see the class)."""
        applies: dict[ClientKind, dict[str, str]] = {"consumer": {}, "producer": {}}
        for name, value in properties.items():
            if why := owned_property_reason(name):
                raise ClientPropertyError(name, f"is set by sparsewatch: {why}")
            if why := refused_value_reason(name, value):
                raise ClientPropertyError(name, f"= {value!r} {why}")
            try:
                kinds = _kinds(name, value)
            except KafkaException as exc:
                shown = _REDACTED if is_sensitive(name) else repr(value)
                raise ClientPropertyError(name, f"= {shown}: {exc.args[0].str()}") from None
            for kind in kinds:
                applies[kind][name] = value
        for kind, chosen in applies.items():
            try:
                if chosen:
                    _probe(chosen, kind)
            except KafkaException as exc:
                raise ClientPropertyError(None, exc.args[0].str()) from None
        return cls(bootstrap, applies["consumer"], applies["producer"])

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with its properties (a worker hands it to its writer process)."""
        return (KafkaConnection, (str(self), self.consumer, self.producer))

    def __repr__(self) -> str:
        return str.__repr__(str(self))


def client_properties(bootstrap: str, kind: ClientKind) -> dict[str, Any]:
    """``bootstrap.servers``, the ``logger`` that sends librdkafka's lines to
    :data:`~sparsewatch.logs.RDKAFKA_LOGGER`, each connection failure once
    (:class:`ConnectionFailures`), and, when ``bootstrap`` is a :class:`KafkaConnection`, its
    client properties that apply to ``kind``: the base of every client sparsewatch makes. The
    logger is here, not only in the consumers' and producers' settings: a client without one
    has librdkafka print its lines raw on stderr, among the JSON log lines, which its
    ``log_level`` 0 did not prevent once ``kafka.client.debug`` was set (it raises the level)."""
    extra = getattr(bootstrap, kind) if isinstance(bootstrap, KafkaConnection) else {}
    return {"bootstrap.servers": str(bootstrap), "logger": ConnectionFailures(), **extra}


# A TLS failure librdkafka reports as a transport failure: a handshake that failed (TLS to a
# PLAINTEXT listener), an alert the broker sent (a client certificate it refused, TLS 1.3)
_TLS_TRANSPORT_FAILURE = re.compile(r"SSL handshake failed|SSL alert number \d+")
# librdkafka's hint for any certificate the client did not accept, also one for another name
_UNVERIFIED_HINT = re.compile(
    r"broker certificate could not be verified, verify that ssl\.ca\.location is correctly "
    r"configured or root CA certificates are installed(?: \([^)]*\))?"
)
# the alerts a broker sends about the client's certificate: bad, unsupported, revoked, expired,
# unknown, of an unknown CA, missing
_CLIENT_CERTIFICATE_ALERT = re.compile(r"SSL alert number (?:4[2-6]|48|116)\b")
_BROKER_HOST = re.compile(r"^\w+://(\[[^]]+\]|[^:/\s]+):\d+/")


def _explained(text: str) -> str:
    """librdkafka's error ``text`` with what its TLS failure means: its hint for a broker
    certificate the client did not accept named only the CA, also when the certificate was for
    another name (``ssl.endpoint.identification.algorithm``), and an alert the broker sent said
    nothing of the client certificate it refused. Other text is returned as it is."""
    host = _BROKER_HOST.match(text)
    named = host.group(1) if host else "the address connected to"
    text = _UNVERIFIED_HINT.sub(
        f"the broker's certificate could not be verified: check that it is signed by a CA of "
        f"ssl.ca.location (or of the system's store when that is unset), valid now, and issued "
        f"for {named}",
        text,
    )
    return _CLIENT_CERTIFICATE_ALERT.sub(
        r"\g<0>: the broker refused the client certificate, or its absence "
        r"(ssl.certificate.location, ssl.key.location)",
        text,
    )


class SecurityErrors:
    """An ``error_cb`` keeping the last authentication or TLS failure librdkafka reported (a
    wrong password, an unknown mechanism, an untrusted certificate or one for another name, a
    client certificate the broker refused, TLS to a PLAINTEXT listener), explained
    (:func:`_explained`): with librdkafka's logging off, the request that could not
    connect fails only with "Broker transport failure"."""

    _CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, err: KafkaError) -> None:
        text = err.str()
        tls = err.code() == KafkaError._TRANSPORT and _TLS_TRANSPORT_FAILURE.search(text)
        if err.code() in self._CODES or tls:
            self.last = _explained(text)

    def why(self, client: Any, failure: str) -> str:
        """Why ``client`` (made with this callback) failed: the security failure it reported
        meanwhile (served now), else ``failure``."""
        client.poll(0)
        return self.last or failure


def admin_config(bootstrap: str) -> dict[str, Any]:
    """An AdminClient's settings: the reconnect backoff of the consumers and producers
    (:data:`RECONNECT_BACKOFF_MS`: with librdkafka's default an AdminClient waiting for a broker
    that refuses connections tried 20 times a second), which the client properties
    (:func:`client_properties`) replace, and librdkafka's own logging off (its callers report
    failures in one line) but for ``kafka.client.debug``'s lines, which go to the logger of
    :func:`client_properties` when the client is polled
    (:func:`~sparsewatch.consumers.kafka_admin.admin_client`)."""
    return {
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        **client_properties(bootstrap, "producer"),
        "log_level": 0,
    }


def consumer_config(bootstrap: str, group_id: str, **overrides: Any) -> dict[str, Any]:
    """Consumer settings: manual commits, committed reads only, and an offset the broker does not
    hold is an error (:meth:`BatchConsumer.poll_batch` says so and goes on at the earliest
    retained message) rather than a silent jump. librdkafka's lines go to
    :data:`~sparsewatch.logs.RDKAFKA_LOGGER`, each connection failure once (the logger of
    :func:`client_properties`). The connection's client properties replace these defaults, and
    ``overrides`` both."""
    config: dict[str, Any] = {
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "isolation.level": "read_committed",
        "partition.assignment.strategy": "cooperative-sticky",
        **CONSUMER_TIMEOUTS,
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        "log_level": 3,
    }
    config.update(client_properties(bootstrap, "consumer"))
    config.update(overrides)
    return config


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Producer settings: idempotent (no duplicates on retry), acks from all replicas, batched,
    the partition chosen by a hash of the key (:data:`DEFAULT_PARTITIONER`, unless the client
    properties choose another hashing one); librdkafka's lines and the client properties as a
    consumer's (:func:`consumer_config`)."""
    config: dict[str, Any] = {
        "partitioner": DEFAULT_PARTITIONER,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        "reconnect.backoff.ms": RECONNECT_BACKOFF_MS,
        "log_level": 3,
    }
    config.update(client_properties(bootstrap, "producer"))
    config.update(overrides)
    return config


def make_producer(bootstrap: str, **overrides: Any) -> Producer:
    """An idempotent producer."""
    return Producer(producer_config(bootstrap, **overrides))


def produce(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes,
    poll_s: float = 0.1,
    stop: Stop | None = None,
    **kwargs: Any,
) -> None:
    """``producer.produce``, waiting (polling deliveries every ``poll_s``) while the local queue
    is full instead of raising ``BufferError``; other errors propagate. With ``stop``, a stop
    requested while the queue is full (the broker down: it drains only as messages time out)
    raises :class:`~sparsewatch.consumers.retry.RetryAbandonedError`."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, **kwargs)
            return
        except BufferError:  # local queue full: let deliveries drain
            if stop is not None and stop.is_set():
                raise RetryAbandonedError(
                    "producing abandoned on shutdown (the producer's queue is full)"
                ) from None
            producer.poll(poll_s)


def next_offsets(messages: Iterable[Message]) -> TopicOffsets:
    """The offsets to commit after ``messages``: the last offset + 1 per partition."""
    offsets: TopicOffsets = {}
    for msg in messages:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        assert topic is not None and partition is not None and offset is not None, _EVENT
        key = (topic, partition)
        offsets[key] = max(offsets.get(key, 0), offset + 1)
    return offsets


class BatchConsumer:
    """A subscribed consumer that hands out batches and commits on request.

    ``on_assign`` / ``on_revoke`` receive lists of (topic, partition); a worker uses them to restore
    and checkpoint the per-stream state of the partitions it gains and loses. ``on_lost`` (default:
    ``on_revoke``) is called instead of ``on_revoke`` when the partitions were taken away without a
    revocation (session timeout): another member may already own them, so nothing may be written.

    A partition without a start offset starts at its earliest retained message. When the offset
    to read from is no longer on the broker (the topic's retention deleted messages before they
    were read: a consumer down or behind for longer than ``retention.ms``) or beyond the
    partition's end (the topic deleted and created again), the consumer logs an error saying how
    many messages were skipped, calls ``on_reset(topic, partition, skipped)`` and goes on at the
    earliest retained message: librdkafka's ``auto.offset.reset = earliest`` did the same
    silently, so a worker lost results without a word.

    Work between two polls may take longer than ``max.poll.interval.ms`` (a day's window of a busy
    stream, a database outage waited out): the broker would then take the partitions away, and
    the worker, given them back, would recompute the same work for ever. Work done inside
    :meth:`keepalive` keeps the member in its group however long it takes (see there), and
    meanwhile reports the lag to ``on_lag`` every :data:`KEEPALIVE_LAG_EVERY_S`.

    With the broker down, each connection failure is logged once, not at every reconnection
    attempt (:class:`ConnectionFailures`), and once all brokers were down, the first statistics
    (every :data:`STATISTICS_INTERVAL_MS`) showing one up again say so in an INFO line.
    """

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        topics: Sequence[str],
        on_assign: Callable[[list[tuple[str, int]]], TopicOffsets | None] | None = None,
        on_revoke: Callable[[list[tuple[str, int]]], None] | None = None,
        on_lost: Callable[[list[tuple[str, int]]], None] | None = None,
        on_reset: Callable[[str, int, int], None] | None = None,
        on_lag: Callable[[dict[tuple[str, int], int | None]], None] | None = None,
        **overrides: Any,
    ) -> None:
        self.last_error_at = float("-inf")
        self._on_lag = on_lag
        self._fatal: KafkaError | None = None
        self._refused: KafkaError | None = None  # see _READ_REFUSALS
        self._group_id = group_id
        self._failures = ConnectionFailures()
        self._down_since: float | None = None  # all brokers reported down, none up again since
        self._on_reset = on_reset
        # partitions whose offset the broker did not hold, not yet restarted (broker unreachable)
        self._resets: dict[tuple[str, int], int | None] = {}
        self._owned: set[tuple[str, int]] = set()  # what the group assigned to this member
        self._closing = False  # close() runs: an assignment it serves is not taken up
        self._start: TopicOffsets = {}
        # Held by the application's thread while it works inside keepalive(): the rebalance
        # callbacks, which the keep-alive thread's polls may serve, wait for it.
        self._app = threading.RLock()
        # The keep-alive helper's thread while it polls; ``_mode`` orders its start and end with
        # the caller's own calls (see keepalive()), whose commits wait in ``_deferred``.
        self._mode = threading.Lock()
        self._helper: int | None = None
        self._deferred: TopicOffsets = {}
        config = consumer_config(bootstrap, group_id, **{"logger": self._failures, **overrides})
        # (a quarter of the poll interval, at most 5 s: short batches never pause the partitions)
        self._keepalive_after_s = min(5.0, float(config["max.poll.interval.ms"]) / 4000)
        config.setdefault("error_cb", self._on_error)
        config.setdefault("on_commit", self._on_commit)
        config.setdefault("statistics.interval.ms", STATISTICS_INTERVAL_MS)
        config.setdefault("stats_cb", self._on_stats)
        self._consumer = Consumer(config)
        self._topics = list(topics)
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_lost = on_lost or on_revoke
        try:
            self._consumer.subscribe(
                list(topics), on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost
            )
        except BaseException:
            self._consumer.close()  # (refused: no client is left behind the error)
            raise

    def _on_error(self, err: KafkaError) -> None:
        """Broker unreachable and similar: remembered so that silence is not taken for idleness.
        A fatal error (a static member fenced: the only fatal consumer error) is kept for
        :meth:`poll_batch` to raise: librdkafka reports it here only, and the consumer then
        never fetches again, so a caller that went on polling stalled without a word.

        A connection failure (of a non-fatal error) already logged, as this error or as
        librdkafka's own line, is only counted (:class:`ConnectionFailures`)."""
        self.last_error_at = time.monotonic()
        fatal = err.fatal() or err.code() == KafkaError._FATAL
        # (the callback's error is _FATAL with its fatal() flag not set: kept with the flag)
        if fatal and self._fatal is None:
            self._fatal = KafkaError(err.code(), err.str(), fatal=True)
        if err.code() in _READ_REFUSALS and self._refused is None:
            self._refused = err
        if err.code() == KafkaError._ALL_BROKERS_DOWN and self._down_since is None:
            self._down_since = self.last_error_at
        suffix: str | None = ""
        if not fatal and err.code() in _CONNECTION_ERRORS:
            suffix = self._failures.occurred(failure_key(err.str()))
        if suffix is not None:
            log.warning("consumer: %s%s", err, suffix)

    def _on_stats(self, stats: str) -> None:
        """The client's statistics: once all brokers were reported down, the first that show a
        broker up again end the outage, said at INFO with its length (and what was not logged
        meanwhile); the next failure is then logged at once."""
        if self._down_since is None:
            return
        brokers = json.loads(stats)["brokers"].values()
        if not any(broker["state"] == "UP" for broker in brokers):
            return
        log.info(
            "consumer: Kafka answers again after %.1f s without a broker (%d repeated "
            "connection failure report(s) not logged)",
            time.monotonic() - self._down_since,
            self._failures.forget(),
        )
        self._down_since = None

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The outcome of an asynchronous commit (served by the next poll)."""
        if err is not None:
            log.warning("committing offsets to Kafka failed: %s", err)

    @contextmanager
    def keepalive(self) -> Iterator[None]:
        """Keep this member in its group while the caller works without polling.

        Once the work has taken ``min(5 s, max.poll.interval.ms / 4)``, a helper thread pauses
        every owned partition and polls (nothing is fetched) until the work is done, so that the
        broker's ``max.poll.interval.ms`` never expires. A rebalance callback its poll serves
        waits until the work is done: callbacks never run beside the caller's work.

        The client lets one thread at a time into the consumer (confluent-kafka 2.16 serialises
        its calls), and a callback waiting in the helper's poll holds it: while the helper polls,
        the caller's :meth:`lag` is unknown (``None``) for every partition, so that no partition
        counts as read up to date, and its asynchronous :meth:`commit_offsets` are sent when the
        work is done. On leaving, every paused partition is resumed (the client would keep one
        lost meanwhile paused through its next assignment), and each one still owned goes on at
        the first message the helper's poll returned from it (a message fetched before the
        pause), if any: what the caller reads next continues exactly where it stopped. An error
        of the helper's poll (a callback raising, a fatal client error) is raised here.

        Paused partitions are not fetched, so their watermarks, which come with fetch responses,
        stood still: the lag the caller saw before the work was all it knew, while messages went
        on arriving (a database outage waited out here: the backlog grew and the consumer-lag
        gauge did not move). Every :data:`KEEPALIVE_LAG_EVERY_S` the helper asks the brokers for
        the high watermarks and reports the lag to ``on_lag`` (:meth:`_queried_lag`).
        """
        stop = threading.Event()
        errors: list[BaseException] = []
        helper = threading.Thread(
            target=self._keep_alive,
            args=(stop, errors),
            name=f"{threading.current_thread().name}-keepalive",
            daemon=True,
        )
        self._app.acquire()
        helper.start()
        try:
            yield
        finally:
            stop.set()
            self._app.release()
            helper.join()  # (after the callbacks its poll may be serving have run)
            deferred, self._deferred = self._deferred, {}
            owned = set(self.assignment()) if deferred else set()
            self.commit_offsets({k: o for k, o in deferred.items() if k in owned}, True)
        if errors:
            raise errors[0]

    def _polled_elsewhere(self) -> bool:
        """Whether the keep-alive helper polls and this is another thread (hold ``_mode``)."""
        return self._helper is not None and self._helper != threading.get_ident()

    def _keep_alive(self, stop: threading.Event, errors: list[BaseException]) -> None:
        if stop.wait(self._keepalive_after_s):
            return
        with self._mode:
            if stop.is_set():
                return
            self._helper = threading.get_ident()
        paused: list[TopicPartition] = []
        rewind: TopicOffsets = {}
        try:
            paused = self._consumer.assignment()
            self._consumer.pause(paused)
            lag_due = time.monotonic() + KEEPALIVE_LAG_EVERY_S
            while not stop.is_set():  # (resets are applied by the caller's next poll_batch)
                for msg in self._messages(self._consumer.consume(num_messages=500, timeout=0.2)):
                    topic, partition, offset = source_of(msg)
                    rewind.setdefault((topic, partition), offset)
                if self._on_lag is not None and paused and time.monotonic() >= lag_due:
                    self._on_lag(self._queried_lag(paused, rewind, stop))
                    lag_due = time.monotonic() + KEEPALIVE_LAG_EVERY_S
        except BaseException as exc:  # raised on the caller's thread
            errors.append(exc)
        try:
            # (every one: the client keeps a partition paused through its loss and a new
            # assignment, which would never fetch it again)
            if paused:
                self._consumer.resume(paused)
            owned = {(p.topic, p.partition) for p in self._consumer.assignment()}
            for (topic, partition), offset in rewind.items():
                if (topic, partition) in owned:
                    self._consumer.seek(TopicPartition(topic, partition, offset))
        except BaseException as exc:
            errors.append(exc)
        finally:
            with self._mode:
                self._helper = None

    def _queried_lag(
        self, partitions: list[TopicPartition], rewind: TopicOffsets, stop: threading.Event
    ) -> dict[tuple[str, int], int | None]:
        """The keep-alive helper's lag of ``partitions`` (paused): each one's high watermark asked
        of its leader, less where the caller goes on reading (the first message the helper's
        polls returned from it, else its position). ``None`` for a partition whose watermark did
        not come within :data:`KEEPALIVE_LAG_BUDGET_S` of the start (all of them together), or
        once ``stop`` is set: an unknown lag (the gauge keeps its last known value)."""
        deadline = time.monotonic() + KEEPALIVE_LAG_BUDGET_S
        result: dict[tuple[str, int], int | None] = {}
        for tp in self._consumer.position(partitions):
            key = (tp.topic, tp.partition)
            result[key] = None
            left = deadline - time.monotonic()
            if stop.is_set() or left <= 0:
                continue
            try:
                low, high = self._consumer.get_watermark_offsets(tp, timeout=left)
            except KafkaException:  # (the broker did not answer in time)
                continue
            position = rewind.get(key, tp.offset if tp.offset >= 0 else self._start.get(key, low))
            result[key] = max(0, high - position) if position >= 0 and high >= 0 else None
        return result

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._app:
            self._assign(consumer, partitions)

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions or self._closing:
            # An assignment that close() serves (the group's answer arrived before a poll took
            # it) is given back at once: its committed offsets, asked of a closing client, never
            # came (close() waited 30 s for them and then raised), and the worker has no use
            # for restoring streams it would checkpoint the next moment. (The client assigns
            # them by itself; revoked unannounced, see _taken_away.)
            return
        positions: TopicOffsets | None = None
        if self._on_assign is not None:
            positions = self._on_assign([(p.topic, p.partition) for p in partitions])
        positions = positions or {}
        # Start where the worker's own durable store says it stopped (exactly-once effects),
        # else at the group's committed offset, else at the earliest retained message.
        missing = [p for p in partitions if (p.topic, p.partition) not in positions]
        committed = consumer.committed(missing, timeout=30) if missing else []
        for p in committed:
            if p.offset >= 0:
                positions[(p.topic, p.partition)] = p.offset
        for p in partitions:
            if (p.topic, p.partition) in positions:
                p.offset = positions[(p.topic, p.partition)]
                self._start[(p.topic, p.partition)] = p.offset
            else:
                p.offset = OFFSET_BEGINNING
        consumer.incremental_assign(partitions)
        self._owned |= {(p.topic, p.partition) for p in partitions}

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._taken_away(consumer, partitions, self._on_revoke)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._taken_away(consumer, partitions, self._on_lost)

    def _taken_away(
        self,
        consumer: Consumer,
        partitions: list[TopicPartition],
        callback: Callable[[list[tuple[str, int]]], None] | None,
    ) -> None:
        if not partitions:
            return
        with self._app:
            # (only what on_assign was told of: see _assign for those it was not)
            announced = [(p.topic, p.partition) for p in partitions]
            announced = [key for key in announced if key in self._owned]
            if callback is not None and announced:
                callback(announced)
            self._owned -= set(announced)
            # (assigned again, a partition starts where that assignment says: lag() counted a
            # topic deleted and created again from the old topic's offset, "caught up")
            for p in partitions:
                self._start.pop((p.topic, p.partition), None)
            consumer.incremental_unassign(partitions)

    def poll_batch(self, max_messages: int = 500, timeout: float = 1.0) -> list[Message]:
        """Up to ``max_messages`` messages: those already fetched at once, else those arriving
        within ``timeout`` seconds (fewer when it passes); partition-EOF events are dropped,
        a fatal error (also one reported by the error callback) raised as a KafkaException, a
        refusal to read (``_READ_REFUSALS``) as a SparsewatchError.

        librdkafka's ``consume(n, timeout)`` waits until ``n`` messages have arrived or the
        timeout passed, even when some are already there: the last messages of a backlog (its
        end-of-stream markers with them) waited out the timeout. A live stream's messages still
        gather for up to the timeout, so that its batches are not one message each."""
        self._apply_resets()  # those not done last time, or met by the keep-alive's polls
        batch = self._consumer.consume(num_messages=max_messages, timeout=0)
        if not batch:
            batch = self._consumer.consume(num_messages=max_messages, timeout=timeout)
        good = self._messages(batch)
        if self._fatal is not None:  # (the batch is dropped: it is not consumed, not committed)
            raise KafkaException(self._fatal)
        if self._refused is not None:
            raise SparsewatchError(
                f"the broker does not allow this client to read ({self._refused.str()}): its "
                f"principal needs READ on the consumer group {self._group_id} and on the "
                f"topics {', '.join(self._topics)}"
            )
        self._apply_resets()
        return good

    def _messages(self, batch: list[Message]) -> list[Message]:
        """The messages of ``batch`` that are not events: a fatal error is raised, a partition
        whose offset the broker does not hold is recorded in ``_resets`` (see
        :meth:`_apply_resets`), partition-EOF events are dropped, other errors logged."""
        good: list[Message] = []
        for msg in batch:
            err = msg.error()
            if err is None:
                good.append(msg)
            elif err.fatal():
                raise KafkaException(err)
            elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                topic, partition = msg.topic(), msg.partition()
                assert topic is not None and partition is not None, "a partition's event"
                # (no offset: the lookup of a logical start, the earliest message, failed)
                self._resets[(topic, partition)] = msg.offset()
            elif err.code() != KafkaError._PARTITION_EOF:
                # Broker down, transport errors, ...: librdkafka reconnects by itself.
                self._on_error(err)
        return good

    def _apply_resets(self) -> None:
        for (topic, partition), offset in list(self._resets.items()):
            self._restart_at_earliest(topic, partition, offset)

    def _restart_at_earliest(self, topic: str, partition: int, offset: int | None) -> None:
        """The broker does not hold ``offset`` of the partition (see the class docstring): go on
        at its earliest retained message, and say how many messages that skips. ``None``: the
        partition was to start at its earliest message, which could not be looked up (nothing
        is skipped)."""
        tp = TopicPartition(topic, partition)
        self._resets.pop((topic, partition), None)
        if (topic, partition) not in self._owned:
            return  # revoked since: its next owner starts from the stored offsets
        try:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=10)
            # (a partition in this error state refuses a seek: it is assigned again instead)
            if (topic, partition) in self.assignment():
                self._consumer.incremental_unassign([tp])
            self._consumer.incremental_assign([TopicPartition(topic, partition, low)])
        except KafkaException as exc:  # the broker unreachable: again at the next poll
            self._resets[(topic, partition)] = offset
            self._on_error(exc.args[0])
            return
        self._start[(topic, partition)] = low
        skipped = 0 if offset is None else max(low - offset, 0)
        if offset is None:
            log.warning(
                "%s [%d]: its earliest offset could not be looked up; reading from %d",
                topic,
                partition,
                low,
            )
        elif offset < low:
            log.error(
                "%s [%d]: offset %d is no longer on the broker: %d message(s) before %d were "
                "deleted by the topic's retention before they were read (or read again after a "
                "restart) and are skipped: results not stored before are missing, and no model "
                "learns from them again; reading on from %d. Keep retention.ms above the longest "
                "time a consumer may be down or behind, windows included",
                topic,
                partition,
                offset,
                skipped,
                low,
                low,
            )
        else:
            log.error(
                "%s [%d]: offset %d is beyond the partition's end (%d): was the topic deleted "
                "and created again? Reading from its earliest message, %d",
                topic,
                partition,
                offset,
                high,
                low,
            )
        if self._on_reset is not None:
            self._on_reset(topic, partition, skipped)

    def commit(self, messages: Iterable[Message]) -> None:
        """Synchronously commit the offsets just after ``messages``."""
        self.commit_offsets(next_offsets(messages))

    def commit_offsets(self, offsets: TopicOffsets, asynchronous: bool = False) -> None:
        """Commit explicit next-offsets per (topic, partition): synchronously (errors raised), or
        sent in the background (a failure is logged when a later poll serves its outcome; the
        consumer's close waits for commits in flight)."""
        if not offsets:
            return
        with self._mode:
            if self._polled_elsewhere() and asynchronous:  # sent when keepalive() ends
                for key, offset in offsets.items():
                    self._deferred[key] = max(offset, self._deferred.get(key, offset))
                return
            # (the client's type stubs take `asynchronous` as a literal True or False)
            positions = self.positions_for(offsets)
            if asynchronous:
                self._consumer.commit(offsets=positions, asynchronous=True)
            else:
                self._consumer.commit(offsets=positions, asynchronous=False)

    def group_metadata(self) -> Any:
        """The consumer group's metadata, for a transactional producer's
        ``send_offsets_to_transaction`` (which fences members of an older generation)."""
        return self._consumer.consumer_group_metadata()

    @staticmethod
    def positions_for(offsets: TopicOffsets) -> list[TopicPartition]:
        """``offsets`` as the client's list of TopicPartitions."""
        return [TopicPartition(t, p, o) for (t, p), o in offsets.items()]

    def rewind_to_committed(self) -> None:
        """Send every owned partition back to the group's committed offset (the earliest
        retained message where none is committed): what was read since is read again."""
        self.rewind({})

    def rewind(
        self, positions: TopicOffsets, partitions: Iterable[tuple[str, int]] | None = None
    ) -> None:
        """Send every owned partition (of ``partitions``, if given) back to its offset in
        ``positions`` (where a worker's store says it stopped), else to the group's committed
        offset, else to the earliest retained message, as an assignment starts: what was read
        since is read again (the client drops what it had fetched beyond)."""
        assigned = self._consumer.assignment()
        if partitions is not None:
            wanted = set(partitions)
            assigned = [tp for tp in assigned if (tp.topic, tp.partition) in wanted]
        missing = [tp for tp in assigned if (tp.topic, tp.partition) not in positions]
        committed = self._consumer.committed(missing, timeout=30) if missing else []
        starts = dict(positions)
        for tp in committed:
            if tp.offset >= 0:
                starts[(tp.topic, tp.partition)] = tp.offset
        for tp in assigned:
            key = (tp.topic, tp.partition)
            offset = starts.get(key, OFFSET_BEGINNING)
            self._consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
            if key in starts:
                self._start[key] = offset

    def assignment(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this consumer owns now."""
        return [(p.topic, p.partition) for p in self._consumer.assignment()]

    def member_id(self) -> str | None:
        """The id the group gave this member, None before it joined. It comes with the group's
        first answer, which a broker can hold for ``group.initial.rebalance.delay.ms`` before
        the assignment (3 s by default, for the first member of an empty group); a member given
        no partition (more members than partitions) has one too."""
        return self._consumer.memberid()

    def brokers_down_since(self) -> float | None:
        """When (``time.monotonic()``) the client reported every broker down, if none has been
        seen up again since (its statistics, every :data:`STATISTICS_INTERVAL_MS`); else None."""
        return self._down_since

    def matches_no_topic(self, timeout: float = 5.0) -> bool:
        """Whether no topic of the cluster is subscribed: none of the subscribed names exists
        and no ``^pattern`` matches one (topics named ``__...`` are the broker's own). Such a
        consumer is never assigned anything, and librdkafka says so with no callback at all.
        An unreachable broker is not known to have none: False."""
        try:
            topics = self._consumer.list_topics(timeout=timeout).topics
        except KafkaException:
            return False
        names = [name for name in topics if not name.startswith("__")]
        for source in self._topics:
            if source.startswith("^"):
                pattern = re.compile(source)
                if any(pattern.search(name) for name in names):
                    return False
            elif source in topics:
                return False
        return True

    def lag(self) -> dict[tuple[str, int], int | None]:
        """Messages behind the high watermark for each owned partition; ``None`` while unknown.

        The watermarks come from fetch responses: until the first one the lag is unknown, and an
        unknown lag is not "caught up". Before its first message the consumer's position is where
        the assignment started it or, without a start offset, the low watermark (earliest).
        """
        with self._mode:
            if self._polled_elsewhere():  # unknown (see keepalive())
                return dict.fromkeys(self._owned)
            result: dict[tuple[str, int], int | None] = {}
            assigned = self._consumer.assignment()
            for tp in self._consumer.position(assigned) if assigned else []:
                low, high = self._consumer.get_watermark_offsets(tp, cached=True) or (-1, -1)
                start = self._start.get((tp.topic, tp.partition), low)
                position = tp.offset if tp.offset >= 0 else start
                known = position >= 0 and high >= 0
                result[(tp.topic, tp.partition)] = max(0, high - position) if known else None
            return result

    def close(self) -> None:
        """Leave the group (revoking partitions through the callbacks) and free resources."""
        self._closing = True
        self._consumer.close()

    def __enter__(self) -> BatchConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
