"""Event-time windowing: every document lands in exactly one closed window or is flagged late."""

from __future__ import annotations

import dataclasses
import random

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
    closed += w.close_if_idle(now=1e9, wall_ms=1e15)
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
    """A replayed past stream: the wall clock has passed every window, all close when idle."""
    w = StreamWindower("s", WindowSpec(size_ms=1000, allowed_lateness_ms=1000, idle_timeout_s=5.0))
    w.add(_item(0, 100), now=10.0)
    w.add(_item(1, 1500), now=11.0)
    assert w.close_if_idle(now=15.0, wall_ms=1e15) == []
    closed = w.close_if_idle(now=16.5, wall_ms=1e15)
    assert [(c.seq, c.closed_by, len(c.items)) for c in closed] == [(0, "idle", 1), (1, "idle", 1)]
    assert w.add(_item(2, 1999), now=17.0) == ([], "late")


@pytest.mark.parametrize("idle_close", ["ended", "all"])
def test_an_idle_live_stream_keeps_the_window_the_wall_clock_is_in(idle_close):
    """A live stream (event time = wall clock) quiet for longer than the timeout: with "ended" the
    window it is in stays open until the wall clock passes its end plus the lateness, so the
    documents after the gap are learnt in it, not late; "all" closes it at once (reports sooner)
    and its later documents are late."""
    spec = WindowSpec(size_ms=60_000, allowed_lateness_ms=40_000, idle_timeout_s=2.0)
    w = StreamWindower("s", dataclasses.replace(spec, idle_close=idle_close))
    wall0 = 1_767_225_600_000 + 30_000  # half a minute into window seq 29,453,760
    seq = wall0 // 60_000
    assert w.add(_item(0, wall0 - 40_000), now=0.0)[1] == "buffered"  # the window before
    assert w.add(_item(1, wall0 - 1_000), now=1.0)[1] == "buffered"
    assert w.add(_item(2, wall0), now=2.0)[1] == "buffered"  # the watermark closes neither
    # (now, wall) as the worker passes them: wall = the epoch time of ``now``
    closed = w.close_if_idle(now=10.0, wall_ms=wall0 + 12_000)
    if idle_close == "all":
        assert [(c.seq, len(c.items)) for c in closed] == [(seq - 1, 1), (seq, 2)]
        assert w.add(_item(3, wall0 + 20_000), now=22.0) == ([], "late")
        assert w.closed_early(wall0 + 20_000)
        return
    # only the window the wall clock has passed (by more than the lateness) closes
    assert [(c.seq, c.closed_by, len(c.items)) for c in closed] == [(seq - 1, "idle", 1)]
    assert w.open_ahead_ms(wall0 + 12_000) == 30_000 + 40_000 - 12_000
    assert w.add(_item(3, wall0 + 20_000), now=22.0) == ([], "buffered")  # after the gap
    assert w.close_if_idle(now=30.0, wall_ms=wall0 + 30_000) == []  # idle, but not over yet
    assert w.close_if_idle(now=66.0, wall_ms=wall0 + 69_999) == []  # within the lateness
    assert w.add(_item(4, wall0 + 29_000), now=66.0) == ([], "buffered")  # a late arrival
    assert w.close_if_idle(now=67.0, wall_ms=wall0 + 71_000) == []  # idle only from 66 + 2
    [last] = w.close_if_idle(now=68.0, wall_ms=wall0 + 72_000)
    assert (last.seq, last.closed_by, [b.offset for b in last.items]) == (seq, "idle", [1, 2, 3, 4])
    assert w.n_buffered == 0 and w.open_ahead_ms(wall0 + 72_000) == 0.0


def test_an_idle_count_window_closes_whatever_the_wall_clock():
    w = StreamWindower("s", WindowSpec(size_ms=None, count=5, idle_timeout_s=1.0))
    w.add(_item(0, 10**15), now=0.0)  # an event time far ahead: a count window has no end
    [window] = w.close_if_idle(now=2.0, wall_ms=0.0)
    assert (window.closed_by, len(window.items)) == ("idle", 1)
    assert w.open_ahead_ms(0.0) == 0.0


def test_the_idle_close_mode_is_checked():
    with pytest.raises(ValueError, match="idle_close must be one of"):
        WindowSpec(idle_close="open")


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
    assert w.first_copy(0, 7) == (0, 0, True) and w.n_buffered == 2
    closed = w.close_all("end_of_stream")
    assert [[b.offset for b in c.items] for c in closed] == [[0], [1]]  # the first copies


