"""The Kafka edge shared by the detector and anomaly workers: consume, route, write, then commit.

One :class:`WorkerLoop` owns a consumer, a producer (dead letters and results) and the SQL store.
What is computed lives in a :class:`Processor` (per stream: a :class:`StreamState`; their contract
is :mod:`sparsewatch.consumers.processor`), which never sees Kafka or SQL. Effects are exactly
once:

1. messages of a batch are routed to per-stream states; invalid messages become dead letters;
2. a closed window is computed; its downstream messages are produced and flushed;
3. ONE SQL transaction writes its results (with those of the windows that closed while the
   previous transaction was still in flight: one per window cost O(streams) each, for the resume
   offsets), the checkpoints that are due, the dead letters so far and the resume offset of each
   partition (the rest of the batch follows the same way);
4. only then are the offsets committed to Kafka, without waiting for the broker's answer
   (informational: the store is the source of truth).

Steps 2 and 3 run on a writer (:mod:`sparsewatch.consumers.writer`: a child process by default, or
a thread) while the loop computes the next window (write-behind, at most one transaction in
flight, in order): producing, flushing and the SQL round trips overlap with the numerical work
instead of adding to it. What the writer gets is plain data (result rows, and checkpoints as
copies of the models' arrays taken when the job is handed over; the writer serialises them to
npz), never live model state; its error, if any, is raised on the loop's thread before the next
transaction is handed over, and every rebalance callback, the clean shutdown and the synchronous
checkpoint wait for the transaction in flight first. A crash with a transaction in flight is a
crash before its commit: the stored resume offsets still point before its messages (and a writer
process dies with its worker).

Checkpoints are written every ``checkpoint_every`` windows of a stream (and always after a window
closed by the idle timer, at an end-of-stream marker, on revocation and on a clean shutdown), not
after every window: a stream's model state is megabytes, its window's results kilobytes. The resume
offset of a partition is therefore the smallest *replay anchor* of its streams: for a stream with
windows computed since its checkpoint, where Kafka must be re-read from to recompute them; otherwise
the first offset it still buffers. A crash anywhere re-delivers from the stored resume offsets; the
restored states recompute the windows after their checkpoint from the same messages in the same
order (windows closed by watermark or count are deterministic), recognise what they already
consumed, and every insert is keyed by a natural key, so nothing is lost or duplicated. On partition
assignment the loop seeks to the stored resume offsets; on revocation it checkpoints the partitions'
streams, then drops them (their open windows will be re-read by the new owner). A batch is worked
on inside :meth:`BatchConsumer.keepalive`: a window may take longer to compute than the broker's
``max.poll.interval.ms`` allows between polls, and the partitions would otherwise be taken away
and the same windows recomputed for ever.

Bounds in the number of streams and the length of the stream. A stream that has gone quiet (nothing
of it read for ``idle_checkpoint_s`` while its partition was read up to date: the processor's idle
timeout) with windows since its checkpoint and nothing buffered is checkpointed at once: otherwise
its replay anchor held its partition's resume offset back until its next ``checkpoint_every``
windows, possibly for ever (a count window that ended on the stream's last message, any quiet stream
of the anomaly worker), and a crash replayed everything its partition had carried since. A stream
that announces its end (an end-of-stream marker) is checkpointed in the transaction of the windows
the marker closed, without waiting to be quiet. With ``max_checkpoint_age_s`` (the runner sets it
from the input topic's retention, ``sparsewatch/runner.py``), a stream with windows since a
checkpoint that old (wall clock) is checkpointed with its next window, so what a crash re-reads
stays within the topic's retention on a live stream. A quiet stream's state, once checkpointed and
with nothing buffered, is only a cache of its checkpoint: at most ``max_idle_states`` idle streams
(the most recently active) stay in memory, the others are dropped and restored from their checkpoint
when the stream speaks again (after the transaction holding that checkpoint is stored). An idle
stream beyond them that still holds an open window (a live stream's current window stays open until
the wall clock passes its end, ``windows.idle_close``) has its windows closed at once, as
``idle_close = "all"`` would, and is dropped once they are checkpointed: memory stays bounded by the
streams active within the idle timeout. Without that every stream ever seen kept its models resident
until its partition was revoked: measured, a detector stream holds 10-250 MB (its dictionary, the
MOR-NMF ring of 16 MB at 20,000 terms, the dynamic NMF window), so a worker's memory grew with the
number of streams. What stays per stream seen is its partition (a dictionary entry, needed to refuse
a stream spread over two partitions).

Every checkpoint records the input topic it was taken reading (``meta["source"]``: its name and
Kafka topic id). A worker refuses to start over a checkpoint of its group taken from an earlier
topic of its input topic's name (deleted and created again), and to restore a stream's
checkpoint taken from a topic of another name (the prefix changed under the same group):
:class:`InputTopicChangedError`, whose message names ``sparsewatch db forget-group``. Restored,
its offsets made the stream take the new topic's messages for messages read before.

A member whose partitions the group gave to another without a revocation (its session expired:
a stall, a network partition from the broker but not from the database) learns of it only at its
next poll, or never while cut off; meanwhile its transactions, last write wins, would replace the
new owner's checkpoints and resume offsets with older ones. So the loop claims each partition the
group assigns it (:meth:`~sparsewatch.storage.store.Store.claim_partitions`, before it reads the
resume offsets), and each of its transactions stores nothing once another member has claimed one
of its partitions since (:class:`~sparsewatch.storage.store.PartitionsFencedError`). Fenced off,
the loop drops every stream's state (all of them were ahead of the store by that transaction),
leaves the claimed partitions' messages to their owner until the group takes them away or
assigns them again, and re-reads its other partitions from the stored resume offsets. A fenced
partition the group still gives this member after ``fenced_grace_s`` (the group's state deleted
under a running worker, or a claim of a member expelled meanwhile that landed after its new
owner's) stops the worker (:class:`PartitionsStillFencedError`): its messages would otherwise be
skipped for ever; started again, it claims what the group assigns it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaException, Message
from sparsewatch.consumers.health import ConsumerReadiness, Heartbeat
from sparsewatch.consumers.kafka_admin import ensure_topics, refuse_compacted_topics, topic_id
from sparsewatch.consumers.kafka_client import BatchConsumer
from sparsewatch.consumers.memory import FreeHeapBound, release_free_heap
from sparsewatch.consumers.messages import InvalidMessageError
from sparsewatch.consumers.metrics import WorkerMetrics
from sparsewatch.consumers.processor import Output, Processor, StreamState
from sparsewatch.consumers.retry import with_backoff
from sparsewatch.consumers.writer import Destination, Pending, WriteJob, Writer, make_writer
from sparsewatch.storage.store import Checkpoint, PartitionsFencedError, Store

from sparsewatch.errors import SparsewatchError

log = logging.getLogger(__name__)
T = TypeVar("T")


class InputTopicChangedError(SparsewatchError):
    """A stream's checkpoint was taken reading another input topic (another name, or an earlier
    topic of this name): its offsets are not this topic's."""


