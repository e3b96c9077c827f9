"""Produce documents to a Kafka topic in event-time order, at a controlled pace.

:func:`replay_documents` is the reusable core of ``sparsewatch replay`` (and of the demo and tests,
which call it with generated documents). Documents become the message of DESIGN.md (JSON with
``id``, ``text``, ``timestamp`` in epoch ms, ``stream``, ``labels``, ``meta``), keyed by stream id,
through an idempotent producer (``enable.idempotence``, ``acks=all``): broker retries never
duplicate or reorder a stream's messages. Pace: as fast as possible, ``rate`` documents per
second, or ``speedup`` times event time: each gap between consecutive timestamps, scaled (a
timestamp earlier than the one before it is sent at once), ``max_wait_s`` capping one pause, e.g.
over a corpus' empty months. ``skip``/``limit`` select a slice of the event-time ordered sequence,
so an interrupted or limited replay resumes with ``skip`` = the summary's ``resume_skip``. A
message the broker did not acknowledge (``failed``) goes to the errors file like a rejected
document, so none is lost unnoticed. With ``end_of_stream``, a completed
replay ends with an end-of-stream marker per stream whose documents all lie up to the end of the
slice (same key, so the same partition, after the stream's last document): the detector then
closes the stream's last windows at once instead of after its idle timeout. A stream that goes on
after a ``limit`` gets none (its next document would be late), one that ended in the ``skip``
part (an interrupted replay, resumed) gets one. Only for a corpus that nothing of the same
streams follows: a later document of a closed window is late. A document the detector would
refuse (``max_text_bytes``: its configured text limit) is rejected here instead of landing in the
dead-letter topic; so is one the topic would not take (its ``max.message.bytes``, read at start,
when below the producer's 1,000,000 bytes:
:class:`~sparsewatch.consumers.kafka_admin.TopicLimits`). The broker refuses a batch over that
limit whole: one such document, or a batch of small ones, failed every document sent with it, so
the producer's batches are kept within it too.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from sparsewatch.consumers.field_mapping import (
    DEFAULT_MAX_TEXT_BYTES,
    PRODUCER_LIMIT,
    FieldMapping,
    MessageLimit,
    to_document,
)
from sparsewatch.consumers.kafka_admin import TopicLimits
from sparsewatch.consumers.kafka_client import make_producer
from sparsewatch.consumers.messages import EndOfStream, RecordError, encode
from sparsewatch.replay.documents import ErrorFile, LocatedDocument, raw_json
from sparsewatch.replay.event_sort import sort_by_event_time
from sparsewatch.replay.readers import Rejected

_MESSAGE_MAPPING = FieldMapping(
    id="id", text=("text",), timestamp="timestamp", stream="stream", labels="labels"
)
_POLL_S = 0.1


class _Interrupts:
    """SIGINT and SIGTERM handled as the caller set them (KeyboardInterrupt for Ctrl-C, and for
    SIGTERM under :func:`~sparsewatch.runtime.sigterm_interrupts`), except inside :meth:`held`
    blocks, which they wait for. A replay holds them while it hands a document over and counts
    it, and while the producer runs delivery reports: an interrupt between the two, or inside a
    report, left the summary's counts and resume point short of what reached the topic.

    The deferral is Python's: Python runs signal handlers in the main thread between bytecodes
    (a process-directed signal may land on any thread, so masking it in the main one does not
    keep it out). Outside the main thread, or for a signal whose handler is not a Python
    function (the default termination, ignoring), nothing changes."""

    def __init__(self) -> None:
        self.holding = False
        self.pending: list[tuple[int, Any]] = []
        self.previous: dict[int, Callable[[int, Any], Any]] = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handler = signal.getsignal(sig)
                if callable(handler):
                    self.previous[sig] = handler
                    signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.holding:
            self.pending.append((signum, frame))
        else:
            self.previous[signum](signum, frame)

    @contextmanager
    def held(self) -> Iterator[None]:
        """The block runs to its end; a signal that came meanwhile is handled right after."""
        with self.absorbed():
            yield
        if self.pending:
            signum, frame = self.pending[0]
            self.pending.clear()
            self.previous[signum](signum, frame)

    @contextmanager
    def absorbed(self) -> Iterator[None]:
        """The block runs to its end; a signal that came meanwhile stays in :attr:`pending`,
        for the block to see and the caller to handle or clear. Inside another such block it
        leaves interrupts absorbed when it ends."""
        holding, self.holding = self.holding, True
        try:
            yield
        finally:
            self.holding = holding


def _poll(producer: Producer, timeout: float, interrupts: _Interrupts) -> None:
    """``producer.poll``: its delivery reports run with interrupts held (at most ``timeout``)."""
    with interrupts.held():
        producer.poll(timeout)


def _drain(producer: Producer, timeout: float, interrupts: _Interrupts) -> bool:
    """Wait up to ``timeout`` for the delivery reports of every queued message, then purge what
    is still queued (reported as not delivered); whether an interrupt (Ctrl-C, SIGTERM) came
    meanwhile, which ends the wait at once. The wait runs with interrupts absorbed: one let into
    ``producer.flush`` escaped from it, leaving no summary (after the whole timeout, as a
    SystemError, when the producer logs through Python)."""
    deadline = time.monotonic() + timeout
    with interrupts.absorbed():
        while len(producer) and not interrupts.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            producer.flush(min(left, _POLL_S))
        if len(producer):
            producer.purge()
            producer.flush(timeout)  # the purged messages' reports
    came = bool(interrupts.pending)
    interrupts.pending.clear()
    return came


def _hand_over(
    producer: Producer,
    topic: str,
    key: bytes,
    value: bytes,
    report: Callable[[KafkaError | None, Message], None],
    count: Callable[[KafkaException | None], None],
    interrupts: _Interrupts,
) -> None:
    """Hand one message to the producer and ``count`` it (with the producer's refusal, or
    ``None``), interrupts held for both: an interrupt comes before the hand-over or after its
    count, never between. While the local queue is full it waits for delivery reports, with
    interrupts free between attempts."""
    while True:
        with interrupts.held():
            try:
                producer.produce(topic, key=key, value=value, on_delivery=report)
            except BufferError:  # local queue full: let deliveries drain, then try again
                pass
            except KafkaException as exc:
                count(exc)
                return
            else:
                count(None)
                return
        _poll(producer, _POLL_S, interrupts)


@dataclass
class ReplaySummary:
    """What a replay did. ``read`` counts documents offered (after sorting), ``produced`` those the
    broker acknowledged, ``rejected`` invalid or unproducible ones, ``failed`` messages (documents
    or end-of-stream markers) the broker did not acknowledge, and end-of-stream markers the
    producer refused (a refused document is rejected), ``skipped`` those left out by
    ``skip``, ``end_markers`` the end-of-stream markers acknowledged. ``resume_skip`` is the
    ``skip`` that resumes the replay where it stopped: the documents of the ordered sequence that
    were skipped, handed to the producer or rejected by it (one handed over but not delivered is
    in the errors file, not sent again), and never less than ``skip``: a replay stopped before it
    had read past its skipped part resumed before it, sending that part (sent before) again."""

    read: int = 0
    produced: int = 0
    rejected: int = 0
    skipped: int = 0
    failed: int = 0
    elapsed_s: float = 0.0
    first_timestamp_ms: int | None = None
    last_timestamp_ms: int | None = None
    interrupted: bool = False
    end_markers: int = 0
    resume_skip: int = 0
    errors: list[str] = field(default_factory=list)  # the first distinct failure reasons

    def failure(self, reason: str) -> None:
        """A message the broker did not acknowledge, for ``reason``: counted, and the reason
        kept while fewer than 10 distinct ones are (300 refusals of one topic gave one reason
        three times over)."""
        self.failed += 1
        if len(self.errors) < 10 and reason not in self.errors:
            self.errors.append(reason)

    @property
    def rate(self) -> float:
        """Produced documents per second of wall time."""
        return self.produced / self.elapsed_s if self.elapsed_s > 0 else 0.0


def as_message(
    doc: dict[str, Any],
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    limit: MessageLimit = PRODUCER_LIMIT,
) -> dict[str, Any]:
    """The canonical message for a document dict; a RecordError says what is wrong, including
    why the detector (whose text limit is ``max_text_bytes``) would refuse it, or the topic
    (whose message ``limit`` is the producer's own, or a smaller topic's) would not take it.

    ``timestamp`` may be ISO-8601 or epoch ms and becomes epoch ms; ``stream`` defaults to
    ``"default"``; keys other than the message's own are folded into ``meta``.
    """
    if doc.get("meta") is not None and not isinstance(doc["meta"], dict):
        raise RecordError("meta must be a JSON object")
    return to_document(doc, _MESSAGE_MAPPING, max_text_bytes, limit=limit)


class Pacer:
    """When to send the ``i``-th document: now, at ``rate`` per second, or at ``speedup`` x event
    time (one pause at most ``max_wait_s``)."""

    def __init__(
        self,
        rate: float | None = None,
        speedup: float | None = None,
        max_wait_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate is not None and speedup is not None:
            raise ValueError("give rate or speedup, not both")
        if (rate is not None and rate <= 0) or (speedup is not None and speedup <= 0):
            raise ValueError("rate and speedup must be positive")
        self.rate = rate
        self.speedup = speedup
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._start: float | None = None
        self._due = 0.0  # when the previous document was due (speedup)
        self._previous_ms = 0  # the previous document's event time (speedup)
        self._count = 0

    def delay(self, timestamp_ms: int) -> float:
        """Seconds to wait before sending the next document (its event time given), which is
        counted as sent: the pace goes on from it.

        With ``speedup``, a document is due the scaled gap between its timestamp and the previous
        one after the previous document was due: a timestamp out of order (earlier than the one
        before it) is due at once and the pace resumes from it, instead of every later document
        going out unpaced until event time is back past the out-of-order one."""
        now = self._clock()
        due = self._due_time(timestamp_ms, now)
        if self._start is None:
            self._start = now
        self._count += 1
        self._due, self._previous_ms = due, timestamp_ms
        return max(0.0, due - now)

    def upcoming(self, timestamp_ms: int) -> float:
        """The :meth:`delay` of the next document, without counting it: for one that may be
        rejected instead of sent (a rejected document cost a place in the pace, ``1 / rate``
        seconds of waiting)."""
        now = self._clock()
        return max(0.0, self._due_time(timestamp_ms, now) - now)

    def _due_time(self, timestamp_ms: int, now: float) -> float:
        """When (clock time) the next document, with event time ``timestamp_ms``, is due; the
        first one is due ``now``."""
        if self._start is None:
            return now
        if self.rate is not None:
            return self._start + self._count / self.rate
        if self.speedup is None:
            return now
        due = self._due + max(0, timestamp_ms - self._previous_ms) / 1000 / self.speedup
        if self.max_wait_s is not None and due - now > self.max_wait_s:
            due = now + self.max_wait_s
        return due


def _messages(
    docs: Iterable[dict[str, Any]],
    errors: ErrorFile,
    summary: ReplaySummary,
    max_text_bytes: int,
    limit: MessageLimit,
) -> Iterator[dict[str, Any]]:
    """The messages of ``docs``; one that cannot be sent is counted and written to ``errors``
    by its file and line (a :class:`~sparsewatch.replay.documents.LocatedDocument`'s), or as
    ``<documents>`` by its position among ``docs``."""
    for position, doc in enumerate(docs):
        try:
            yield as_message(doc, max_text_bytes, limit)
        except (RecordError, TypeError, AttributeError) as exc:
            summary.rejected += 1
            source, line = "<documents>", position + 1
            if isinstance(doc, LocatedDocument):
                source, line = doc.source, doc.line
            errors.write(Rejected(source, line, str(exc), raw_json(doc, 2000)))


def _refusal(exc: KafkaException) -> str:
    """Why the producer refused a message (its error's text)."""
    return exc.args[0].str() if exc.args else str(exc)


def _too_far_ahead(
    message: dict[str, Any],
    max_ahead_ms: int,
    errors: ErrorFile,
    topic: str,
    position: int,
    pacer: Pacer,
) -> bool:
    """Whether the detector would refuse ``message`` sent when ``pacer`` lets it go (its
    :meth:`~Pacer.upcoming` pause from now), its event time more than ``max_ahead_ms`` after the
    message's Kafka timestamp (when it is sent); if so, why goes to ``errors``, as for a message
    the producer refuses (``position`` in the ordered sequence; a corpus dated in the future, a
    wrong time unit: the replay reported them all produced, and the detector dead-lettered
    every one)."""
    sent_ms = time.time_ns() // 1_000_000 + round(pacer.upcoming(message["timestamp"]) * 1000)
    if message["timestamp"] - sent_ms <= max_ahead_ms:
        return False
    event = datetime.fromtimestamp(message["timestamp"] / 1000, tz=UTC)
    sent = datetime.fromtimestamp(sent_ms / 1000, tz=UTC)
    reason = (
        f"event time {event.isoformat(timespec='seconds')} is more than windows.max_ahead "
        f"({max_ahead_ms} ms) after the time it is sent, {sent.isoformat(timespec='seconds')}: "
        "the detector would refuse it (a wrong clock or time unit?)"
    )
    errors.write(Rejected(topic, position, reason, message["id"]))
    return True


class _Replay:
    """What one replay's loop hands its messages over with: the ``producer`` and its ``topic``,
    the ``summary`` and ``errors`` file that the producer's refusals and the broker's delivery
    reports go to, and the streams that get an end-of-stream marker (of the slice and before it,
    in order of first appearance)."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        summary: ReplaySummary,
        errors: ErrorFile,
        interrupts: _Interrupts,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.summary = summary
        self.errors = errors
        self.interrupts = interrupts
        self.streams: dict[str, None] = {}
        self.message: dict[str, Any] = {}  # the document being handed over
        self.marker = b""  # the end-of-stream marker being handed over

    def on_delivery(
        self, position: int, raw: str, marker: bool
    ) -> Callable[[KafkaError | None, Message], None]:
        """The delivery report of one message: counted, and a failure written to ``errors``
        (``position`` in the ordered sequence, ``raw`` the document id or the marker)."""
        summary, errors, topic = self.summary, self.errors, self.topic

        def report(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                if marker:
                    summary.end_markers += 1
                else:
                    summary.produced += 1
                return
            summary.failure(err.str())
            what = "end-of-stream marker" if marker else "document"
            errors.write(Rejected(topic, position, f"{what} not delivered: {err.str()}", raw))

        return report

    def counted(self, refused: KafkaException | None) -> None:
        """Count :attr:`message`, just handed over (or refused by the producer)."""
        summary, message = self.summary, self.message
        if refused is not None:
            summary.rejected += 1
            reason = f"cannot produce: {_refusal(refused)}"
            self.errors.write(Rejected(self.topic, summary.read, reason, message["id"]))
        summary.resume_skip = summary.read
        if summary.first_timestamp_ms is None:
            summary.first_timestamp_ms = message["timestamp"]
        summary.last_timestamp_ms = message["timestamp"]
        self.producer.poll(0)

    def marker_counted(self, refused: KafkaException | None) -> None:
        """Count :attr:`marker` as failed when the producer refused it (it vanished: neither
        counted nor in ``errors``)."""
        if refused is not None:
            self.summary.failure(_refusal(refused))
            reason = f"end-of-stream marker not produced: {_refusal(refused)}"
            self.errors.write(Rejected(self.topic, 0, reason, self.marker.decode()))

    def keep_ended(self, going_on: set[str]) -> None:
        """Keep in :attr:`streams` only those not ``going_on`` past a ``limit``: a stream with a
        document after the slice gets no marker (that document would be late)."""
        self.streams = {s: None for s in self.streams if s not in going_on}

    def send_end_markers(self) -> None:
        """Hand over an end-of-stream marker for each of :attr:`streams`, keyed by its stream."""
        for stream in self.streams:
            self.marker = marker = EndOfStream(stream).to_json()
            report = self.on_delivery(0, marker.decode(), marker=True)
            _hand_over(
                self.producer,
                self.topic,
                stream.encode(),
                marker,
                report,
                self.marker_counted,
                self.interrupts,
            )


def _check_end_of_stream(end_of_stream: bool, limit: int | None, sort: bool) -> None:
    """A ValueError for end-of-stream markers after a ``limit`` without the sorted replay: only
    it reads the rest of the documents, which tells the streams that go on past the limit."""
    if end_of_stream and limit is not None and not sort:
        raise ValueError("end_of_stream with a limit needs the sorted replay (which streams go on)")


def replay_documents(
    docs: Iterable[dict[str, Any]],
    bootstrap: str,
    topic: str,
    rate: float | None = None,
    speedup: float | None = None,
    max_wait_s: float | None = None,
    skip: int = 0,
    limit: int | None = None,
    sort: bool = True,
    chunk_size: int = 100_000,
    errors: ErrorFile | None = None,
    progress: Callable[[ReplaySummary], None] | None = None,
    flush_timeout_s: float = 60.0,
    end_of_stream: bool = False,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    max_ahead_ms: int | None = None,
    **producer_overrides: Any,
) -> ReplaySummary:
    """Produce ``docs`` (document dicts) to ``topic`` in event-time order; see the module doc.

    Invalid documents, and those the detector would refuse (``max_text_bytes``: its configured
    text limit) or ``topic`` would not take (its ``max.message.bytes``, read at start; the
    producer's batches are kept within it), are counted as rejected and written to ``errors``;
    so is every message the broker does not acknowledge (counted as failed), including those
    still queued ``flush_timeout_s`` after the last one was handed over. ``progress`` is called
    with the running summary after every document. On KeyboardInterrupt the documents already
    handed to the producer are flushed and the summary says ``interrupted`` (and no
    end-of-stream marker is sent); an interrupt during that final flush (or the one after the
    last document) ends the wait, and what is still queued is counted as failed. A document
    whose event time lies more than ``max_ahead_ms`` after the moment it would be sent (the
    detector's ``windows.max_ahead``, checked against the message's Kafka timestamp) is
    rejected, not sent, before its pause: it takes no place in the pace.
    """
    pacer = Pacer(rate, speedup, max_wait_s)
    summary = ReplaySummary(resume_skip=skip)  # the skipped part was sent before
    errors = errors or ErrorFile(None)
    limits = TopicLimits.read(bootstrap, (topic,))
    limits.check_not_compacted(topic)
    producer = make_producer(bootstrap, **{**limits.producer_settings(), **producer_overrides})
    _check_end_of_stream(end_of_stream, limit, sort)
    started = time.monotonic()
    messages = _messages(docs, errors, summary, max_text_bytes, limits.message_limit(topic))
    ordered = sort_by_event_time(messages, chunk_size) if sort else messages
    interrupts = _Interrupts()
    replay = _Replay(producer, topic, summary, errors, interrupts)
    # The loop stays here, not in a helper: the documents are read and mapped (JSON parsed and
    # written, as deep as the recursion limit allows) in generator frames above this one.
    with interrupts:
        try:
            for message in ordered:
                if limit is not None and summary.read - summary.skipped >= limit:
                    if end_of_stream:  # sorted: everything was read, the rest costs no rejections
                        replay.keep_ended({message["stream"], *(m["stream"] for m in ordered)})
                    break
                summary.read += 1
                replay.streams.setdefault(message["stream"])
                if summary.read <= skip:
                    summary.skipped += 1
                    continue
                # (checked before the pause, at the time the document would be sent: a rejected
                # document is not paced)
                if max_ahead_ms is not None and _too_far_ahead(
                    message, max_ahead_ms, errors, topic, summary.read, pacer
                ):
                    summary.rejected += 1
                    summary.resume_skip = summary.read
                    continue
                wait = pacer.delay(message["timestamp"])
                deadline = time.monotonic() + wait
                while wait > 0:
                    _poll(producer, min(wait, _POLL_S), interrupts)
                    wait = deadline - time.monotonic()
                report = replay.on_delivery(summary.read, message["id"], marker=False)
                key, value = message["stream"].encode(), encode(message)
                replay.message = message
                _hand_over(producer, topic, key, value, report, replay.counted, interrupts)
                if progress is not None:
                    progress(summary)
            if end_of_stream:
                replay.send_end_markers()
        except KeyboardInterrupt:
            summary.interrupted = True
        finally:
            # The producer is destroyed here, interrupts absorbed, not as this frame ends (or
            # later, in any garbage collection: the exception of a topic that TopicLimits.read
            # did not find kept this frame alive): its destruction (the GIL released while
            # librdkafka stops its threads) ends by running the signal handlers, whose
            # KeyboardInterrupt it leaves set but not raised (a SystemError at the next call:
            # no summary, no resume point, the errors file dropped). The generators, whose
            # cleanup (the sort's temporary files) an interrupt cut short, go here too.
            with interrupts.absorbed():
                try:
                    if _drain(producer, flush_timeout_s, interrupts):
                        summary.interrupted = True
                finally:
                    del replay, producer, ordered, messages
                summary.elapsed_s = time.monotonic() - started
            # (a signal that came at the end of the release is handled, into pending, at the
            # next call: the block's end)
            if interrupts.pending:
                summary.interrupted = True
                interrupts.pending.clear()
    return summary