@pytest.mark.parametrize("late", [False, True], ids=["in-a-later-window", "late"])
def test_a_document_id_of_a_closed_window_is_a_duplicate(late: bool):
    """A copy arriving after its first copy's window closed was processed again: in a later
    window (learnt twice) or as a late document (scored and published twice)."""
    w = StreamWindower("s", WindowSpec(size_ms=1000))
    w.add(_item(0, 100), now=0.0)
    w.add(_item(1, 1100), now=0.0)  # window 0 closes
    ts = 500 if late else 2500
    assert w.add(_copy(0, ts, 9), now=0.0) == ([], "duplicate")
    assert w.first_copy(0, 9) == (0, 0, False)
    # still open: a duplicate as before, also with a late time stamp (it was stored as late,
    # and its window's row then lost to that first write)
    assert w.add(_copy(1, ts, 10), now=0.0) == ([], "duplicate")
    assert w.n_buffered == 1
    # a late document is remembered too: its re-send is a duplicate, not late again
    late = Buffered(Document("d5", "t", 200), partition=0, offset=11)
    assert w.add(late, now=0.0) == ([], "late")
    assert w.add(_copy(5, 300, 12), now=0.0) == ([], "duplicate")
    assert w.first_copy(0, 12) == (0, 11, False)


def test_the_same_message_read_again_is_not_a_duplicate():
    """After a restart Kafka delivers messages again from the resume offset, some of windows that
    closed before the checkpoint: same offset, so handled as before (late, or seen), not
    dead-lettered as duplicates."""
    w = StreamWindower("s", WindowSpec(size_ms=1000))
    for i, ts in enumerate([100, 1100, 2100]):
        w.add(_item(i, ts), now=0.0)
    restored = StreamWindower("s", WindowSpec(size_ms=1000)).set_state(w.get_state())
    assert restored.add(_item(0, 100), now=0.0) == ([], "late")
    assert restored.add(_item(1, 1100), now=0.0) == ([], "late")
    counted = StreamWindower("s", WindowSpec(size_ms=None, count=2))
    for i in range(3):
        counted.add(_item(i, i), now=0.0)
    again = StreamWindower("s", WindowSpec(size_ms=None, count=2)).set_state(counted.get_state())
    assert [again.add(_item(i, i), now=0.0)[1] for i in range(3)] == ["seen", "seen", "buffered"]
    assert again.add(_copy(1, 5, 7), now=0.0) == ([], "duplicate")


def test_remembered_ids_survive_a_checkpoint_and_are_bounded():
    ids = ["d0", "zürich-ü", "東京-1", "", "x" * 300, "d5", "d6"]
    w = StreamWindower("s", WindowSpec(size_ms=None, count=1, dedup_documents=5))
    for offset, doc_id in enumerate(ids):
        w.add(Buffered(Document(doc_id, "t", offset), 0, offset), now=0.0)
    state = w.get_state()
    assert all(a.dtype != object for a in state.values())
    restored = StreamWindower("s", WindowSpec(size_ms=None, count=1, dedup_documents=5))
    restored.set_state(state)
    for offset, doc_id in list(enumerate(ids))[2:]:  # the five newest are remembered
        status = restored.add(Buffered(Document(doc_id, "t", 99), 0, 100 + offset), now=0.0)[1]
        assert status == "duplicate", doc_id
        assert restored.first_copy(0, 100 + offset) == (0, offset, False), doc_id
    for i, doc_id in enumerate(ids[:2]):  # the oldest forgotten
        item = Buffered(Document(doc_id, "t", 99), 0, 200 + i)
        assert restored.add(item, now=0.0)[1] == "buffered"
    # a smaller bound keeps the newest; a checkpoint from before ids were remembered restores none
    smaller = StreamWindower("s", WindowSpec(size_ms=None, count=1, dedup_documents=2))
    smaller.set_state(state)
    assert smaller.add(_copy(5, 0, 50), now=0.0)[1] == "duplicate"
    assert smaller.add(Buffered(Document(ids[2], "t", 0), 0, 60), now=0.0)[1] == "buffered"
    old = {k: v for k, v in state.items() if not k.startswith("done_")}
    fresh = StreamWindower("s", WindowSpec(size_ms=None, count=1)).set_state(old)
    assert fresh.add(_copy(5, 0, 70), now=0.0)[1] == "buffered"


def test_dedup_documents_zero_checks_open_windows_only():
    w = StreamWindower("s", WindowSpec(size_ms=1000, dedup_documents=0))
    w.add(_item(0, 100), now=0.0)
    assert w.add(_copy(0, 150, 7), now=0.0) == ([], "duplicate")
    w.add(_item(1, 1100), now=0.0)  # window 0 closes
    assert w.add(_copy(0, 2500, 9), now=0.0)[1] == "buffered"
    state = w.get_state()
    assert state["done_offsets"].size == 0
    # a checkpoint without remembered ids restores (it raised ValueError: every restart of a
    # worker configured with dedup_documents = 0 crashed)
    fresh = StreamWindower("s", WindowSpec(size_ms=1000, dedup_documents=0)).set_state(state)
    assert (
        fresh.closed_until_ms == w.closed_until_ms and fresh.get_state()["done_id_bytes"].size == 0
    )