BROKER_GRACE_S = 30.0
# what a worker in its ``computing`` phase does (see consumers/health.py)
_COMPUTING = "its batch and the windows it closes, the consumer kept in its group meanwhile"


def _kafka_ms(msg: Message) -> int | None:
    """The message's Kafka timestamp (epoch ms; the producer's or the broker's clock, as the
    topic says), None when it has none."""
    kind, ms = msg.timestamp()
    return ms if kind != TIMESTAMP_NOT_AVAILABLE and ms >= 0 else None


def _dead_letter(msg: Message, exc: Exception) -> dict[str, Any]:
    """The dead-letter row of a message its parser refused. Parsers raise
    :class:`InvalidMessageError` with the reason; anything else is a parser bug, logged, and the
    message still goes to the dead letters instead of stopping the worker on every restart."""
    if isinstance(exc, InvalidMessageError):
        reason = exc.reason
    else:
        log.error("unexpected parser error", exc_info=exc)
        reason = f"unexpected parser error: {type(exc).__name__}: {str(exc)[:200]}"
    return {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "reason": reason,
        "payload": msg.value() or b"",
    }


@dataclass
class _Partition:
    streams: set[str] = field(default_factory=set)
    next_offset: int | None = None
    # The latest time at which everything the partition then held has been read since; the
    # high watermarks seen while behind, with when, until read up to.
    read_up_to_at: float = float("-inf")
    highs: deque[tuple[float, int]] = field(default_factory=deque)

    def observe_lag(self, now: float, lag: int) -> None:
        """Note that ``lag`` messages are left to read at ``now`` (after the batch read)."""
        while self.highs and self.next_offset is not None and self.highs[0][1] <= self.next_offset:
            self.read_up_to_at = self.highs.popleft()[0]
        if lag == 0:
            self.read_up_to_at = now
            self.highs.clear()
        elif self.next_offset is not None:
            high = self.next_offset + lag
            while self.highs and self.highs[-1][1] >= high:
                self.highs.pop()  # it held no more at ``now``: the later time says more
            self.highs.append((now, high))


FENCED_GRACE_S = 60.0
"""How long a fenced partition may stay assigned to the worker (the group should take it away
within its session timeout, 10 s) before the worker stops (:class:`PartitionsStillFencedError`)."""


class PartitionsStillFencedError(SparsewatchError):
    """Partitions claimed by another member stayed assigned to this worker for
    ``fenced_grace_s``: the worker stops rather than skip their messages for ever."""


class _FencedOffError(Exception):
    """The transaction in flight was fenced off (see the module docstring): the batch being
    worked on is abandoned, its partitions re-read from the store."""


@dataclass
class _InFlight:
    """The transaction on the writer; ``done.result()`` gives the time it was committed."""

    done: Pending
    outputs: list[Output]
    offsets: dict[int, int]
    n_dead: int
    checkpointed: frozenset[str] = frozenset()


