"""The detector worker: documents -> windows -> novelty and topics -> SQL and the scores topic.

Glue between :mod:`~sparsewatch.consumers.worker` (Kafka and SQL) and the pure per-window core
:mod:`~sparsewatch.consumers.detector_core`. One :class:`DetectorStreamState` per stream holds the
stream's windows and models; its checkpoint holds both (the open windows are re-read from Kafka).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sparsewatch.consumers.detector_core import (
    WindowComputation,
    build_models,
    process_window,
    score_late,
)
from sparsewatch.consumers.messages import (
    Document,
    EndOfStream,
    InvalidMessageError,
    looks_like_epoch_seconds,
    parse_message,
)
from sparsewatch.consumers.processor import Output
from sparsewatch.consumers.windowing import Buffered, ClosedWindow, StreamWindower, WindowSpec
from sparsewatch.consumers.writer import StoreCall
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import Config, parse_duration_ms

log = logging.getLogger(__name__)


def window_spec(config: Config) -> WindowSpec:
    """The configured windows: a document count when ``windows.count`` > 0, else a duration."""
    w = config.windows
    lateness = parse_duration_ms(w.allowed_lateness)
    if w.count > 0:
        return WindowSpec(
            size_ms=None,
            count=w.count,
            allowed_lateness_ms=lateness,
            idle_timeout_s=w.idle_timeout_s,
            idle_close=w.idle_close,
            dedup_documents=w.dedup_documents,
        )
    return WindowSpec(
        size_ms=parse_duration_ms(w.size),
        allowed_lateness_ms=lateness,
        idle_timeout_s=w.idle_timeout_s,
        idle_close=w.idle_close,
        dedup_documents=w.dedup_documents,
    )


def _store_calls(comp: WindowComputation) -> list[StoreCall]:
    """The window's SQL writes: its record, documents, alerts, topics and due snapshot."""
    w = comp.window
    calls: list[StoreCall] = [
        (
            "upsert_window",
            (
                w["stream"],
                w["window_seq"],
                w["start"],
                w["end"],
                w["n_documents"],
                w["threshold"],
                w["timings"],
                w["closed_by"],
            ),
        ),
        ("insert_documents", (comp.documents,)),
    ]
    if comp.alerts:
        calls.append(("insert_alerts", (comp.alerts,)))
    if comp.topics:
        calls.append(("upsert_topics", (comp.topics,)))
    if comp.snapshot is not None:
        s = comp.snapshot
        calls.append(
            (
                "put_snapshot",
                (
                    w["stream"],
                    w["window_seq"],
                    s["model_kind"],
                    s["arrays"],
                    s["meta"],
                    s["vocabulary_version"],
                ),
            )
        )
    return calls