def test_duplicates_in_count_windows_and_after_a_restore():
    w = StreamWindower("s", WindowSpec(size_ms=None, count=3))
    w.add(_item(0, 0), now=0.0)
    assert w.add(_copy(0, 1, 1), now=0.0) == ([], "duplicate")
    # revoked and restored from the checkpoint: Kafka delivers the open window again; its
    # document is not a duplicate, the re-send is one again
    w = StreamWindower("s", WindowSpec(size_ms=None, count=3)).set_state(w.get_state())
    assert w.add(_item(0, 0), now=0.0) == ([], "buffered")
    assert w.add(_copy(0, 1, 1), now=0.0) == ([], "duplicate")
    closed = [c for i in (1, 2) for c in w.add(_copy(i, i, i + 1), now=0.0)[0]]
    assert [[b.doc.id for b in c.items] for c in closed] == [["d0", "d1", "d2"]]
    assert w.add(_copy(0, 3, 4), now=0.0) == ([], "duplicate")  # its window has closed


def test_count_offsets_of_another_partition_are_not_taken_for_consumed():
    """A stream that moved partition (partitions added, keys rehashed; an unkeyed producer)
    after a checkpoint: its restored count-window offset, of the old partition, made every
    message of the new one below it "seen", dropped without a trace."""
    w = StreamWindower("s", WindowSpec(size_ms=None, count=2))
    for i in range(4):
        w.add(_item(i, i), now=0.0)  # partition 0, offsets 0..3: two windows
    restored = StreamWindower("s", WindowSpec(size_ms=None, count=2)).set_state(w.get_state())
    moved = [Buffered(Document(f"m{i}", "t", 10 + i), partition=1, offset=i) for i in range(3)]
    statuses = [restored.add(b, now=0.0) for b in moved]
    assert [status for _, status in statuses] == ["buffered"] * 3
    assert [[b.doc.id for b in c.items] for c in statuses[1][0]] == [["m0", "m1"]]
    assert restored.add(_item(1, 1), now=0.0)[1] == "seen"  # a consumed message read again
    # a re-send across partitions is still a duplicate; the reason names the first copy's place
    assert restored.add(Buffered(Document("d1", "t", 1), 1, 9), now=0.0)[1] == "duplicate"
    assert restored.first_copy(1, 9) == (0, 1, False)
    # a checkpoint written before partitions were kept: its offset holds for any, as it did
    old = {k: v for k, v in w.get_state().items() if k != "count_partition"}
    legacy = StreamWindower("s", WindowSpec(size_ms=None, count=2)).set_state(old)
    assert legacy.add(moved[0], now=0.0)[1] == "seen"


@pytest.mark.parametrize("dedup", [0, 1])
def test_a_duplicate_read_again_after_a_restore_is_a_duplicate_again(dedup: int):
    """Whether a re-read message was a duplicate depended on the ids remembered at the
    checkpoint, not at its first reading: a re-send whose first copy's window closed before the
    checkpoint, and whose id was then forgotten (dedup_documents 0, or pushed out by a later id),
    was learnt in the recomputed window: the model then differed from an uninterrupted run's."""
    spec = WindowSpec(size_ms=1000, allowed_lateness_ms=1000, dedup_documents=dedup)
    docs = [("D", 100), ("E", 1100), ("D", 1200), ("F", 2100), ("L", 50), ("G", 3100)]
    msgs = [Buffered(Document(i, "text", t), 0, off) for off, (i, t) in enumerate(docs)]

    def run(w: StreamWindower, items: list[Buffered]) -> tuple[list[str], list[list[str]]]:
        statuses, windows = [], []
        for b in items:
            closed, status = w.add(b, now=0.0)
            statuses.append(status)
            windows += [[x.doc.id for x in c.items] for c in closed]
        return statuses, windows

    original = StreamWindower("s", spec)
    statuses, windows = run(original, msgs[:5])  # checkpoint after L (offset 4)
    assert statuses[2] == "duplicate" and windows == [["D"]]
    state, resume = original.get_state(), original.min_buffered_offset(0)
    assert resume == 1  # E's window is still open
    rest = run(original, msgs[5:])
    restored = StreamWindower("s", spec).set_state(state)
    replayed = run(restored, msgs[resume:])
    assert replayed[0][1] == "duplicate" and replayed[1] == rest[1] == [["E"]]
    assert restored.first_copy(0, 2) == (0, 0, True)  # D's first copy was still open then
    # once the stored resume offset has passed it, the verdict goes (it is never read again)
    restored.forget_duplicates_before(0, 3)
    assert restored.get_state()["duplicates"].shape == (0, 5)