class WorkerLoop:
    """Consume ``input_topic`` with ``processor``; write to ``store``; stop on SIGTERM/SIGINT.
    Its progress goes to ``health`` (:mod:`~sparsewatch.consumers.health`: what ``/healthz`` and
    ``/readyz`` judge): each poll, the batch worked on inside the consumer's keep-alive
    (``computing``), the waits for its writer (``writing``) and for database calls of its own
    (``database``), the waits between retries of either (``retrying``, each counted in
    ``metrics``), its stop and how it ended. With
    ``alerts_topic`` (created with ``partitions``), every alert it stores is also published there,
    after its transaction (:meth:`~sparsewatch.consumers.writer.ResultWriter.send_pending_alerts`:
    an outbox)."""

    def __init__(
        self,
        processor: Processor,
        store: Store,
        bootstrap: str,
        group_id: str,
        input_topic: str,
        output_topic: str | None,
        dlq_topic: str,
        partitions: int = 4,
        poll_batch: int = 1000,
        metrics: WorkerMetrics | None = None,
        checkpoint_every: int = 1,
        poll_timeout_s: float = 0.5,
        writer: str = "process",
        heap_free_limit_mb: float = 64.0,
        max_idle_states: int = 16,
        idle_checkpoint_s: float | None = None,
        consumer_overrides: dict[str, Any] | None = None,
        health: Heartbeat | None = None,
        alerts_topic: str | None = None,
    ) -> None:
        self.processor = processor
        self.health = health or Heartbeat(processor.name)
        self.store = store
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.input_topic = input_topic
        # the input topic as each checkpoint records it (meta "source"): its name, and its id
        # once run() has asked the broker (see InputTopicChangedError)
        self._source: dict[str, str] = {"topic": input_topic}
        self.output_topic = output_topic
        self.dlq_topic = dlq_topic
        self.poll_batch = poll_batch
        self.checkpoint_every = max(int(checkpoint_every), 1)
        # A stream with windows since its checkpoint is checkpointed once that checkpoint is this
        # old by the wall clock (see the module docstring); None: no limit. Set after the input
        # topic exists, from its retention (sparsewatch/runner.py).
        self.max_checkpoint_age_s: float | None = None
        # How long a poll waits for messages: also how late an idle window may close.
        self.poll_timeout_s = poll_timeout_s
        self.metrics = metrics or WorkerMetrics(processor.name)
        self.health.count_waits(self.metrics.retried)
        self.writer_mode = writer
        # Free heap memory kept for reuse between windows of a backlog (see consumers/memory.py).
        self.heap_bound = FreeHeapBound(int(heap_free_limit_mb * (1 << 20)))
        # Quiet streams: checkpointed after this silence, at most this many kept in memory.
        self.max_idle_states = max(int(max_idle_states), 0)
        self.idle_checkpoint_s = (
            processor.idle_timeout_s if idle_checkpoint_s is None else idle_checkpoint_s
        )
        # librdkafka settings over :func:`~sparsewatch.consumers.kafka_client.consumer_config`'s
        self.consumer_overrides = dict(consumer_overrides or {})
        self.destination = Destination(
            bootstrap,
            group_id,
            input_topic,
            output_topic,
            dlq_topic,
            alerts_topic,
            alert_kinds=processor.alert_kinds,
        )
        topics = {input_topic: partitions, dlq_topic: 1}
        for topic in (output_topic, alerts_topic):
            if topic:
                topics[topic] = partitions
        ensure_topics(bootstrap, topics)
        refuse_compacted_topics(bootstrap, (input_topic, output_topic))
        self.window_latencies: deque[float] = deque(maxlen=10_000)
        self.last_commit_at = 0.0
        self.first_message_at = 0.0
        self._states: dict[str, StreamState] = {}
        self._stream_partition: dict[str, int] = {}
        self._partitions: dict[int, _Partition] = {}
        # Replay anchors (see the module docstring); windows computed since each checkpoint;
        # streams whose next checkpoint may not wait (a window closed by the wall clock).
        self._anchor: dict[str, int] = {}
        self._dirty: dict[str, int] = {}
        self._forced: set[str] = set()
        # When each stream in memory was last checkpointed (wall clock, epoch seconds).
        self._checkpointed_at: dict[str, float] = {}
        # When a message of each stream in memory was last read (the batch's monotonic time).
        self._last_read: dict[str, float] = {}
        # False while in-memory states are ahead of the store (a batch not yet committed): no
        # checkpoint may then be written by a revocation or a shutdown.
        self._consistent = True
        self._warned_crowded = False
        self._stop = threading.Event()
        self._consumer: BatchConsumer | None = None
        self._writer: Writer | None = None  # one per run()
        self._in_flight: _InFlight | None = None
        # The resume offsets of the last transaction handed to the writer: a batch that closes
        # nothing and leaves them unchanged needs no transaction.
        self._submitted_offsets: dict[int, int] | None = None
        # The token of each partition claimed on assignment (Store.claim_partitions); those
        # claimed by another member since (fenced off: their messages are skipped until the group
        # takes them away or assigns them again); whether the partitions still owned are to be
        # re-read from the stored resume offsets (a transaction was fenced off).
        self._owners: dict[int, str] = {}
        self._fenced: set[int] = set()
        self._fenced_since = 0.0  # (monotonic) when the first of them was fenced off
        self.fenced_grace_s = FENCED_GRACE_S
        self._rewind_due = False

    @property
    def streams_in_memory(self) -> frozenset[str]:
        """The streams whose state is in memory now (see the module docstring)."""
        return frozenset(self._states)

    # -- lifecycle -------------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to finish its current batch and return (thread- and signal-safe). An
        operation waiting to be retried (the database or broker down) is abandoned instead:
        nothing of it is committed, and the next start resumes from the last commit."""
        self._stop.set()
        self.health.stop_requested()
        if self._writer is not None:
            self._writer.abandon_retries()

    def run(
        self,
        until_idle_s: float | None = None,
        upstream_running: Callable[[], bool] | None = None,
    ) -> None:
        """Process until :meth:`stop`, or until the input has been drained for ``until_idle_s``;
        with ``upstream_running``, the input counts as drained only once that says the workers
        producing it have stopped (``sparsewatch run all``: the anomaly worker's input stays
        empty while the detector computes its first windows)."""
        self.health.started()
        try:
            self._run(until_idle_s, upstream_running)
        except BaseException as exc:
            self.health.finished(exc)
            raise
        self.health.finished()

    def _run(self, until_idle_s: float | None, upstream_running: Callable[[], bool] | None) -> None:
        """The body of :meth:`run`."""
        self._source = self._input_source()
        self._writer = make_writer(
            self.writer_mode,
            self.store,
            self.destination,
            self.processor.name,
            on_retry=self._writer_waits,
        )
        if self._stop.is_set():  # asked before the writer existed: it sends pending alerts
            self._writer.abandon_retries()
        try:
            self._consumer = BatchConsumer(
                self.bootstrap,
                self.group_id,
                [self.input_topic],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
                on_reset=self.metrics.skipped,
                on_lag=self.metrics.set_lag,
                **self.consumer_overrides,
            )
        except BaseException:
            self._writer.close()  # (a process writer would otherwise outlive the failed start)
            raise
        quiet_since = time.monotonic()
        busy = False
        readiness = ConsumerReadiness(self._consumer, self.health)
        try:
            while not self._stop.is_set():
                # A writer process killed while no job was in flight stops the worker now, not
                # when the next window's transaction finds it gone (a whole window later).
                self._writer.raise_if_gone()
                batch = self._consumer.poll_batch(self.poll_batch, timeout=self.poll_timeout_s)
                if self._rewind_due:  # (read beyond the store: read again once rewound)
                    batch = []
                    self._rewind_if_fenced()
                self._stop_if_still_fenced()
                now = time.monotonic()
                self.health.beat(readiness.why_not(now))
                if batch:  # the lag while it is worked on (an empty poll sets it below)
                    self.metrics.set_lag(self._consumer.lag())
                # "Idle" means drained: nothing read, nothing left to read, the broker reachable,
                # and no worker upstream still producing.
                if batch and not self.first_message_at:
                    self.first_message_at = time.perf_counter()
                fed = upstream_running is not None and upstream_running()
                if batch or fed or self._lagging_partitions(now) or not self._partitions:
                    quiet_since = now
                # (a day's window, or a database outage waited out, may outlast the broker's
                # max.poll.interval.ms: the consumer keeps this member in its group meanwhile)
                with self.health.phase("computing", _COMPUTING), self._consumer.keepalive():
                    self._work_on(batch, now)
                if busy and not batch:  # the input went quiet: give freed heap memory back
                    release_free_heap()
                busy = bool(batch)
                if until_idle_s is not None and now - quiet_since > until_idle_s:
                    break
            with (
                self.health.phase("stopping", "checkpointing its streams"),
                self._consumer.keepalive(),
            ):
                self._settle()
                self._checkpoint_dirty(set(self._partitions))
        finally:
            # After an error: let the transaction in flight end (committed or rolled back) before
            # the clients close; its own error, if any, is not the one being raised.
            self._writer.close()
            self._consumer.close()

    def _work_on(self, batch: list[Message], now: float) -> None:
        """Process ``batch``, and account for the transaction in flight if it is done; a
        fenced transaction abandons the batch (re-read at the next iteration), inside the
        consumer's keep-alive, which then raises what its own polls' callbacks raised."""
        with contextlib.suppress(_FencedOffError):
            self._process(batch, now)
            if self._in_flight is not None and self._in_flight.done.ready():
                self._wait_written()  # account for it now, not at the next transaction

    # -- rebalancing -----------------------------------------------------------------------------
    def _on_assign(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self._settle()
        self._submitted_offsets = None
        assigned = [p for _, p in partitions]
        # (claimed first: a transaction of the previous owner still in flight is then either
        # stored before the offsets are read, or fenced off)
        claimed = self._retried(
            lambda: self.store.claim_partitions(self.group_id, self.input_topic, assigned),
            "claiming its partitions",
        )
        self._owners.update(claimed)
        self._fenced -= set(assigned)
        stored = self._retried(
            lambda: self.store.partition_offsets(self.group_id, self.input_topic),
            "reading resume offsets",
        )
        for _, p in partitions:
            self._partitions.setdefault(p, _Partition())
        log.info("%s assigned %s (resume %s)", self.processor.name, partitions, stored)
        return {(t, p): stored[p] for t, p in partitions if p in stored}

    def _on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        self._settle()
        self._checkpoint_dirty({p for _, p in partitions})
        self._drop(partitions)
        self._disown(partitions)
        self._submitted_offsets = None
        log.info("%s revoked %s", self.processor.name, partitions)

    def _on_lost(self, partitions: list[tuple[str, int]]) -> None:
        """Partitions taken away (session timeout): their new owner replays; write nothing more
        (the transaction in flight is stored only if it comes before the new owner's claim)."""
        self._settle()
        self._drop(partitions)
        self._disown(partitions)
        self._submitted_offsets = None
        log.warning("%s lost %s", self.processor.name, partitions)

    def _drop(self, partitions: list[tuple[str, int]]) -> None:
        for _, p in partitions:
            part = self._partitions.pop(p, None)
            for stream in part.streams if part else ():
                self._states.pop(stream, None)
                self._checkpointed_at.pop(stream, None)
                self._stream_partition.pop(stream, None)
                self._anchor.pop(stream, None)
                self._dirty.pop(stream, None)
                self._forced.discard(stream)
                self._last_read.pop(stream, None)

    def _disown(self, partitions: list[tuple[str, int]]) -> None:
        for _, p in partitions:
            self._owners.pop(p, None)
            self._fenced.discard(p)

    def _settle(self) -> None:
        """Wait for the transaction in flight, as :meth:`_wait_written`; one fenced off leaves
        its partitions to be re-read (:meth:`_fenced_off`) and is not raised."""
        with contextlib.suppress(_FencedOffError):
            self._wait_written()

    def _fenced_off(self, exc: PartitionsFencedError) -> None:
        """A transaction stored nothing: ``exc.partitions`` are another member's now. Every
        stream's state was ahead of the store by it: all are dropped; the fenced partitions'
        messages are skipped from now on (:meth:`_not_fenced`), and the others are re-read
        from the stored resume offsets before the next batch (:meth:`_rewind_if_fenced`)."""
        log.error(
            "%s: %s; its other partitions are read again from the stored resume offsets",
            self.processor.name,
            exc,
        )
        kept = set(self._partitions) - exc.partitions
        self._drop([(self.input_topic, p) for p in list(self._partitions)])
        self._partitions.update((p, _Partition()) for p in kept)
        for p in exc.partitions:
            self._owners.pop(p, None)
        if not self._fenced:
            self._fenced_since = time.monotonic()
        self._fenced |= exc.partitions
        self._submitted_offsets = None
        self._consistent = True  # (nothing in memory is ahead of the store any more)
        self._rewind_due = True

    def _rewind_if_fenced(self) -> None:
        """After :meth:`_fenced_off`: send the partitions still owned (not the fenced ones)
        back to their stored resume offsets (what was read since is read again). The broker not
        answering (a partition without a stored offset starts at the group's committed one), it
        is tried again after the next poll, whose messages are left unread meanwhile."""
        assert self._consumer is not None, "rewound only inside run()"
        stored = self._retried(
            lambda: self.store.partition_offsets(self.group_id, self.input_topic),
            "reading resume offsets",
        )
        kept = [(self.input_topic, p) for p in self._owners]
        try:
            self._consumer.rewind(
                {(self.input_topic, p): o for p, o in stored.items() if p in self._owners}, kept
            )
        except KafkaException as exc:
            log.warning(
                "%s: re-reading its partitions failed, tried again: %s", self.processor.name, exc
            )
            return
        self._rewind_due = False

    def _stop_if_still_fenced(self) -> None:
        """Raise :class:`PartitionsStillFencedError` when a fenced partition is still assigned
        to this worker ``fenced_grace_s`` after it was fenced off (see the module docstring)."""
        if not self._fenced or time.monotonic() - self._fenced_since < self.fenced_grace_s:
            return
        assert self._consumer is not None, "fenced only inside run()"
        still = sorted(p for t, p in self._consumer.assignment() if p in self._fenced)
        if not still:
            return
        raise PartitionsStillFencedError(
            f"{self.processor.name}: partitions {', '.join(map(str, still))} of "
            f"{self.input_topic!r} are claimed in the database by another member of group "
            f"{self.group_id!r}, while the group has assigned them to this worker for "
            f"{self.fenced_grace_s:g} s since (was the group's state deleted under a running "
            "worker, with 'db forget-group'?): the worker stops rather than skip their messages; "
            "started again, it claims the partitions the group assigns it"
        )

    def _input_source(self) -> dict[str, str]:
        """The input topic's name and id, which every checkpoint records. Refuses to start
        (:class:`InputTopicChangedError`) when a checkpoint of the group was taken reading an
        earlier topic of this name (deleted and created again: the stored offsets point into
        the new topic, and a restored stream took the new messages below its old offsets for
        messages read before, and dropped them). A broker that does not say the id (or a
        checkpoint written before ids were recorded) is not checked."""
        source = {"topic": self.input_topic}
        found = topic_id(self.bootstrap, self.input_topic)
        if found is not None:
            source["topic_id"] = found
        metas = self._retried(
            lambda: self.store.checkpoint_metas(self.group_id), "reading the checkpoints"
        )
        for stream, meta in sorted(metas.items()):
            recorded = meta.get("source")
            if isinstance(recorded, dict) and recorded.get("topic") == self.input_topic:
                self._refuse_another_source(stream, recorded, source)
        return source

    def _refuse_another_source(
        self, stream: str, recorded: dict[str, Any], source: dict[str, str]
    ) -> None:
        """Raise :class:`InputTopicChangedError` when ``stream``'s checkpoint, which recorded
        reading ``recorded``, was not taken reading the topic ``source``."""
        old_id, new_id = recorded.get("topic_id"), source.get("topic_id")
        if recorded.get("topic") != source["topic"]:
            why = f"was taken reading topic {recorded.get('topic')!r}, not {source['topic']!r}"
        elif old_id and new_id and old_id != new_id:
            why = (
                f"was taken reading an earlier topic {source['topic']!r}, deleted and created "
                f"again since (topic id {old_id} then, {new_id} now)"
            )
        else:
            return
        raise InputTopicChangedError(
            f"{self.processor.name}: the checkpoint of stream {stream!r} in group "
            f"{self.group_id!r} {why}: its offsets are not this topic's, and restoring it would "
            "drop this topic's messages below them. Start the group afresh with 'sparsewatch db "
            f"forget-group {self.group_id}' (its checkpoints and resume offsets; the stored "
            "results stay), or set another kafka.group_id"
        )

    def _checkpoint(self, stream: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """``stream``'s checkpoint, its metadata recording the input topic read."""
        state, meta = self._states[stream].checkpoint()
        return state, {**meta, "source": self._source}

    def _checkpoint_dirty(self, partitions: set[int]) -> None:
        """Checkpoint every stream of ``partitions`` with windows since its last checkpoint, and
        store the partitions' resume offsets, in one transaction (revocation, clean shutdown;
        called with no transaction in flight)."""
        if not self._consistent:
            return  # the states are ahead of the store: let the next owner replay instead
        due = {s for s in self._dirty if self._stream_partition.get(s) in partitions}
        if not due:
            return
        checkpoints = {s: self._checkpoint(s) for s in due}
        offsets = {p: o for p, o in self._resume_offsets(clean=due).items() if p in partitions}
        owners = {p: token for p, token in self._owners.items() if p in partitions}

        def transaction() -> None:
            with self.store.transaction() as tx:
                tx.check_owners(self.group_id, self.input_topic, owners)
                for stream, (state, meta) in checkpoints.items():
                    tx.put_checkpoint(self.group_id, stream, state, meta)
                if offsets:
                    tx.set_partition_offsets(self.group_id, self.input_topic, offsets)

        try:
            self._retried(transaction, "writing checkpoints")
        except PartitionsFencedError as exc:  # (their new owner re-reads them)
            log.warning("%s: checkpoints not written: %s", self.processor.name, exc)
            return
        self._mark_checkpointed(due)

    def _writer_waits(self, what: str, seconds: float) -> None:
        """The writer waits ``seconds`` before retrying ``what`` (its ``on_retry``): the loop's
        wait too while the loop waits for it (``writing``); counted only otherwise, when the
        report is read as the loop polls or computes (a wait shown then would stand for the
        rest of a window computed for longer than ``health_stall_s``: not alive)."""
        if self.health.state in ("writing", "retrying"):
            self.health.waiting(what, seconds)
        else:
            self.metrics.retried()

    def _retried(self, action: Callable[[], T], what: str) -> T:
        """``action``, a database call of the loop's own, retried with backoff through an outage
        (:func:`with_backoff`; abandoned on :meth:`stop`): ``database`` to its heartbeat, the
        waits between attempts ``retrying``."""
        with self.health.phase("database", what):
            return with_backoff(action, what, stop=self.health.retry_stop(self._stop, what))

    # -- one batch -------------------------------------------------------------------------------
    def _state_for(self, stream: str, partition: int, offset: int) -> StreamState:
        owner = self._stream_partition.get(stream)
        if owner is not None and owner != partition:
            # Its windows, offsets and checkpoints follow one partition: a second one would be
            # dropped as "seen", or replayed from the wrong offset after a restart.
            raise InvalidMessageError(
                f"stream {stream!r} arrives on partition {partition} but is read from partition "
                f"{owner}: a stream's messages must share one partition (key them by stream id, "
                "and have every producer of the topic hash keys alike: sparsewatch's producers "
                "use kafka.client.partitioner, librdkafka's consistent_random unless set; the "
                "Java clients' is murmur2_random)"
            )
        state = self._states.get(stream)
        if state is None:
            if self._in_flight is not None and stream in self._in_flight.checkpointed:
                self._wait_written()  # a stream dropped for quiet: its checkpoint is in flight
            # Everything before this message is in the checkpoint (or precedes the stream).
            self._anchor[stream] = offset
            checkpoint = self._retried(
                lambda: self.store.load_checkpoint(self.group_id, stream), "reading a checkpoint"
            )
            self._check_source(stream, checkpoint)
            state = self.processor.new_state(stream, checkpoint)
            self._states[stream] = state
            self._checkpointed_at[stream] = (
                checkpoint.created_at.timestamp() if checkpoint is not None else time.time()
            )
        if owner is None:
            self._stream_partition[stream] = partition
            self._partitions.setdefault(partition, _Partition()).streams.add(stream)
        return state

    def _check_source(self, stream: str, checkpoint: Checkpoint | None) -> None:
        """Refuse to restore a checkpoint taken reading another input topic (another name: the
        topic prefix changed under the same group; an earlier topic of this name: written by
        another worker after this one started): :meth:`_refuse_another_source`."""
        recorded = None if checkpoint is None else checkpoint.meta.get("source")
        if isinstance(recorded, dict):
            self._refuse_another_source(stream, recorded, self._source)

    def _process(self, batch: list[Message], now: float) -> None:
        self._consistent = False
        batch = self._not_fenced(batch)
        outputs: list[Output] = []
        dead: list[dict[str, Any]] = []
        pending = False  # messages consumed since the last commit
        for msg in batch:
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None, "poll_batch drops events"
            self._partitions.setdefault(partition, _Partition()).next_offset = offset + 1
            pending = True
            try:
                item = self.processor.parse(msg.value(), _kafka_ms(msg))
            except Exception as exc:  # no input may stop the worker
                dead.append(_dead_letter(msg, exc))
                continue
            stream = self.processor.stream_of(item)
            try:
                produced = self._state_for(stream, partition, offset).add(
                    item, partition, offset, now
                )
            except InvalidMessageError as exc:  # well-formed, but inconsistent with its stream
                dead.append(_dead_letter(msg, exc))
                continue
            self._last_read[stream] = now
            self._count_windows(stream, produced, forced=False)
            if self.processor.ends_stream(item) and stream in self._dirty:
                self._forced.add(stream)  # checkpointed with its last windows (see the docstring)
            outputs += produced
            if outputs and (self._in_flight is None or self._in_flight.done.ready()):
                # Hand closed windows over at once, not after the rest of the batch: their latency
                # is then their own computation plus one transaction. While a transaction is in
                # flight they wait for it as they would in _commit, but in the next transaction
                # together: one per closed window cost O(streams) each (the resume offsets).
                self._commit(outputs, dead)
                outputs, dead, pending = [], [], False
                self.heap_bound.check()
        self._lagging_partitions(now)
        idle = self._idle_streams()
        crowded = set(idle[: max(len(idle) - self.max_idle_states, 0)])
        to_wall_s = time.time() - time.monotonic()  # ``now`` and the read times are monotonic
        for stream, state in self._states.items():
            part = self._partitions.get(self._stream_partition.get(stream, -1))
            silent_until = part.read_up_to_at if part else float("-inf")
            # A crowded stream's windows close whatever the wall clock (see the module docstring)
            wall_ms = math.inf if stream in crowded else (silent_until + to_wall_s) * 1000
            closed = state.close_idle(silent_until, wall_ms)
            # Forced only when the idle timer closed a window (the wall clock decided, so no
            # replay would recompute it): close_idle also hands over the late documents waiting,
            # which leave the stream dirty for the usual schedule (every batch holding a late
            # document wrote the stream's whole model state, 10-250 MB, before)
            self._count_windows(stream, closed, forced=any(o.is_window for o in closed))
            outputs += closed
            if stream in crowded and any(o.is_window for o in closed):
                self._warn_crowded(stream)
        quiet = [s for s in idle if self._nothing_buffered(s)]
        checkpoint_quiet = bool({s for s in quiet if s in self._dirty} - self._forced)
        self._forced |= {s for s in quiet if s in self._dirty}
        if outputs or dead or pending or checkpoint_quiet:
            self._commit(outputs, dead)
            if outputs:  # (the windows of many streams mostly go here, together)
                self.heap_bound.check()
        for stream in quiet:  # a crowded quiet stream's state is a cache of its checkpoint
            if stream in crowded and stream not in self._dirty:
                del self._states[stream]
                self._checkpointed_at.pop(stream, None)
                self._anchor.pop(stream, None)
                self._last_read.pop(stream, None)
        self._consistent = True

    def _not_fenced(self, batch: list[Message]) -> list[Message]:
        """``batch`` without the messages of fenced partitions: another member's now (see
        :meth:`_fenced_off`)."""
        if not self._fenced:
            return batch
        return [msg for msg in batch if msg.partition() not in self._fenced]

    def _idle_streams(self) -> list[str]:
        """Streams in memory whose last message was read at least ``idle_checkpoint_s`` before
        their partition was last read up to date (see the module docstring), least recently read
        first."""
        idle = []
        for stream in self._states:
            part = self._partitions.get(self._stream_partition[stream])
            last = self._last_read.get(stream, float("-inf"))
            if part is not None and part.read_up_to_at - last >= self.idle_checkpoint_s:
                idle.append(stream)
        return sorted(idle, key=lambda s: self._last_read.get(s, float("-inf")))

    def _nothing_buffered(self, stream: str) -> bool:
        return self._states[stream].min_buffered_offset(self._stream_partition[stream]) is None

    def _warn_crowded(self, stream: str) -> None:
        """Say once per run that idle streams' windows close before their end for memory."""
        if self._warned_crowded:
            return
        self._warned_crowded = True
        log.warning(
            "%s: more than max_idle_streams (%d) idle streams are in memory: the open windows of "
            "the least recently active ones (first %r) close now, before the wall clock passes "
            "their end, so that their states can leave memory; their later documents are late",
            self.processor.name,
            self.max_idle_states,
            stream,
        )

    def _count_windows(self, stream: str, outputs: list[Output], forced: bool) -> None:
        """Count the windows among ``outputs``. Any output makes the stream's state differ from
        its checkpoint, also one without a window (late documents, whose ids the windower
        remembers: a restart or a dropped quiet state forgot them, and a re-send was not caught
        as a duplicate)."""
        if outputs:
            self._dirty[stream] = self._dirty.get(stream, 0) + sum(o.is_window for o in outputs)
            if forced:
                self._forced.add(stream)

    def _mark_checkpointed(self, streams: set[str]) -> None:
        now = time.time()
        for stream in streams:
            self._checkpointed_at[stream] = now
            self._dirty.pop(stream, None)
            self._forced.discard(stream)

    def _lagging_partitions(self, now: float) -> set[int]:
        """Partitions whose silence is not their streams' idleness; each partition learns when
        it was last read up to (:attr:`_Partition.read_up_to_at`).

        A partition with a backlog left to read, or any partition while the broker was unreachable
        within the last ``BROKER_GRACE_S``, is lagging. A stream's windows close by the idle timer
        only once its partition has been read up to what it held ``idle_timeout_s`` after the
        stream's last message (known from the high watermarks seen while behind; nothing is
        learned while the broker is unreachable): the stream's next message is then in no
        backlog, which keeps replays, crash recoveries and broker restarts deterministic, and a
        busy stream sharing the partition, whose messages arrive while windows are computed and
        leave it behind at most checks, cannot keep a quiet stream's windows open. The known lags
        also go to the consumer-lag metric.
        """
        if self._consumer is None:
            return set()
        if now - self._consumer.last_error_at < BROKER_GRACE_S:
            return set(self._partitions)
        lag = self._consumer.lag()
        self.metrics.set_lag(lag)  # (an unknown lag keeps its last known value)
        for (_, p), n in lag.items():
            if n is not None and p in self._partitions:
                self._partitions[p].observe_lag(now, n)
        # (a fenced partition is never drained: see _stop_if_still_fenced)
        return {p for (_, p), n in lag.items() if n is None or n > 0} | self._fenced

    def _resume_offsets(self, clean: AbstractSet[str] = frozenset()) -> dict[int, int]:
        """Per partition, where to re-read from after a crash once the checkpoints of ``clean``
        (and of every stream not dirty) are stored."""
        offsets: dict[int, int] = {}
        for p, part in self._partitions.items():
            needed = [self._anchor[s] for s in part.streams if s in self._dirty and s not in clean]
            needed += [
                o
                for s in part.streams
                if s in self._states and (o := self._states[s].min_buffered_offset(p)) is not None
            ]
            if needed:
                offsets[p] = min(needed)
            elif part.next_offset is not None:
                offsets[p] = part.next_offset
        return offsets

    def _refresh_anchors(self) -> None:
        """A stream with no window since its checkpoint replays from its first buffered message,
        or, with nothing buffered, from the partition's next offset."""
        for stream, state in self._states.items():
            if stream in self._dirty:
                continue
            p = self._stream_partition[stream]
            buffered = state.min_buffered_offset(p)
            next_offset = self._partitions[p].next_offset
            if buffered is not None:
                self._anchor[stream] = buffered
            elif next_offset is not None:
                self._anchor[stream] = next_offset

    def _commit(self, outputs: list[Output], dead: list[dict[str, Any]]) -> None:
        """Hand the transaction of ``outputs``, the dead letters, the due checkpoints and the
        resume offsets to the writer (after the one in flight is stored)."""
        dead = dead + [{**row, "topic": self.input_topic} for out in outputs for row in out.dead]
        due = {s for s, n in self._dirty.items() if n >= self.checkpoint_every or s in self._forced}
        if self.max_checkpoint_age_s is not None:
            oldest = time.time() - self.max_checkpoint_age_s
            due |= {s for s in self._dirty if self._checkpointed_at.get(s, oldest) <= oldest}
        offsets = self._resume_offsets(clean=due)
        if not (outputs or dead or due) and offsets == self._submitted_offsets:
            return  # nothing new to store: the messages consumed all wait in open windows
        # The states' arrays as they are now: the writer copies them when handed the job (a process
        # writer pickles it, a thread writer copies the arrays), before the models move on.
        checkpoints = {stream: self._checkpoint(stream) for stream in due}
        self._wait_written()
        assert self._writer is not None, "transactions are handed over only inside run()"
        job = WriteJob(
            calls=[call for out in outputs for call in out.calls],
            messages=[out.messages for out in outputs if out.messages],
            dead=dead,
            checkpoints=checkpoints,
            offsets=offsets,
            owners=dict(self._owners),
        )
        with self.health.phase("writing", "handing a transaction to its writer"):
            pending = self._writer.submit(job)
        self._in_flight = _InFlight(pending, outputs, offsets, len(dead), frozenset(checkpoints))
        self._submitted_offsets = offsets
        self._mark_checkpointed(due)
        self._refresh_anchors()

    def _wait_written(self) -> None:
        """Wait for the transaction in flight (raising its error), then commit its offsets to
        Kafka and account for it. One fenced off (see the module docstring) raises
        :class:`_FencedOffError` once the states are dropped: the batch being worked on is
        abandoned."""
        job, self._in_flight = self._in_flight, None
        if job is None:
            return
        try:
            with self.health.phase("writing", "waiting for its writer's transaction"):
                committed = job.done.result()
        except PartitionsFencedError as exc:
            self._fenced_off(exc)
            raise _FencedOffError from exc
        except BaseException:
            # The states are ahead of the store for good: no checkpoint may be written any more
            # (not even by the revocation when the consumer closes); a restart replays.
            self._consistent = False
            raise
        for stream, state in self._states.items():
            p = self._stream_partition[stream]
            if p in job.offsets:
                state.forget_before(p, job.offsets[p])
        latencies = [committed - out.closed_at for out in job.outputs if out.is_window]
        self.window_latencies.extend(latencies)
        for out in job.outputs:
            if out.is_window and out.summary:
                log.info(
                    "%s: %s; committed %.2f s after its close",
                    self.processor.name,
                    out.summary,
                    committed - out.closed_at,
                )
        self.last_commit_at = committed
        if self._consumer is not None and job.offsets:
            # Informational only (the store holds the truth), so not waited for: the consumer
            # logs a failure; commits go out in order, each after its transaction.
            try:
                self._consumer.commit_offsets(
                    {(self.input_topic, p): o for p, o in job.offsets.items()}, asynchronous=True
                )
            except KafkaException as exc:
                log.warning("committing offsets to Kafka failed: %s", exc)
        self.metrics.observe(job.outputs, latencies, job.n_dead)
