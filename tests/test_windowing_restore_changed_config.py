"""Windower state restored under another window configuration: a stream
checkpointed in time windows and restored into count windows (``windows.count`` set before a
restart), or with a larger allowed lateness, must learn no message a closed time window had
already learnt, or that had been late, whatever ``windows.dedup_documents`` remembers."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.timestamps import parse_timestamp_ms
from sparsewatch.consumers.windowing import Buffered, ClosedWindow, StreamWindower, WindowSpec
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import Config

HOUR = 3_600_000


def _items(n: int) -> list[Buffered]:
    """``n`` documents of one stream on partition 0, a minute apart, offsets 0..n-1."""
    return [Buffered(Document(f"d{i}", f"story {i}", 60_000 * i), 0, i) for i in range(n)]


def _stored(w: StreamWindower) -> dict:
    """``w``'s state as a stored checkpoint reads back."""
    return npz_to_arrays(arrays_to_npz(w.get_state()))


def _feed(w: StreamWindower, items: list[Buffered]) -> tuple[list[str], list[ClosedWindow]]:
    added = [w.add(b, now=1.0) for b in items]
    return [status for _, status in added], [c for closed, _ in added for c in closed]


@pytest.mark.parametrize("dedup", [0, 10, 20_000])
def test_time_windows_restored_into_count_windows_learn_no_message_twice(dedup: int) -> None:
    """``windows.count`` set before a restart: the messages of closed time windows, read again
    (another stream of the partition held its resume offset back), were recognised only by the
    remembered ids: with ``dedup_documents = 0``, or beyond its bound, they were buffered into
    the new count windows and learnt a second time. Those of the open time window, never
    learnt, must be."""
    items = _items(300)
    timed = StreamWindower("s", WindowSpec(size_ms=HOUR, dedup_documents=dedup))
    statuses, closed = _feed(timed, items[:250])
    assert set(statuses) == {"buffered"}
    assert [len(c.items) for c in closed] == [60, 60, 60, 60]  # 240..249 are open
    spec = WindowSpec(size_ms=None, count=100, dedup_documents=dedup)
    counted = StreamWindower("s", spec).set_state(_stored(timed))
    statuses, windows = _feed(counted, items[150:])
    assert statuses[:90] == ["seen"] * 90  # 150..239: closed time windows
    assert set(statuses[90:]) == {"buffered"}
    windows += counted.close_all("end_of_stream")
    assert [b.offset for w in windows for b in w.items] == list(range(240, 300))


def test_a_second_restore_in_count_windows_still_knows_the_time_windows() -> None:
    """Restored into count windows and checkpointed before a count window closed, then restored
    again: the closed time windows' messages are still not learnt again; a message read for the
    first time after the first restore (an old event time, buffered by the count window) is."""
    items = _items(300)
    timed = StreamWindower("s", WindowSpec(size_ms=HOUR, dedup_documents=0))
    _feed(timed, items[:200])  # windows 0..2 closed (0..179), 180..199 open
    spec = WindowSpec(size_ms=None, count=100, dedup_documents=0)
    counted = StreamWindower("s", spec).set_state(_stored(timed))
    old = Buffered(Document("old", "story", 60_000 * 5), 0, 200)  # event time in window 0
    statuses, windows = _feed(counted, [*items[100:200], old])
    assert statuses == ["seen"] * 80 + ["buffered"] * 21 and windows == []
    again = StreamWindower("s", spec).set_state(_stored(counted))
    statuses, windows = _feed(again, [*items[100:200], old, *items[201:300]])
    assert statuses == ["seen"] * 80 + ["buffered"] * 120
    assert [b.doc.id for b in windows[0].items] == [
        *(f"d{i}" for i in range(180, 200)),
        "old",
        *(f"d{i}" for i in range(201, 280)),
    ]