class DetectorStreamState:
    """One stream's windows and models (the
    :class:`~sparsewatch.consumers.processor.StreamState`)."""

    def __init__(self, stream: str, config: Config, checkpoint: Checkpoint | None) -> None:
        self.stream = stream
        self.config = config
        self.spec = window_spec(config)
        self.windows = StreamWindower(stream, self.spec)
        self.models = build_models(config.detector)
        self._late: list[Buffered] = []
        # the smallest offset of ``_late`` per partition (asked for at every commit)
        self._late_first: dict[int, int] = {}
        # A late document read again (after a restore: another stream on the partition held its
        # resume offset back) was stored at its first reading, in its window or as late, unless
        # it was still waiting here or in an open window when the checkpoint was taken (the
        # windower's unprocessed offsets; the late ones also from the first such offset per
        # partition on): only those are scored and counted (sparsewatch_late_documents_total).
        # A checkpoint written before the late ones were recorded (None) has every one scored.
        self._late_counted = 0
        self._pending_late_from: dict[int, int] | None = {}
        self._warned_seconds = False
        self._warned_closed_early = False
        self._warned_ahead = False
        if checkpoint is not None:
            state = checkpoint.state
            self.windows.set_state({k[8:]: v for k, v in state.items() if k.startswith("windows.")})
            self.models.set_state({k[7:]: v for k, v in state.items() if k.startswith("models.")})
            pending = state.get("late.pending_from")
            self._pending_late_from = (
                None
                if pending is None
                else {p: o for p, o in np.asarray(pending).reshape(-1, 2).tolist()}
            )

    def _output(self, window: ClosedWindow, closed_at: float) -> Output:
        comp = process_window(self.models, window, self.config.detector)
        novel = int(comp.documents.novel.sum())
        emerging = sum(a["kind"] == "emerging_topic" for a in comp.alerts)
        return Output(
            _store_calls(comp),
            comp.messages or [],
            n_documents=len(window.items),
            novel=novel,
            closed_at=closed_at,
            window=(window.stream, window.seq),
            summary=f"stream {window.stream} window {window.seq} (closed by {window.closed_by}): "
            f"{len(window.items)} documents, {novel} novel, {emerging} emerging-topic alerts, "
            f"computed in {sum(comp.timings.values()):.2f} s",
        )

    def add(
        self, item: Document | EndOfStream, partition: int, offset: int, now: float
    ) -> list[Output]:
        if isinstance(item, EndOfStream):
            return self._late_output() + self._outputs(self.windows.close_all("end_of_stream"))
        if not self._warned_seconds and looks_like_epoch_seconds(item.timestamp_ms):
            self._warned_seconds = True  # once per stream (and worker start): not per document
            log.warning(
                "stream %r: document %r has event time %s (timestamp %d ms): epoch seconds sent "
                "as milliseconds? The message format counts milliseconds (or send ISO-8601)",
                self.stream,
                item.id,
                item.event_time.isoformat(),
                item.timestamp_ms,
            )
        again = self.windows.processed_before(Buffered(item, partition, offset))
        closed, status = self.windows.add(Buffered(item, partition, offset), now)
        first_reading = status == "late" and self._first_late_reading(again, partition, offset)
        self._late_counted += first_reading
        if status == "late" and (first_reading or self._pending_late_from is None):
            self._late.append(Buffered(item, partition, offset))
            self._late_first[partition] = min(offset, self._late_first.get(partition, offset))
            if not self._warned_closed_early and self.windows.closed_early(item.timestamp_ms):
                self._warned_closed_early = True  # once per stream (and worker start)
                log.warning(
                    "stream %r: document %r is late because its window (windows.size %s) closed "
                    "before the watermark passed its end: at an end-of-stream marker, or by the "
                    "idle timer after %s s without documents (windows.idle_timeout_s; with "
                    "windows.idle_close = %r %s). It is scored and stored late, not learnt from "
                    "(sparsewatch_late_documents_total counts late documents)",
                    self.stream,
                    item.id,
                    self.config.windows.size,
                    self.spec.idle_timeout_s,
                    self.spec.idle_close,
                    "only once the wall clock had passed the window's end plus "
                    "windows.allowed_lateness: the document came later than that"
                    if self.spec.idle_close == "ended"
                    else "every open window: a stream whose gaps exceed the timeout learns from "
                    "few of its documents; 'ended' keeps a window open until its end",
                )
        elif status == "duplicate":
            # the id is in the dead letter's payload: a reason without it groups in summaries
            first_partition, first_offset, still_open = self.windows.first_copy(partition, offset)
            where = "an open window holds it" if still_open else "a closed window had it"
            raise InvalidMessageError(
                f"duplicate of the document at partition {first_partition}, offset {first_offset} "
                f"({where})"
            )
        return self._outputs(closed)

    def _first_late_reading(self, again: bool, partition: int, offset: int) -> bool:
        """Whether a late document's results were never stored: read for the first time, read
        again where the checkpoint had it buffered in an open window or waiting here (``again``
        is :meth:`StreamWindower.processed_before`: false then; a restore under a smaller
        allowed lateness or window size, or from count windows into time windows, makes such a
        document late, which was never scored, stored nor dead-lettered), or from where the late
        documents still waiting at the checkpoint began. Only those are scored, stored and
        counted (scoring one again against a later model raised alerts the uninterrupted run
        never raised, for documents that were only part of a story); after a checkpoint without
        that record every late document is scored, none counted twice."""
        pending = self._pending_late_from
        return not again or (pending is not None and offset >= pending.get(partition, offset + 1))

    def close_idle(self, silent_until: float, wall_ms: float) -> list[Output]:
        """The late documents waiting, and the windows of a stream silent for the idle timeout
        from its last document until ``silent_until``, at wall-clock time ``wall_ms`` (see
        :meth:`~sparsewatch.consumers.processor.StreamState.close_idle`)."""
        closed = self.windows.close_if_idle(silent_until, wall_ms)
        if not self._warned_ahead and self.windows.is_idle(silent_until):
            ahead_ms = self.windows.open_ahead_ms(wall_ms)
            if ahead_ms > (self.spec.size_ms or 0):
                self._warned_ahead = True  # once per stream (and worker start)
                log.warning(
                    "stream %r is idle, but its open window ends %.1f h after the wall clock "
                    "(event times ahead of this machine's clock?): it closes when the wall clock "
                    "passes its end plus windows.allowed_lateness, when a later document's event "
                    "time does, or at an end-of-stream marker; windows.idle_close = 'all' closes "
                    "it on idleness alone",
                    self.stream,
                    ahead_ms / 3_600_000,
                )
        return self._late_output() + self._outputs(closed)

    def _outputs(self, closed: list[ClosedWindow]) -> list[Output]:
        """The late documents waiting, then the windows that ``closed``: a late document is scored
        by the model as it was when it arrived, whatever the batch boundaries (determinism on
        replay), and goes into the same transaction as the first window closed after it. The
        windows closed together share their close time: a window's latency includes the
        computation of those before it."""
        if not closed:
            return []
        closed_at = time.perf_counter()
        return self._late_output() + [self._output(w, closed_at) for w in closed]

    def _late_output(self) -> list[Output]:
        """Late documents since the last call, scored against the current model."""
        if not self._late:
            return []
        rows, alerts = score_late(self.models, self.stream, self._late, self.spec.size_ms)
        counted, self._late, self._late_counted = self._late_counted, [], 0
        self._late_first = {}
        calls: list[StoreCall] = [("insert_documents", (rows,))]
        if alerts:
            calls.append(("insert_alerts", (alerts,)))
        late_ids = [(self.stream, str(doc_id)) for doc_id in rows.doc_id]
        return [Output(calls, is_window=False, late=counted, late_ids=late_ids)]

    def min_buffered_offset(self, partition: int) -> int | None:
        """Open windows' documents and late documents not yet handed over: a restart re-reads
        from here, so neither is lost if the worker dies before they are stored."""
        late = self._late_first.get(partition)
        buffered = self.windows.min_buffered_offset(partition)
        return min((o for o in (late, buffered) if o is not None), default=None)

    def forget_before(self, partition: int, offset: int) -> None:
        self.windows.forget_duplicates_before(partition, offset)

    def checkpoint(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        # the late documents not yet stored are read but unprocessed, as the open windows' are
        waiting = [(b.partition, b.offset) for b in self._late]
        state = {f"windows.{k}": v for k, v in self.windows.get_state(waiting).items()}
        state.update({f"models.{k}": v for k, v in self.models.get_state().items()})
        # the late documents not yet stored: counted when read again after a restore
        pending = sorted(self._late_first.items())
        state["late.pending_from"] = np.array(pending, np.int64).reshape(-1, 2)
        meta = {
            "windows_done": self.models.windows_done,
            "watermark_ms": int(self.windows.watermark_ms),
        }
        return state, meta


class DetectorProcessor:
    """Parses document messages and builds :class:`DetectorStreamState` per stream."""

    name = "detector"
    alert_kinds: tuple[str, ...] = ("novel_document", "emerging_topic")

    def __init__(self, config: Config) -> None:
        self.config = config
        # A stream quiet this long is checkpointed and may leave memory (consumers/worker.py).
        self.idle_timeout_s = config.windows.idle_timeout_s
        self.max_ahead_ms = config.windows.max_ahead_ms()

    def parse(self, payload: bytes | None, kafka_ms: int | None = None) -> Document | EndOfStream:
        """The message's document or end-of-stream marker. A document whose event time lies
        more than ``windows.max_ahead`` after ``kafka_ms``, the message's Kafka timestamp (when
        the producer sent it), is refused: one far-future event time (a wrong clock, a unit
        mix-up) would move its stream's watermark past every document to come, all of which
        would then be late (scored, never learnt from), and its window would stay open until
        the wall clock reached it, holding back the resume offset. The Kafka timestamp travels
        with the message, so a message read again gets the same verdict."""
        item = parse_message(payload, self.config.max_text_bytes)
        if (
            self.max_ahead_ms is not None
            and kafka_ms is not None
            and isinstance(item, Document)
            and item.timestamp_ms - kafka_ms > self.max_ahead_ms
        ):
            sent = datetime.fromtimestamp(kafka_ms / 1000, tz=UTC).isoformat(timespec="seconds")
            raise InvalidMessageError(
                f"event time {item.event_time.isoformat(timespec='seconds')} is more than "
                f"windows.max_ahead ({self.config.windows.max_ahead}) after the message's Kafka "
                f"timestamp {sent}: a wrong clock or time unit?"
            )
        return item

    def stream_of(self, item: Document | EndOfStream) -> str:
        return item.stream

    def ends_stream(self, item: Document | EndOfStream) -> bool:
        return isinstance(item, EndOfStream)

    def new_state(self, stream: str, checkpoint: Checkpoint | None) -> DetectorStreamState:
        return DetectorStreamState(stream, self.config, checkpoint)