def test_a_late_document_read_again_leaves_the_remembered_ids_as_the_checkpoint_has_them():
    """Read again after a restore, a late document was remembered a second time: with a bound,
    the ids pushed out then differed from an uninterrupted run's, and a later re-send was (or
    was not) a duplicate in one run only. And a message whose id the memory holds at a later
    offset of its partition (its re-send, itself processed late once the first copy had been
    forgotten) was taken for a duplicate of it."""
    spec = WindowSpec(size_ms=100, dedup_documents=1)
    w = StreamWindower("s", spec)
    docs = [("a", 150), ("x", 50), ("y", 60), ("x", 70), ("b", 250)]
    statuses = [
        w.add(Buffered(Document(i, "t", t), 0, o), now=0.0)[1] for o, (i, t) in enumerate(docs)
    ]
    assert statuses == ["buffered", "late", "late", "late", "buffered"]  # x forgotten by offset 3
    state = w.get_state()
    restored = StreamWindower("s", spec).set_state(state)
    again = [
        restored.add(Buffered(Document(i, "t", t), 0, o), now=0.0)[1]
        for o, (i, t) in enumerate(docs)
    ]
    assert again == ["late", "late", "late", "late", "buffered"]
    assert restored.get_state()["done_offsets"].tolist() == state["done_offsets"].tolist()


def _random_stream(rng: random.Random) -> list[Document | None]:
    """Documents with jittered event times, re-sends of earlier ids and end-of-stream markers
    (``None``), as one partition delivers them."""
    out: list[Document | None] = []
    ids: list[str] = []
    t = 0
    for offset in range(rng.randint(5, 40)):
        if rng.random() < 0.05:
            out.append(None)
            continue
        doc_id = rng.choice(ids) if ids and rng.random() < 0.2 else f"d{offset}"
        ids.append(doc_id)
        t = max(0, t + rng.randint(-300, 400))
        out.append(Document(doc_id, "t", t))
    return out


def _feed(w: StreamWindower, stream: list[Document | None], start: int) -> list[tuple]:
    """Feed ``stream`` from offset ``start``; per offset: the status and the windows closed,
    with a checkpoint (state, resume offset) wherever a window closed or a document was late."""
    steps = []
    for offset in range(start, len(stream)):
        doc = stream[offset]
        if doc is None:
            closed, status = w.close_all("end_of_stream"), "end"
        else:
            closed, status = w.add(Buffered(doc, 0, offset), now=0.0)
        windows = [(c.seq, tuple(b.offset for b in c.items)) for c in closed]
        checkpoint = None
        if closed or status == "late":
            resume = w.min_buffered_offset(0)
            checkpoint = (w.get_state(), offset + 1 if resume is None else resume)
        steps.append((offset, status, windows, checkpoint))
    return steps


@pytest.mark.parametrize("seed", range(0, 400, 50))
def test_a_restore_after_any_window_replays_like_the_uninterrupted_run(seed: int):
    """Crash/restore fuzz: from every checkpoint, re-reading from its resume offset gives the
    windows of the uninterrupted run after it, and every message after it the same verdict;
    those read again before it may only turn late or seen (their window already closed)."""
    for s in range(seed, seed + 50):
        rng = random.Random(s)
        spec = (
            WindowSpec(
                size_ms=rng.choice([100, 250, 500]),
                allowed_lateness_ms=rng.choice([0, 100, 400]),
                dedup_documents=rng.choice([0, 1, 2, 3, 100]),
            )
            if rng.random() < 0.5
            else WindowSpec(
                size_ms=None, count=rng.randint(1, 4), dedup_documents=rng.choice([0, 1, 3, 100])
            )
        )
        stream = _random_stream(rng)
        original = _feed(StreamWindower("s", spec), stream, 0)
        for at, _, _, checkpoint in original:
            if checkpoint is None:
                continue
            state, resume = checkpoint
            replay = _feed(StreamWindower("s", spec).set_state(state), stream, resume)
            after = [(o, st, win) for o, st, win, _ in original if o > at]
            assert [(o, st, win) for o, st, win, _ in replay if o > at] == after, (s, at)
            for (o, first, _, _), (_, again, _, _) in zip(original[resume:], replay, strict=False):
                if o <= at:
                    assert again == first or (first == "buffered" and again in ("late", "seen"))