def test_a_larger_allowed_lateness_learns_no_late_message_again() -> None:
    """``windows.allowed_lateness`` raised before a restart: a message that had been late (its
    window, empty, passed by the watermark) was read again into a window the new lateness keeps
    open, and learnt, though it had been scored and stored late."""
    minute = 60_000
    docs = [("a", 0), ("b", 30 * minute), ("late", 15 * minute), ("c", 30 * minute + 500)]
    items = [Buffered(Document(i, "t", t), 0, o) for o, (i, t) in enumerate(docs)]
    w = StreamWindower("s", WindowSpec(size_ms=minute, dedup_documents=0))
    statuses, closed = _feed(w, items)
    assert statuses == ["buffered", "buffered", "late", "buffered"]
    assert [[b.doc.id for b in c.items] for c in closed] == [["a"]]  # b's window is open
    spec = WindowSpec(size_ms=minute, allowed_lateness_ms=20 * minute, dedup_documents=0)
    restored = StreamWindower("s", spec).set_state(_stored(w))
    statuses, closed = _feed(restored, items[1:])  # b's window is re-read from offset 1
    assert statuses == ["buffered", "late", "buffered"]
    closed += restored.close_all("end_of_stream")
    assert sorted(b.doc.id for c in closed for b in c.items) == ["b", "c"]


def test_a_state_without_time_windows_restores_as_before() -> None:
    """A checkpoint written before the closed time windows' bound was kept, or one of count
    windows only: nothing read again is taken for closed by event time."""
    items = _items(150)
    timed = StreamWindower("s", WindowSpec(size_ms=HOUR, dedup_documents=0))
    _feed(timed, items[:130])
    legacy = {
        k: v
        for k, v in _stored(timed).items()
        if k not in ("closed_before_ms", "closed_read_up_to")
    }
    spec = WindowSpec(size_ms=None, count=100, dedup_documents=0)
    statuses, _ = _feed(StreamWindower("s", spec).set_state(legacy), items[100:])
    assert set(statuses) == {"buffered"}  # as before: nothing tells the closed ones
    counted = StreamWindower("s", spec)
    _feed(counted, items[:130])  # 0..99 closed, 100..129 open
    statuses, _ = _feed(StreamWindower("s", spec).set_state(_stored(counted)), items[50:])
    assert statuses == ["seen"] * 50 + ["buffered"] * 50


def test_the_detector_stream_restored_into_count_windows_learns_each_document_once() -> None:
    """The same through the detector's stream state and its checkpoint, with
    ``dedup_documents = 0``: the windows after the restore hold only the documents no window
    had learnt."""
    docs = generate_stream(n_docs=700, seed=0)  # 30 s apart
    config = Config()
    config.windows.size = "1h"
    config.windows.dedup_documents = 0
    config.detector.warmup_documents = 50
    state = DetectorStreamState("default", config, None)
    items = [
        Buffered(Document(d["id"], d["text"], parse_timestamp_ms(d["timestamp"])), 0, i)
        for i, d in enumerate(docs)
    ]
    learnt = [o.n_documents for b in items[:450] for o in state.add(b.doc, 0, b.offset, 0.0)]
    open_from = state.min_buffered_offset(0)
    assert open_from is not None and sum(learnt) == open_from  # the days before are closed
    saved, meta = state.checkpoint()
    checkpoint = Checkpoint(
        "g", "default", npz_to_arrays(arrays_to_npz(saved)), meta, datetime.now(UTC)
    )
    config.windows.count = 100
    restored = DetectorStreamState("default", config, checkpoint)
    outputs = [o for b in items[100:] for o in restored.add(b.doc, 0, b.offset, 1.0)]
    outputs += restored.close_idle(silent_until=1e9, wall_ms=1e15)
    assert sum(o.n_documents for o in outputs if o.is_window) == 700 - open_from


def test_a_longer_window_size_learns_the_rest_of_its_first_window() -> None:
    """``windows.size`` raised (1h -> 1d) before a restart at 14:30: the day's window started
    before the hourly windows closed so far ended (14:00), and the whole window was taken for
    closed: the open hour's documents read again and every document until midnight were late,
    scored but never learnt. Only event times before 14:00 are."""
    items = [Buffered(Document(f"d{i}", "t", 600_000 * i), 0, i) for i in range(144)]  # 10 min
    hourly = StreamWindower("s", WindowSpec(size_ms=HOUR, dedup_documents=0))
    statuses, closed = _feed(hourly, items[:88])  # up to 14:30
    assert set(statuses) == {"buffered"} and len(closed) == 14
    resume = hourly.min_buffered_offset(0)
    assert resume == 84  # 14:00
    daily = StreamWindower("s", WindowSpec(size_ms=24 * HOUR)).set_state(_stored(hourly))
    statuses, closed = _feed(daily, items[resume:])
    assert set(statuses) == {"buffered"} and closed == []
    assert daily.add(Buffered(Document("x", "t", 13 * HOUR), 0, 144), now=1.0)[1] == "late"
    (day,) = daily.close_all("end_of_stream")
    assert (day.seq, day.start_ms, day.end_ms) == (0, 0, 24 * HOUR)
    assert [b.offset for b in day.items] == list(range(84, 144))


