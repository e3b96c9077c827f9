"""Event-time windowing: every document lands in exactly one closed window or is flagged late."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, StreamWindower, WindowSpec


def _item(i: int, ts: int) -> Buffered:
    return Buffered(Document(f"d{i}", "t", ts), partition=0, offset=i)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=120),
    st.integers(100, 2_000),
    st.integers(0, 1_500),
)
def test_time_windows_partition_the_stream(times, size, lateness):
    w = StreamWindower("s", WindowSpec(size_ms=size, allowed_lateness_ms=lateness))
    closed, late, closed_until = [], [], -1
    for i, ts in enumerate(times):
        watermark = w.watermark_ms
        windows, status = w.add(_item(i, ts), now=0.0)
        if status == "late":
            # its window had already closed, or the watermark had passed it
            end = (ts // size + 1) * size
            assert ts < w.closed_until_ms or end <= watermark - lateness
            late.append(i)
        else:
            assert (ts // size + 1) * size > watermark - lateness  # on time
        for win in windows:
            assert win.start_ms >= closed_until  # closes in order, never reopens
            closed_until = win.end_ms
            assert all(win.start_ms <= b.doc.timestamp_ms < win.end_ms for b in win.items)
            # only windows the watermark has passed close
            assert win.end_ms <= max(times[: i + 1]) - lateness
        closed += windows
    closed += w.close_if_idle(now=1e9)
    seen = [b.offset for win in closed for b in win.items]
    assert sorted(seen + late) == list(range(len(times)))
    assert w.n_buffered == 0


def test_document_of_a_window_the_watermark_passed_is_late_even_if_none_came_before():
    w = StreamWindower("s", WindowSpec(size_ms=10))
    assert w.add(_item(0, 5), now=0.0)[1] == "buffered"
    closed, _ = w.add(_item(1, 100), now=0.0)  # the watermark passes windows 0..9
    assert [c.seq for c in closed] == [0]
    # Windows 1..9 were empty when the watermark passed them: their stragglers are late, like
    # those of window 0, instead of each becoming a window of one document, learned from.
    assert w.add(_item(2, 50), now=0.0) == ([], "late")
    assert w.add(_item(3, 15), now=0.0) == ([], "late")
    assert w.add(_item(4, 99), now=0.0) == ([], "late")  # window 9 ends at the watermark
    assert w.add(_item(5, 105), now=0.0) == ([], "buffered")  # window 10, open
    lenient = StreamWindower("s", WindowSpec(size_ms=10, allowed_lateness_ms=30))
    lenient.add(_item(0, 100), now=0.0)
    assert lenient.add(_item(1, 70), now=0.0) == ([], "buffered")  # within the lateness
    assert lenient.add(_item(2, 69), now=0.0) == ([], "late")  # window 6 ends at 70 = 100 - 30


def test_count_windows_and_restart_skip():
    w = StreamWindower("s", WindowSpec(size_ms=None, count=3))
    out = []
    for i in range(7):
        out += w.add(_item(i, 1000 + i), now=0.0)[0]
    assert [[b.offset for b in win.items] for win in out] == [[0, 1, 2], [3, 4, 5]]
    restored = StreamWindower("s", WindowSpec(size_ms=None, count=3)).set_state(w.get_state())
    # after a restart Kafka re-delivers from the open window; consumed offsets are recognised
    assert restored.add(_item(5, 1005), now=0.0) == ([], "seen")
    assert restored.add(_item(6, 1006), now=0.0) == ([], "buffered")
    assert restored.count_seq == 2


def test_idle_stream_closes_its_windows():
    w = StreamWindower("s", WindowSpec(size_ms=1000, allowed_lateness_ms=1000, idle_timeout_s=5.0))
    w.add(_item(0, 100), now=10.0)
    w.add(_item(1, 1500), now=11.0)
    assert w.close_if_idle(now=15.0) == []
    closed = w.close_if_idle(now=16.5)
    assert [(c.seq, c.closed_by, len(c.items)) for c in closed] == [(0, "idle", 1), (1, "idle", 1)]
    assert w.add(_item(2, 1999), now=17.0) == ([], "late")


def test_end_of_stream_closes_every_open_window_at_once():
    w = StreamWindower("s", WindowSpec(size_ms=1000, allowed_lateness_ms=1000, idle_timeout_s=5.0))
    assert w.close_all("end_of_stream") == []
    w.add(_item(0, 100), now=10.0)
    w.add(_item(1, 1500), now=10.0)
    w.add(_item(2, 2500), now=10.0)  # the watermark (2500 - 1000) closes window 0
    closed = w.close_all("end_of_stream")  # no idle wait
    assert [(c.seq, c.closed_by, len(c.items)) for c in closed] == [
        (1, "end_of_stream", 1),
        (2, "end_of_stream", 1),
    ]
    assert w.n_buffered == 0
    assert w.add(_item(3, 2999), now=10.0) == ([], "late")
    assert w.add(_item(4, 3000), now=10.0) == ([], "buffered")  # a later window opens
    counted = StreamWindower("c", WindowSpec(size_ms=None, count=3))
    for i in range(4):
        counted.add(_item(i, i), now=0.0)
    (last,) = counted.close_all("end_of_stream")
    assert ([b.offset for b in last.items], last.closed_by) == ([3], "end_of_stream")
    assert counted.add(_item(3, 3), now=0.0) == ([], "seen")  # re-delivered after a restart


def test_state_round_trip_continues_identically():
    spec = WindowSpec(size_ms=100, allowed_lateness_ms=50)
    a = StreamWindower("s", spec)
    for i, ts in enumerate([10, 120, 260, 90, 330]):
        a.add(_item(i, ts), now=0.0)
    b = StreamWindower("s", spec).set_state(a.get_state())
    assert (b.watermark_ms, b.closed_until_ms) == (a.watermark_ms, a.closed_until_ms)
    assert b.add(_item(9, 150), now=0.0)[1] == a.add(_item(9, 150), now=0.0)[1] == "late"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"size_ms": None},
        {"size_ms": 10, "count": 3},
        {"size_ms": 0},
        {"size_ms": 10, "idle_timeout_s": 0},
    ],
)
def test_bad_specs_are_refused(kwargs):
    with pytest.raises(ValueError):
        WindowSpec(**kwargs)


def _copy(i: int, ts: int, offset: int) -> Buffered:
    """A second message of document ``d{i}`` (a producer's retry, a corpus replayed twice)."""
    return Buffered(Document(f"d{i}", "t again", ts), partition=0, offset=offset)


def test_a_document_id_already_in_an_open_window_is_a_duplicate():
    """A message sent twice was buffered twice: scored, flagged and learnt from twice, the store
    then keeping the first row."""
    w = StreamWindower("s", WindowSpec(size_ms=1000, allowed_lateness_ms=1000))
    w.add(_item(0, 100), now=0.0)
    w.add(_item(1, 1100), now=0.0)  # window 1 opens; window 0 stays open (watermark 100)
    assert w.add(_copy(0, 150, 7), now=0.0) == ([], "duplicate")
    assert w.add(_copy(1, 1900, 8), now=0.0) == ([], "duplicate")  # any open window
    assert w.buffered_as("d0") == _item(0, 100) and w.n_buffered == 2
    closed = w.close_all("end_of_stream")
    assert [[b.offset for b in c.items] for c in closed] == [[0], [1]]  # the first copies
    # once its window has closed, an id is no longer held (the store keeps the first row)
    assert w.buffered_as("d0") is None
    assert w.add(_copy(0, 2500, 9), now=0.0) == ([], "buffered")


def test_duplicates_in_count_windows_and_after_dropped_buffers():
    w = StreamWindower("s", WindowSpec(size_ms=None, count=3))
    w.add(_item(0, 0), now=0.0)
    assert w.add(_copy(0, 1, 1), now=0.0) == ([], "duplicate")
    w.drop_buffers()  # revoked: Kafka delivers the open window again, nothing is a duplicate
    assert w.add(_item(0, 0), now=0.0) == ([], "buffered")
    closed = [c for i in (1, 2) for c in w.add(_item(i, i), now=0.0)[0]]
    assert [[b.doc.id for b in c.items] for c in closed] == [["d0", "d1", "d2"]]
    assert w.add(_copy(0, 3, 3), now=0.0) == ([], "buffered")  # its window has closed
