"""What the worker asks of every stream's state at every commit costs the same whatever the stream
buffers.

The worker loop computes its partitions' resume offsets at every transaction, one per closed window
and at least one per batch, from the smallest offset each stream in memory still buffers
(:meth:`StreamWindower.min_buffered_offset`, :meth:`DetectorStreamState.min_buffered_offset`), and
checkpoints record where a stream's late documents waiting to be stored begin. Both read every
buffered document: with 2,000 streams of 20 documents each interleaved on one partition, 2,039
commits asked 6.1 million times, which took 83 of the 129 s the worker loop spent on 40,000
documents (cProfile), and a single stream's open window of a day was read whole at every batch.
Now the smallest offset is kept per open window and partition as documents are buffered.

Work is counted as the Python line events the call executes (``sys.settrace``; a loop's every
iteration is one), not timed.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import sparsewatch.consumers
import sparsewatch.models
import sparsewatch.storage
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow, StreamWindower, WindowSpec

import sparsewatch
from sparsewatch.config import load_config

# sparsewatch's subpackages live in folders of their own (pyproject's package-dir: consumers/, not
# sparsewatch/consumers/): counting sparsewatch/ alone counted none of their lines, 0 == 0
_PACKAGE_DIRS = tuple(
    os.path.dirname(package.__file__ or "") + os.sep
    for package in (sparsewatch, sparsewatch.consumers, sparsewatch.models, sparsewatch.storage)
)


def _steps(call: Callable[[], Any]) -> tuple[int, Any]:
    """The line events ``call`` executes, and its result.

    The garbage collector is collected first and paused during the call: a collection it triggers
    would run other objects' finalizers inside the trace (in the full suite a call once counted 15
    line events against 6). Only sparsewatch's own lines are counted.
    """
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal count
        count += event == "line" and frame.f_code.co_filename.startswith(_PACKAGE_DIRS)
        return tracer

    before = sys.gettrace()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    sys.settrace(tracer)
    try:
        result = call()
    finally:
        sys.settrace(before)
        if was_enabled:
            gc.enable()
    return count, result


def _item(i: int, ts: int, partition: int = 0, offset: int | None = None) -> Buffered:
    return Buffered(Document(f"d{i}", "t", ts), partition, i if offset is None else offset)


def _buffered_windower(n: int) -> StreamWindower:
    """A stream with ``n`` documents in window 0 (and partition 1's in it) and one in window 1,
    both open (an hour of allowed lateness)."""
    w = StreamWindower("s", WindowSpec(size_ms=1000, allowed_lateness_ms=3_600_000))
    for i in range(n):
        assert w.add(_item(i, i % 1000, partition=i % 2, offset=10 + i), now=0.0)[1] == "buffered"
    assert w.add(_item(n, 1500, offset=5), now=0.0)[1] == "buffered"
    return w


def test_the_smallest_buffered_offset_does_not_read_the_buffered_documents():
    small, large = _buffered_windower(10), _buffered_windower(5000)
    assert large.n_buffered == 5001
    for partition, expected in ((0, 5), (1, 11), (2, None)):
        steps_small, at_small = _steps(lambda p=partition: small.min_buffered_offset(p))
        steps_large, at_large = _steps(lambda p=partition: large.min_buffered_offset(p))
        assert at_small == at_large == expected
        assert steps_large == steps_small  # (it read all 5,001 documents: 10,000 more steps)


# (add | close_all | idle | restore, timestamp, partition, offset or the idle close's wall ms)
Op = tuple[str, int, int, int]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 5000), st.integers(0, 1), st.integers(0, 400)),
        st.tuples(
            st.sampled_from(["close_all", "idle", "restore"]),
            st.just(0),
            st.just(0),
            st.integers(0, 6000),
        ),
    ),
    max_size=80,
)


@settings(max_examples=80, deadline=None)
@given(
    OPS,
    st.sampled_from(
        [WindowSpec(size_ms=1000, allowed_lateness_ms=2000), WindowSpec(size_ms=None, count=4)]
    ),
)
def test_the_smallest_buffered_offset_is_that_of_the_documents_the_open_windows_hold(
    ops: list[Op], spec: WindowSpec
):
    """Whatever the order of offsets and partitions, closes and restores (a restored stream
    re-reads its open windows: they start empty)."""
    w = StreamWindower("s", spec)
    held: dict[str, Buffered] = {}  # the documents the open windows hold, by id
    for i, (op, ts, partition, offset) in enumerate(ops):
        closed: list[ClosedWindow] = []
        if op == "add":
            item = _item(i, ts, partition, offset)
            closed, status = w.add(item, now=float(i))
            if status == "buffered":
                held[item.doc.id] = item
        elif op == "close_all":
            closed = w.close_all("end_of_stream")
        elif op == "idle":
            closed = w.close_if_idle(now=float(i) + 60.0, wall_ms=float(offset))
        else:
            w = StreamWindower("s", spec).set_state(w.get_state())
            held.clear()
        for window in closed:
            for b in window.items:
                del held[b.doc.id]
        for p in (0, 1):
            offsets = [b.offset for b in held.values() if b.partition == p]
            assert w.min_buffered_offset(p) == (min(offsets) if offsets else None)
        assert w.n_buffered == len(held)


def _stream_with_late_documents(n_late: int) -> DetectorStreamState:
    """A detector stream (1 s windows) whose window 0 closed, window 1 open with one document
    (offset 1), and ``n_late`` late documents of window 0 waiting to be handed over (offsets 2
    on)."""
    state = DetectorStreamState("s", load_config(env={"SPARSEWATCH_WINDOWS_SIZE": "1s"}), None)
    state.add(Document("d0", "storm report", 100), 0, 0, now=0.0)
    assert len(state.add(Document("d1", "market report", 1100), 0, 1, now=0.0)) == 1
    for i in range(n_late):
        assert state.add(Document(f"late{i}", "court report", 200), 0, 2 + i, now=0.0) == []
    return state


def test_a_detector_stream_answers_without_reading_its_late_documents():
    few, many = _stream_with_late_documents(1), _stream_with_late_documents(500)
    for partition, expected in ((0, 1), (1, None)):
        steps_few, at_few = _steps(lambda p=partition: few.min_buffered_offset(p))
        steps_many, at_many = _steps(lambda p=partition: many.min_buffered_offset(p))
        assert at_few == at_many == expected
        assert steps_many == steps_few  # (it read all 500 late documents)
    # the checkpoint records where the late documents waiting begin, and forgets them stored
    assert many.checkpoint()[0]["late.pending_from"].tolist() == [[0, 2]]
    late = [out for out in many.close_idle(silent_until=0.0, wall_ms=0.0) if not out.is_window]
    assert [out.late for out in late] == [500]
    assert many.checkpoint()[0]["late.pending_from"].shape == (0, 2)
    assert many.min_buffered_offset(0) == 1


def _open_windows(n: int) -> StreamWindower:
    """A stream of 1 s windows with an hour of allowed lateness and ``n`` open windows, one
    document each, the last one window 3600 (window ``3601 - n`` the earliest)."""
    w = StreamWindower("s", WindowSpec(size_ms=1000, allowed_lateness_ms=3_600_000))
    for seq in range(3601 - n, 3601):
        assert w.add(_item(seq, seq * 1000), now=0.0) == ([], "buffered")
    assert len(w._open) == n
    return w


def test_adding_a_document_examines_only_the_windows_it_closes():
    """Before, every add examined every open window (``_close_passed``): with 3,601 open windows
    the stream took 636 documents/s against 33,622 with one."""
    few, many = _open_windows(1), _open_windows(3601)
    # joining the newest open window closes none
    steps_few, (closed_few, _) = _steps(lambda: few.add(_item(5000, 3_600_500), now=1.0))
    steps_many, (closed_many, _) = _steps(lambda: many.add(_item(5000, 3_600_500), now=1.0))
    assert closed_few == closed_many == []
    assert 0 < steps_many == steps_few  # (it examined all 3,601 windows: 7,000 more steps)
    # a document whose watermark passes the earliest open window closes that one only
    few, many = _open_windows(1), _open_windows(3601)
    steps_few, (closed_few, _) = _steps(lambda: few.add(_item(5001, 7_201_000), now=2.0))
    steps_many, (closed_many, _) = _steps(lambda: many.add(_item(5001, 3_601_000), now=2.0))
    assert [w.seq for w in closed_few] == [3600] and [w.seq for w in closed_many] == [0]
    assert steps_many == steps_few
    assert len(many._open) == 3601  # window 0 closed, window 3601 opened


class _ScanningWindower(StreamWindower):
    """The windower as it was: closing examined every open window (the reference)."""

    def _close_passed(self) -> list[ClosedWindow]:
        ready = sorted(seq for seq in self._open if self._passed(seq))
        return [self._pop_time_window(seq, "watermark") for seq in ready]

    def close_if_idle(self, now: float, wall_ms: float) -> list[ClosedWindow]:
        if not self.is_idle(now):
            return []
        if self.spec.count is not None or self.spec.idle_close == "all":
            return self.close_all("idle")
        ended = sorted(seq for seq in self._open if self._end_ms(seq) <= wall_ms)
        return [self._pop_time_window(seq, "idle") for seq in ended]

    def open_ahead_ms(self, wall_ms: float) -> float:
        if self.spec.count is not None or not self._open:
            return 0.0
        return max(self._end_ms(min(self._open)) - wall_ms, 0.0)

    def close_all(self, closed_by: str) -> list[ClosedWindow]:
        if not self._open or self.spec.count is not None:
            return super().close_all(closed_by)
        return [self._pop_time_window(seq, closed_by) for seq in sorted(self._open)]


def _closed(windows: list[ClosedWindow]) -> list[tuple[Any, ...]]:
    return [
        (w.seq, w.start_ms, w.end_ms, w.closed_by, [(b.doc.id, b.offset) for b in w.items])
        for w in windows
    ]


@settings(max_examples=150, deadline=None)
@given(
    OPS,
    st.sampled_from(
        [
            WindowSpec(size_ms=1000, allowed_lateness_ms=2000),
            WindowSpec(size_ms=300, allowed_lateness_ms=0, dedup_documents=3),
            WindowSpec(size_ms=100, allowed_lateness_ms=4000, idle_close="all"),
            WindowSpec(size_ms=None, count=4),
        ]
    ),
    st.sampled_from([WindowSpec(size_ms=200, allowed_lateness_ms=1000), None]),
)
def test_the_windows_closed_are_those_the_scan_of_every_open_window_closed(
    ops: list[Op], spec: WindowSpec, restored_spec: WindowSpec | None
):
    """The same windows, documents, statuses and checkpoints as the scan, in the same order,
    through closes, idle closes and restores (also under another window size: the heap of open
    windows is rebuilt from the documents read again, never checkpointed)."""
    new, old = StreamWindower("s", spec), _ScanningWindower("s", spec)
    for i, (op, ts, partition, offset) in enumerate(ops):
        if op == "add":
            item = _item(i % 50, ts, partition, offset)  # ids repeat: duplicates and re-reads
            (closed_new, status_new), (closed_old, status_old) = (
                new.add(item, now=float(i)),
                old.add(item, now=float(i)),
            )
            assert status_new == status_old
        elif op == "close_all":
            closed_new, closed_old = new.close_all("end_of_stream"), old.close_all("end_of_stream")
        elif op == "idle":
            now, wall = float(i) + 60.0, float(offset)
            assert new.open_ahead_ms(wall) == old.open_ahead_ms(wall)
            closed_new, closed_old = new.close_if_idle(now, wall), old.close_if_idle(now, wall)
        else:
            state = new.get_state()
            again = restored_spec or spec
            new = StreamWindower("s", again).set_state(state)
            old = _ScanningWindower("s", again).set_state(old.get_state())
            closed_new, closed_old = [], []
        assert _closed(closed_new) == _closed(closed_old)
        assert sorted(new._open) == sorted(old._open)
    state_new, state_old = new.get_state(), old.get_state()
    assert state_new.keys() == state_old.keys()
    for key, value in state_new.items():
        assert value.tolist() == state_old[key].tolist(), key