@pytest.mark.parametrize(
    "spec", [WindowSpec(size_ms=HOUR, dedup_documents=0), WindowSpec(size_ms=15 * 60_000)]
)
def test_a_shorter_window_size_learns_the_open_window_it_read_again(spec: WindowSpec) -> None:
    """``windows.size`` lowered (1d -> 1h or 15m) before a restart at 14:30: the open day's
    documents, read again, fell in windows the restored watermark (14:30) had passed, and were
    all late: a day scored but never learnt. They make the short windows the watermark passes
    as they are read again, as a run with the new size would have."""
    items = [Buffered(Document(f"d{i}", "t", 600_000 * i), 0, i) for i in range(100)]  # 10 min
    daily = StreamWindower("s", WindowSpec(size_ms=24 * HOUR, dedup_documents=0))
    assert _feed(daily, items[:88]) == (["buffered"] * 88, [])  # 00:00..14:30, open
    restored = StreamWindower("s", spec).set_state(_stored(daily))
    statuses, closed = _feed(restored, items)
    assert set(statuses) == {"buffered"}
    closed += restored.close_all("end_of_stream")
    expected = StreamWindower("s", spec)
    expected_closed = _feed(expected, items)[1] + expected.close_all("end_of_stream")
    assert [(c.seq, [b.offset for b in c.items]) for c in closed] == [
        (c.seq, [b.offset for b in c.items]) for c in expected_closed
    ]


def _jittered(rng: random.Random) -> list[Document]:
    """Documents with jittered event times and re-sends of earlier ids, as one partition has
    them."""
    docs: list[Document] = []
    t = 0
    for offset in range(rng.randint(5, 40)):
        doc_id = rng.choice(docs).id if docs and rng.random() < 0.2 else f"d{offset}"
        t = max(0, t + rng.randint(-300, 400))
        docs.append(Document(doc_id, "t", t))
    return docs


@pytest.mark.parametrize("seed", range(0, 3000, 500))
def test_restored_from_time_into_count_windows_each_document_is_learnt_once(seed: int) -> None:
    """Crash/restore fuzz across the change: time windows checkpointed anywhere, restored into
    count windows and read again from any offset up to the first one buffered (other streams
    hold the partition's resume offset back): no document is learnt twice and every one the
    time windows held open is learnt. Before, 40% of such streams learnt one twice."""
    for s in range(seed, seed + 500):
        rng = random.Random(s)
        docs = _jittered(rng)
        timed = StreamWindower(
            "s",
            WindowSpec(
                size_ms=rng.choice([100, 250, 500]),
                allowed_lateness_ms=rng.choice([0, 100, 400]),
                dedup_documents=rng.choice([0, 1, 3, 100]),
            ),
        )
        items = [Buffered(doc, 0, offset) for offset, doc in enumerate(docs)]
        cut = rng.randint(0, len(items))
        statuses, closed = _feed(timed, items[:cut])
        learnt = [b.offset for c in closed for b in c.items]
        buffered = {o for o, status in enumerate(statuses) if status == "buffered"}
        first = timed.min_buffered_offset(0)
        resume = rng.randint(0, cut if first is None else first)
        spec = WindowSpec(
            size_ms=None, count=rng.randint(1, 4), dedup_documents=rng.choice([0, 1, 3, 100])
        )
        counted = StreamWindower("s", spec).set_state(_stored(timed))
        closed = _feed(counted, items[resume:])[1] + counted.close_all("end_of_stream")
        learnt += [b.offset for c in closed for b in c.items]
        assert len(learnt) == len(set(learnt)), s
        assert buffered <= set(learnt), s  # those still open at the checkpoint too
