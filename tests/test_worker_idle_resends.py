"""Idle means no document joined an open window (``consumers/windowing.py``).

A stream that received only re-sends (duplicates, dead-lettered), or only late documents, was never
idle to its windower (every message reset its idle timer), so its open window never closed by the
idle timer, although nothing it received could join or close a window.
"""

from __future__ import annotations

import pytest
from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import Document, InvalidMessageError
from sparsewatch.consumers.windowing import Buffered, StreamWindower, WindowSpec

from sparsewatch.config import Config


def _item(doc_id: str, ts: int, offset: int) -> Buffered:
    return Buffered(Document(doc_id, "t", ts), partition=0, offset=offset)


@pytest.mark.parametrize("count", [None, 5])
def test_a_stream_receiving_only_resends_closes_its_window_when_idle(count):
    spec = WindowSpec(size_ms=None if count else 1000, count=count, idle_timeout_s=5.0)
    w = StreamWindower("s", spec)
    assert w.add(_item("d0", 100, 0), now=0.0) == ([], "buffered")
    for i in range(1, 8):  # a producer re-sending d0 every 3 s
        assert w.add(_item("d0", 100, i), now=3.0 * i) == ([], "duplicate")
    assert w.close_if_idle(now=4.9, wall_ms=1e15) == []
    [closed] = w.close_if_idle(now=5.0, wall_ms=1e15)
    assert (closed.closed_by, [b.offset for b in closed.items]) == ("idle", [0])


def test_a_stream_receiving_only_late_documents_closes_its_window_when_idle():
    w = StreamWindower("s", WindowSpec(size_ms=1000, idle_timeout_s=5.0))
    w.add(_item("d0", 100, 0), now=0.0)
    w.add(_item("d1", 1100, 1), now=0.0)  # window 0 closes; window 1 stays open
    for i in range(2, 10):  # a backfill of old documents, one every 2 s
        assert w.add(_item(f"d{i}", 200 + i, i), now=2.0 * i) == ([], "late")
    [closed] = w.close_if_idle(now=5.0, wall_ms=1e15)
    assert (closed.seq, closed.closed_by, [b.offset for b in closed.items]) == (1, "idle", [1])


def test_documents_joining_a_window_still_keep_it_open():
    w = StreamWindower("s", WindowSpec(size_ms=1000, idle_timeout_s=5.0))
    for i in range(5):
        assert w.add(_item(f"d{i}", 100 + i, i), now=3.0 * i) == ([], "buffered")
    assert w.close_if_idle(now=16.9, wall_ms=1e15) == []
    assert [c.seq for c in w.close_if_idle(now=17.0, wall_ms=1e15)] == [0]


def test_the_idle_timer_over_resends_replays_the_same_verdicts():
    """Exactly once: after a restore from the checkpoint written with the idle-closed window,
    re-reading the re-sends gives them the same verdict (duplicate), and the window is not
    recomputed."""
    w = StreamWindower("s", WindowSpec(size_ms=1000, idle_timeout_s=5.0))
    w.add(_item("d0", 100, 0), now=0.0)
    first = [w.add(_item("d0", 100, i), now=3.0 * i)[1] for i in range(1, 4)]
    [closed] = w.close_if_idle(now=9.0, wall_ms=1e15)
    assert [b.offset for b in closed.items] == [0]
    restored = StreamWindower("s", w.spec).set_state(w.get_state())
    again = [restored.add(_item("d0", 100, i), now=100.0 + i) for i in range(0, 4)]
    assert again == [([], "late")] + [([], s) for s in first] and first == ["duplicate"] * 3
    assert restored.close_if_idle(now=1e6, wall_ms=1e15) == []


def test_the_detector_state_of_a_stream_of_resends_reports_its_window():
    """Through the detector's stream state, as the worker drives it: each re-send is a dead
    letter, and the stream's window closes by the idle timer with its one document."""
    config = Config()
    state = DetectorStreamState("s", config, None)
    timeout = state.spec.idle_timeout_s
    assert state.add(Document("d0", "breaking news text", 100), 0, 0, now=0.0) == []
    for i in range(1, 6):
        with pytest.raises(InvalidMessageError, match="duplicate of the document at"):
            state.add(Document("d0", "breaking news text", 100), 0, i, now=timeout * i / 2)
    [out] = state.close_idle(silent_until=timeout * 3, wall_ms=1e15)
    assert out.is_window and out.n_documents == 1
