"""Event-time tumbling windows for one stream, with a watermark, allowed lateness and idle closing.

Pure state machine, no Kafka: the worker feeds it documents with their source offsets and receives
closed windows. Two kinds of window:

* **duration** (``size_ms``): document at event time ``t`` belongs to window ``seq = t // size_ms``
  covering ``[seq * size_ms, (seq + 1) * size_ms)``. The watermark is the largest event time seen
  minus ``allowed_lateness_ms``; every open window whose end is at or before the watermark closes,
  oldest first. A document whose window has already closed is *late*: it is handed back to be scored
  against the current model and stored with a ``late`` flag, never buffered and never learned from.
  A window the watermark has passed is closed whether or not a document of it had arrived, so a
  document of an empty window between two others is late too, not a window of its own.
* **count** (``count``): consecutive documents of the stream in arrival order, ``count`` at a time.

When the stream has been idle for ``idle_timeout_s`` of wall-clock time, its windows close without
waiting for a later document, so a quiet stream still reports (Quix Streams' users' top complaint
is windows that never close on an idle stream). Idle means that no document joined an open window:
a duplicate (a re-send), a late document and a message a count window already consumed neither
join nor close a window, so they do not hold its windows open (a stream receiving only re-sends,
or a backfill of old, late documents, kept its open window open for as long as they came). What
closes then: with ``idle_close = "ended"`` (the default) the time windows whose end plus the
allowed lateness the wall clock has passed, the processing-time watermark of an idle source;
with ``"all"`` every open window, which reports a live stream's window sooner but turns the rest
of its documents late (not learnt from: a live stream with gaps longer than the timeout would
learn from the first documents after each gap only). A replayed past stream is closed whole
either way (its windows all ended long ago), and so is a count window (it has no end). An
end-of-stream marker closes every open window at once (:meth:`StreamWindower.close_all`), which,
unlike the wall clock, replays deterministically.

A document id is processed once per stream: a message whose id an open window holds, or one of the
stream's last ``dedup_documents`` documents of closed windows (late ones included) had, is a
*duplicate* (a producer's retry, a corpus replayed twice): neither scored nor learnt again. The
source offset of each remembered id tells a re-send (another offset) from the same message read
again after a restart (the same offset), which is not a duplicate. The verdict on a duplicate is
remembered by its offset until the worker's stored resume offset passes it
(:meth:`StreamWindower.forget_duplicates_before`): read again after a crash, it is a duplicate
again even when its first copy's id is forgotten by then (``dedup_documents = 0``, or pushed out
by later ids), instead of being learnt in the recomputed window.

The state that must survive a restart (:meth:`StreamWindower.get_state`) is small: the watermark,
where closed windows end, the count-window position, the remembered ids with their offsets, the
offsets of the duplicates since the resume offset and the largest offset read per partition. With
the last two, the event time before which every time window had closed tells the messages read
again after a restore that were processed (in a closed window, or late) when the windows are no
longer those of the checkpoint: restored into count windows (``windows.count`` set), a message of a
closed time window is ``"seen"``, not learnt a second time, whatever the remembered ids hold; with
another size or allowed lateness, it is late again. (With ``windows.size`` raised, the first new
window starts before the old windows' end: it takes the documents from that end on.)
Buffered documents are not checkpointed: the worker re-reads them from Kafka, starting at
:meth:`StreamWindower.min_buffered_offset`; their offsets are checkpointed instead
(``unprocessed``, as runs of consecutive offsets). Read again, such a message was never
processed, also when the windows it meets are no longer those of the checkpoint and it is late
now (a smaller allowed lateness or size, count windows turned into time windows):
:meth:`StreamWindower.processed_before` tells a message read again whose results were stored at
its first reading (in a closed window, or late), not to be stored again, from one of those, to
be processed now, late or not (it was neither stored nor dead-lettered when taken for the
former).

Example: one-minute windows with 10 s of allowed lateness (``now`` is the wall clock, seconds):

>>> w = StreamWindower("news", WindowSpec(size_ms=60_000, allowed_lateness_ms=10_000))
>>> def doc(i, t_ms):
...     return Buffered(Document(f"d{i}", "some text", t_ms), partition=0, offset=i)
>>> w.add(doc(0, 5_000), now=0.0)
([], 'buffered')
>>> w.add(doc(1, 65_000), now=1.0)  # window 1 opens; the watermark (55 s) has not passed 60 s
([], 'buffered')
>>> closed, status = w.add(doc(2, 71_000), now=2.0)  # watermark 61 s: window 0 closes
>>> [(c.seq, c.closed_by, [b.doc.id for b in c.items]) for c in closed], status
([(0, 'watermark', ['d0'])], 'buffered')
>>> w.add(doc(3, 30_000), now=3.0)  # its window has closed: scored, flagged late, not learnt
([], 'late')
>>> w.add(doc(0, 5_000), now=4.0)  # the same message read again (same offset): late as before
([], 'late')
>>> w.add(Buffered(Document("d0", "some text", 5_000), 0, offset=9), now=5.0)  # re-sent
([], 'duplicate')
>>> [(c.seq, c.closed_by, len(c.items)) for c in w.close_if_idle(now=65.0, wall_ms=130_000)]
[(1, 'idle', 2)]
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from sparsewatch.consumers.messages import Document

NO_TIME = np.iinfo(np.int64).min
_ANY_PARTITION = -2  # a checkpoint's count_partition when its offset holds for any partition
IDLE_CLOSE = ("ended", "all")  # what an idle stream closes (see the module docstring)


@dataclass(frozen=True)
class WindowSpec:
    """How a stream is cut into windows; exactly one of ``size_ms`` and ``count`` is set."""

    size_ms: int | None = 3_600_000
    count: int | None = None
    allowed_lateness_ms: int = 0
    idle_timeout_s: float = 30.0
    idle_close: str = "ended"
    dedup_documents: int = 20_000

    def __post_init__(self) -> None:
        if (self.size_ms is None) == (self.count is None):
            raise ValueError("a window has either a duration (size_ms) or a count, not both")
        if self.size_ms is not None and self.size_ms <= 0:
            raise ValueError("window size_ms must be positive")
        if self.count is not None and self.count <= 0:
            raise ValueError("window count must be positive")
        if self.allowed_lateness_ms < 0 or self.idle_timeout_s <= 0:
            raise ValueError("allowed lateness must be >= 0 and the idle timeout > 0")
        if self.dedup_documents < 0:
            raise ValueError("dedup_documents must be >= 0")
        if self.idle_close not in IDLE_CLOSE:
            raise ValueError(f"idle_close must be one of {IDLE_CLOSE}")


@dataclass(frozen=True)
class Buffered:
    """A document with the Kafka coordinates it came from."""

    doc: Document
    partition: int
    offset: int


@dataclass
class ClosedWindow:
    """A window ready for processing. ``closed_by`` is 'watermark', 'count', 'idle' or
    'end_of_stream'."""

    stream: str
    seq: int
    start_ms: int
    end_ms: int
    items: list[Buffered]
    closed_by: str


@dataclass
class StreamWindower:
    """Tumbling windows of one stream (see the module docstring)."""

    stream: str
    spec: WindowSpec
    watermark_ms: int = NO_TIME
    closed_until_ms: int = NO_TIME
    count_seq: int = 0
    count_next_offset: int = -1
    # the partition count_next_offset counts on (None: any, a checkpoint written without it)
    count_partition: int | None = -1
    last_activity: float = 0.0
    _open: dict[int, list[Buffered]] = field(default_factory=dict)
    # the open time windows' numbers as a heap (count windows: empty): a document closes only
    # the windows its watermark passed, the earliest first, without examining the others (1 s
    # windows with an hour of allowed lateness keep 3,601 open). Not checkpointed: open windows
    # start empty on a restore.
    _open_seqs: list[int] = field(default_factory=list)
    # per open window, the smallest offset it buffers per partition: the worker asks for the
    # smallest buffered offset of every stream at every commit, which must not read every
    # buffered document (a day's window of a busy stream, or thousands of quiet streams)
    _first: dict[int, dict[int, int]] = field(default_factory=dict)
    _ids: dict[str, Buffered] = field(default_factory=dict)  # the open windows' documents by id
    # the last ``spec.dedup_documents`` ids of closed windows and late documents, with where
    # they were read: id -> (partition, offset)
    _done: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)
    # the duplicates read since the resume offset: (partition, offset) -> where their first copy
    # was read (partition, offset) and whether an open window held it then
    _duplicates: dict[tuple[int, int], tuple[int, int, bool]] = field(default_factory=dict)
    # per partition, the largest offset added: below it, a message is read again after a restore
    _read_up_to: dict[int, int] = field(default_factory=dict)
    # As the restored checkpoint had them (carried on by count windows): the event time before
    # which every time window had closed, and per partition the largest offset read by then. A
    # message read again with both before them was processed, whatever the windows are now.
    closed_before_ms: int = NO_TIME
    _closed_read_up_to: dict[int, int] = field(default_factory=dict)
    # As the restored checkpoint had them: per partition, runs of offsets read but not processed
    # then (buffered in open windows, or waiting to be stored late), as arrays of each run's
    # first and last offset and the event time from which a message of the run counts (see
    # set_state; NO_TIME: all of them). Sorted, not overlapping.
    _unprocessed: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    # per partition, the largest offset added since the restore: the runs above it are still
    # to be read again, and a checkpoint carries them on
    _reread_up_to: dict[int, int] = field(default_factory=dict)

    # -- feeding ---------------------------------------------------------------------------------
    def add(self, item: Buffered, now: float) -> tuple[list[ClosedWindow], str]:
        """Buffer ``item``; return the windows that closed and what became of ``item``.

        The status is ``"buffered"``, ``"late"`` (its window already closed: score it, do not
        learn from it), ``"seen"`` (a count window already consumed it before a restart, also
        when the stream was restored into time windows; or a closed time window had, or it was
        late, when the stream was restored into count windows) or
        ``"duplicate"`` (a message sent twice: an open window holds a document with its id, or a
        remembered closed one had it at another offset, :meth:`first_copy`; it is neither scored
        nor learnt again; also a message judged a duplicate before and read again).
        """
        again = self.processed_before(item)
        self._read_up_to[item.partition] = max(
            item.offset, self._read_up_to.get(item.partition, -1)
        )
        self._reread_up_to[item.partition] = max(
            item.offset, self._reread_up_to.get(item.partition, -1)
        )
        if (item.partition, item.offset) in self._duplicates:
            return [], "duplicate"
        done_at = self._done.get(item.doc.id)
        # A remembered copy later on the same partition is a re-send of this message, which is
        # read again after a restore (it was processed before the re-send, and must be again).
        if done_at is not None and (done_at[0] != item.partition or done_at[1] < item.offset):
            return self._duplicate(item, (*done_at, False))
        if self.spec.count is not None:
            # A remembered id the checkpoint recorded as unprocessed was late and waiting to be
            # stored: never stored, it joins a count window (taken as "seen", it was lost).
            remembered = done_at is not None and not self._unprocessed_at(item)
            if remembered or self._counted_before(item) or self._closed_before(item):
                return [], "seen"
            if item.doc.id in self._ids:
                return self._duplicate(item, self._open_copy(item.doc.id))
            self._ids[item.doc.id] = item
            self.last_activity = now
            return self._add_count(item), "buffered"
        if item.doc.id in self._ids:
            return self._duplicate(item, self._open_copy(item.doc.id))
        if self._counted_before(item):  # restored from count windows into time windows
            return [], "seen"
        size = int(self.spec.size_ms or 0)
        seq = item.doc.timestamp_ms // size
        # Before where closed windows end, or in a window the watermark passed. (Not "its window
        # starts before": with ``windows.size`` raised before a restart, the first new window
        # starts before the old windows' end, and every document of it was late.)
        closed = item.doc.timestamp_ms < self.closed_until_ms or self._passed(seq)
        if closed or self._closed_before(item):
            if not again:  # processed before, it is in the restored memory as it was left then
                self._remember(item)
            return [], "late"
        self._ids[item.doc.id] = item
        self.last_activity = now
        self._buffer(seq, item)
        self.watermark_ms = max(self.watermark_ms, item.doc.timestamp_ms)
        return self._close_passed(), "buffered"

    def _counted_before(self, item: Buffered) -> bool:
        """Whether a closed count window consumed ``item`` (a message read again after a
        restore). Time windows ask too: a stream restored from count windows into time windows
        (``windows.count`` set to 0) learnt such a message again, as no closed time window made
        it late. Offsets of another partition say nothing (a stream moved: keys rehashed)."""
        same_partition = self.count_partition in (None, item.partition)
        return same_partition and item.offset < self.count_next_offset

    def _closed_before(self, item: Buffered) -> bool:
        """Whether the restored checkpoint had processed ``item`` in a closed time window or as
        late: read by then, with an event time before its first open time window. A stream
        restored into count windows learnt such a message again unless its id was remembered
        (``dedup_documents``), and one restored with a larger allowed lateness (or another size)
        the late documents of a window passed while empty. Not one the checkpoint recorded as
        read but unprocessed (:meth:`_unprocessed_at`): the checkpoint of a run restored under a
        smaller allowed lateness takes its bound from the new windows, though it had not yet
        read again the documents of the old open windows that are late in them."""
        read_up_to = self._closed_read_up_to.get(item.partition, -1)
        return (
            item.doc.timestamp_ms < self.closed_before_ms
            and item.offset <= read_up_to
            and not self._unprocessed_at(item)
        )

    def _first_open_ms(self) -> int:
        """Where the earliest time window not closed starts: every event time before it is in a
        closed window (the bound of :meth:`_closed_before` a checkpoint holds; count windows carry
        the restored one on)."""
        size = self.spec.size_ms
        if size is None:
            return self.closed_before_ms
        passed = (self.watermark_ms - self.spec.allowed_lateness_ms) // size  # see _passed
        return max(self.closed_until_ms, passed * size, NO_TIME)

    def read_before(self, partition: int, offset: int) -> bool:
        """Whether the message at ``partition``, ``offset`` was added before, in this run or
        before the checkpoint this state was restored from: it is being read again."""
        return offset <= self._read_up_to.get(partition, -1)

    def processed_before(self, item: Buffered) -> bool:
        """Whether ``item`` is read again (:meth:`read_before`) and its document was processed
        at its first reading: learnt in a closed window, or late (and stored then). Not a
        document buffered in an open window, or late and not yet stored, when the checkpoint
        this state was restored from was taken: its results were never stored, so it must be
        processed now, also when the configuration restored makes it late (a smaller
        ``windows.allowed_lateness`` or ``windows.size``, count windows turned into time
        windows): it was lost before, neither learnt, stored nor dead-lettered."""
        return self.read_before(item.partition, item.offset) and not self._unprocessed_at(item)

    def _unprocessed_at(self, item: Buffered) -> bool:
        """Whether the restored checkpoint recorded ``item`` as read but not processed."""
        runs = self._unprocessed.get(item.partition)
        if runs is None:
            return False
        firsts, lasts, from_ms = runs
        i = int(np.searchsorted(firsts, item.offset, side="right")) - 1
        return i >= 0 and item.offset <= lasts[i] and item.doc.timestamp_ms >= from_ms[i]

    def _add_count(self, item: Buffered) -> list[ClosedWindow]:
        if len(self._buffer(self.count_seq, item)) < int(self.spec.count or 0):
            return []
        return [self._pop_count_window("count")]

    def _buffer(self, seq: int, item: Buffered) -> list[Buffered]:
        """Add ``item`` to open window ``seq``; the window's items."""
        items = self._open.get(seq)
        if items is None:
            items = self._open[seq] = []
            if self.spec.size_ms is not None:
                heapq.heappush(self._open_seqs, seq)
        items.append(item)
        first = self._first.setdefault(seq, {})
        if item.offset < first.get(item.partition, item.offset + 1):
            first[item.partition] = item.offset
        return items

    def _open_copy(self, doc_id: str) -> tuple[int, int, bool]:
        first = self._ids[doc_id]
        return first.partition, first.offset, True

    def _duplicate(
        self, item: Buffered, first: tuple[int, int, bool]
    ) -> tuple[list[ClosedWindow], str]:
        self._duplicates[(item.partition, item.offset)] = first
        return [], "duplicate"

    def first_copy(self, partition: int, offset: int) -> tuple[int, int, bool]:
        """Where the first copy of the ``"duplicate"`` read at ``partition``, ``offset`` was read:
        its source partition and offset, and whether an open window held it when the duplicate
        came. KeyError for a message not judged a duplicate (or forgotten)."""
        return self._duplicates[(partition, offset)]

    def forget_duplicates_before(self, partition: int, offset: int) -> None:
        """The worker's stored resume offset of ``partition`` passed ``offset``: the duplicates
        before it are never read again, so their verdicts can go (and the restored runs of
        unprocessed offsets once all of them are before it)."""
        gone = [key for key in self._duplicates if key[0] == partition and key[1] < offset]
        for key in gone:
            del self._duplicates[key]
        runs = self._unprocessed.get(partition)
        if runs is not None and (not len(runs[1]) or runs[1][-1] < offset):
            del self._unprocessed[partition]

    def _remember(self, item: Buffered) -> None:
        """Remember a processed document's id, forgetting the oldest beyond the bound."""
        limit = self.spec.dedup_documents
        if limit == 0 or item.doc.id in self._done:
            return
        self._done[item.doc.id] = (item.partition, item.offset)
        if len(self._done) > limit:
            self._done.popitem(last=False)

    def _pop(self, seq: int) -> list[Buffered]:
        items = self._open.pop(seq)
        del self._first[seq]
        for b in items:
            del self._ids[b.doc.id]
            self._remember(b)
        return items

    def _pop_count_window(self, closed_by: str) -> ClosedWindow:
        items = self._pop(self.count_seq)
        times = [b.doc.timestamp_ms for b in items]
        window = ClosedWindow(
            self.stream, self.count_seq, min(times), max(times) + 1, items, closed_by
        )
        self.count_seq += 1
        self.count_next_offset = max(b.offset for b in items) + 1
        self.count_partition = items[-1].partition
        return window

    def _passed(self, seq: int) -> bool:
        """Whether the watermark has passed the end of time window ``seq`` (it is closed then,
        even if no document of it had arrived: a gap between the windows seen)."""
        return self._end_ms(seq) <= self.watermark_ms

    def closed_early(self, timestamp_ms: int) -> bool:
        """Whether the (late) document at ``timestamp_ms`` is late because its window was closed
        before the watermark passed its end: by the idle timeout or an end-of-stream marker."""
        size = int(self.spec.size_ms or 0)
        return size > 0 and not self._passed(timestamp_ms // size)

    def _close_passed(self) -> list[ClosedWindow]:
        return self._close_ended(self.watermark_ms, "watermark")

    def _close_ended(self, until_ms: float, closed_by: str) -> list[ClosedWindow]:
        """Close the open time windows whose end plus the allowed lateness is at or before
        ``until_ms``, oldest first: the earliest of the heap, as that end grows with the window
        number (each window closed costs O(log w) for w open windows, the others nothing)."""
        closed = []
        while self._open_seqs and self._end_ms(self._open_seqs[0]) <= until_ms:
            closed.append(self._pop_time_window(heapq.heappop(self._open_seqs), closed_by))
        return closed

    def _pop_time_window(self, seq: int, closed_by: str) -> ClosedWindow:
        size = int(self.spec.size_ms or 0)
        items = self._pop(seq)
        self.closed_until_ms = max(self.closed_until_ms, (seq + 1) * size)
        return ClosedWindow(self.stream, seq, seq * size, (seq + 1) * size, items, closed_by)

    def close_if_idle(self, now: float, wall_ms: float) -> list[ClosedWindow]:
        """The windows an idle stream closes: none until it has been idle for ``idle_timeout_s``
        at ``now`` (the clock of :meth:`add`); then every open window with ``idle_close = "all"``
        or a count window, and otherwise the time windows whose end plus the allowed lateness is
        at or before ``wall_ms``, the wall-clock time (epoch ms) of ``now``."""
        if not self.is_idle(now):
            return []
        if self.spec.count is not None or self.spec.idle_close == "all":
            return self.close_all("idle")
        return self._close_ended(wall_ms, "idle")

    def is_idle(self, now: float) -> bool:
        """Whether no document has joined an open window for ``idle_timeout_s`` at ``now`` (the
        clock of :meth:`add`; see the module docstring)."""
        return now - self.last_activity >= self.spec.idle_timeout_s

    def _end_ms(self, seq: int) -> int:
        """When the wall clock has passed time window ``seq`` and its allowed lateness."""
        return (seq + 1) * int(self.spec.size_ms or 0) + self.spec.allowed_lateness_ms

    def open_ahead_ms(self, wall_ms: float) -> float:
        """How far after ``wall_ms`` the earliest open time window's end (plus the allowed
        lateness) lies; 0 when it has passed or no time window is open. An idle stream's window
        waits for the wall clock that long (``idle_close = "ended"``)."""
        if self.spec.count is not None or not self._open:
            return 0.0
        return max(self._end_ms(self._open_seqs[0]) - wall_ms, 0.0)

    def close_all(self, closed_by: str) -> list[ClosedWindow]:
        """Close every open window now, oldest first (idle timeout, end-of-stream marker); a
        later document of a closed time window is late."""
        if not self._open:
            return []
        if self.spec.count is not None:
            return [self._pop_count_window(closed_by)]
        return self._close_ended(math.inf, closed_by)

    # -- bookkeeping -----------------------------------------------------------------------------
    def min_buffered_offset(self, partition: int) -> int | None:
        """The smallest source offset on ``partition`` still buffered in an open window (in
        time proportional to the open windows, not to the documents they buffer)."""
        offsets = [first[partition] for first in self._first.values() if partition in first]
        return min(offsets) if offsets else None

    @property
    def n_buffered(self) -> int:
        """Documents waiting in open windows."""
        return sum(len(items) for items in self._open.values())

    def get_state(self, unprocessed: Iterable[tuple[int, int]] = ()) -> dict[str, np.ndarray]:
        """What a checkpoint must hold to continue exactly (buffers are re-read from Kafka). The
        remembered ids are one UTF-8 byte string with each id's length (no object arrays: a
        checkpoint is loaded with ``allow_pickle=False``), oldest first. ``unprocessed``: the
        (partition, offset) of other messages read but not processed yet (the caller's late
        documents not yet stored), recorded with the open windows' offsets."""
        encoded = [doc_id.encode() for doc_id in self._done]
        return {
            "watermark_ms": np.asarray(self.watermark_ms, np.int64),
            "closed_until_ms": np.asarray(self.closed_until_ms, np.int64),
            "count_seq": np.asarray(self.count_seq, np.int64),
            "count_next_offset": np.asarray(self.count_next_offset, np.int64),
            "count_partition": np.asarray(
                _ANY_PARTITION if self.count_partition is None else self.count_partition, np.int64
            ),
            "done_ids_utf8": np.frombuffer(b"".join(encoded), dtype=np.uint8),
            "done_id_bytes": np.fromiter(map(len, encoded), np.int64, len(encoded)),
            "done_partitions": np.fromiter(
                (p for p, _ in self._done.values()), np.int64, len(encoded)
            ),
            "done_offsets": np.fromiter(
                (o for _, o in self._done.values()), np.int64, len(encoded)
            ),
            "read_up_to": _offsets_array(self._read_up_to),
            # Not below the restored bound: the messages read by then before it were processed
            # (those read since are in closed windows, late, or recorded unprocessed). From the
            # new windows alone, a run restored with a larger allowed lateness or size lowered it,
            # and the next restore learnt the messages late before the first one in a window.
            "closed_before_ms": np.asarray(
                max(self._first_open_ms(), self.closed_before_ms), np.int64
            ),
            "closed_read_up_to": _offsets_array(
                self._closed_read_up_to if self.spec.size_ms is None else self._read_up_to
            ),
            # one row per duplicate: partition, offset, first copy's partition and offset, open
            "duplicates": np.array(
                [
                    (*key, p, o, int(still_open))
                    for key, (p, o, still_open) in self._duplicates.items()
                ],
                dtype=np.int64,
            ).reshape(-1, 5),
            "unprocessed": self._unprocessed_runs(unprocessed),
        }

    def _unprocessed_runs(self, extra: Iterable[tuple[int, int]]) -> np.ndarray:
        """The checkpoint's rows of partition, first offset, last offset and event time from
        which a message counts (see :meth:`set_state`): the open windows' offsets and ``extra``
        (NO_TIME: every message of the run), then the restored runs this run has not read
        again yet (read again, a message of them is buffered, or late and stored, now). As runs
        of consecutive offsets: a stream alone on its partition records one per open window,
        whatever it buffers."""
        read = np.array(
            [(b.partition, b.offset) for b in self._ids.values()] + list(extra), dtype=np.int64
        ).reshape(-1, 2)
        rows = []
        for p in sorted(set(read[:, 0].tolist()) | set(self._unprocessed)):
            offsets = np.unique(read[read[:, 0] == p, 1])
            if len(offsets):
                breaks = np.flatnonzero(np.diff(offsets) != 1)
                firsts = offsets[np.concatenate(([0], breaks + 1))]
                lasts = offsets[np.concatenate((breaks, [len(offsets) - 1]))]
                rows.append(
                    np.column_stack(
                        (np.full_like(firsts, p), firsts, lasts, np.full_like(firsts, NO_TIME))
                    )
                )
            if p in self._unprocessed:
                firsts, lasts, from_ms = self._unprocessed[p]
                first = self._reread_up_to.get(p, -1) + 1  # the buffered offsets are all below
                keep = lasts >= first
                firsts = np.maximum(firsts[keep], first)
                rows.append(
                    np.column_stack((np.full_like(firsts, p), firsts, lasts[keep], from_ms[keep]))
                )
        return np.concatenate(rows).astype(np.int64) if rows else np.zeros((0, 4), np.int64)

    def set_state(self, state: dict[str, np.ndarray]) -> StreamWindower:
        """Restore :meth:`get_state`'s values; open windows start empty. A checkpoint written
        before ids were remembered restores none, and its count-window offset holds for any
        partition (as it did).

        A checkpoint written before the unprocessed offsets were recorded (``unprocessed``,
        2026-12) has them derived from its bounds, which is exact for a checkpoint of time
        windows: a document read by then with an event time from ``closed_before_ms`` on (the
        first open window's start) was buffered in an open window, one before it was in a
        closed window or late; past ``closed_read_up_to`` (count windows carry that on from an
        earlier restore), every message read was unprocessed, except those a closed count
        window consumed (``"seen"`` before this counts). Without ``closed_before_ms`` either,
        every message read again is unprocessed: a late one is stored again (the store keeps the
        first row) rather than possibly lost."""
        self.watermark_ms = int(state["watermark_ms"])
        self.closed_until_ms = int(state["closed_until_ms"])
        self.count_seq = int(state["count_seq"])
        self.count_next_offset = int(state["count_next_offset"])
        partition = int(state.get("count_partition", _ANY_PARTITION))
        self.count_partition = None if partition == _ANY_PARTITION else partition
        self._open.clear()
        self._open_seqs.clear()
        self._first.clear()
        self._ids.clear()
        self._done.clear()
        self._read_up_to = _offsets_dict(state.get("read_up_to"))
        self.closed_before_ms = int(state.get("closed_before_ms", NO_TIME))
        self._closed_read_up_to = _offsets_dict(state.get("closed_read_up_to"))
        self._reread_up_to = {}
        runs = state.get("unprocessed")
        if runs is None:
            runs = self._derived_unprocessed()
        runs = np.asarray(runs, np.int64).reshape(-1, 4)
        self._unprocessed = {}
        for p in np.unique(runs[:, 0]).tolist():
            mine = runs[runs[:, 0] == p]
            mine = mine[np.argsort(mine[:, 1], kind="stable")]
            self._unprocessed[p] = (mine[:, 1], mine[:, 2], mine[:, 3])
        if "closed_before_ms" in state and self._first_open_ms() > self.closed_before_ms:
            # A shorter windows.size or allowed lateness: the restored watermark has passed
            # windows of the open windows' documents, which, read again, were all late (never
            # learnt). From the first open window on, they take the watermark back up as they
            # are read again, and close the windows they pass as a run so configured would have.
            self.watermark_ms = self.closed_before_ms
        self._duplicates = {
            (p, o): (fp, fo, bool(still_open))
            for p, o, fp, fo, still_open in np.asarray(
                state.get("duplicates", np.zeros((0, 5), np.int64))
            ).tolist()
        }
        if "done_ids_utf8" in state:
            raw = np.asarray(state["done_ids_utf8"], dtype=np.uint8).tobytes()
            lengths = np.asarray(state["done_id_bytes"], dtype=np.int64)
            ends = np.cumsum(lengths)
            starts = (ends - lengths).tolist()
            ends = ends.tolist()
            partitions = np.asarray(state["done_partitions"]).tolist()
            offsets = np.asarray(state["done_offsets"]).tolist()
            for start, end, p, offset in zip(starts, ends, partitions, offsets, strict=True):
                self._done[raw[start:end].decode()] = (p, offset)
            while len(self._done) > self.spec.dedup_documents:  # a smaller bound configured
                self._done.popitem(last=False)
        return self

    def _derived_unprocessed(self) -> np.ndarray:
        """The unprocessed runs of a checkpoint that did not record them (see
        :meth:`set_state`), from the restored bounds."""
        rows = []
        for p, read in self._read_up_to.items():
            closed = min(self._closed_read_up_to.get(p, -1), read)
            if closed >= 0:
                rows.append((p, 0, closed, self.closed_before_ms))
            if read > closed:
                rows.append((p, closed + 1, read, NO_TIME))
        return np.array(rows, dtype=np.int64).reshape(-1, 4)


def _offsets_array(offsets: dict[int, int]) -> np.ndarray:
    """A per-partition offset dictionary as a checkpoint holds it: rows of partition, offset."""
    return np.array(sorted(offsets.items()), dtype=np.int64).reshape(-1, 2)


def _offsets_dict(rows: np.ndarray | None) -> dict[int, int]:
    """:func:`_offsets_array`'s rows as a dictionary (none when the checkpoint lacks them)."""
    return {p: o for p, o in np.asarray(rows if rows is not None else _offsets_array({})).tolist()}
