"""A late document read again after restarts under a changed window configuration: stored once.

* Stored late before a checkpoint, then the stream restored with a larger
  ``windows.allowed_lateness`` (or ``windows.size``): the restored run knew it was stored (the
  checkpoint's bound of closed event times), but its own checkpoint, taken before it had read
  the open windows again, took its bound from the new windows alone. Restored from that one, the
  document joined the window the new configuration keeps open, learnt and stored a second time.
* Waiting to be stored when the checkpoint was taken, then the stream restored into count
  windows: read again, it was taken for one a closed window had consumed because its id was
  remembered, and never stored at all.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import Document, EndOfStream
from sparsewatch.consumers.processor import Output
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import Config, load_config

# Event times in ms, offsets 0..3, 20 ms windows and no allowed lateness: "d1" (45 ms) closes
# window 0 and passes window 1 while it is empty, so "x" (30 ms, window 1) is late; "d1" and
# "d2" are buffered in window 2 at the stop (a restart re-reads from offset 1).
DOCS = [
    Document("d0", "storm warning issued for the coast", 0, "s"),
    Document("d1", "market rally lifts shares", 45, "s"),
    Document("x", "court rules on the appeal", 30, "s"),
    Document("d2", "election results announced tonight", 50, "s"),
]


def _config(size: str = "20ms", lateness: str = "0ms", count: int = 0) -> Config:
    return load_config(
        env={
            "SPARSEWATCH_WINDOWS_SIZE": size,
            "SPARSEWATCH_WINDOWS_COUNT": str(count),
            "SPARSEWATCH_WINDOWS_ALLOWED_LATENESS": lateness,
        }
    )


def _stored(outputs: list[Output]) -> list[tuple[str, bool]]:
    """The (id, late) of every document row written, in order."""
    return [
        (row["doc_id"], bool(row["late"]))
        for out in outputs
        for name, args in out.calls
        if name == "insert_documents"
        for row in args[0].rows()
    ]


def _checkpoint(state: DetectorStreamState) -> Checkpoint:
    """``state``'s checkpoint as the store gives it back."""
    arrays, meta = state.checkpoint()
    return Checkpoint("g", "s", npz_to_arrays(arrays_to_npz(arrays)), meta, datetime.now(UTC))


def _read(state: DetectorStreamState, start: int, stop: int, flush: bool = True) -> list[Output]:
    """``DOCS[start:stop]`` at their offsets, a batch each (late documents handed over unless
    ``flush`` is false: they wait for the next window to close)."""
    outputs: list[Output] = []
    for offset in range(start, stop):
        outputs += state.add(DOCS[offset], 0, offset, now=float(offset))
        if flush:
            outputs += state.close_idle(silent_until=float(offset), wall_ms=0.0)
    return outputs


def _end(state: DetectorStreamState) -> list[Output]:
    return state.add(EndOfStream("s"), 0, len(DOCS), now=100.0)


@pytest.mark.parametrize(
    "after",
    [_config(lateness="30ms"), _config(size="100ms")],
    ids=["allowed lateness 0 -> 30ms", "size 20ms -> 100ms"],
)
def test_a_late_document_stored_before_two_restarts_is_not_learnt_again(after: Config) -> None:
    first = DetectorStreamState("s", _config(), None)
    stored = _read(first, 0, len(DOCS))
    assert _stored(stored) == [("d0", False), ("x", True)]
    assert first.min_buffered_offset(0) == 1
    # restored under the new configuration, checkpointed after reading "d1" again only
    restored = DetectorStreamState("s", after, _checkpoint(first))
    stored += _read(restored, 1, 2)
    assert restored.min_buffered_offset(0) == 1
    second = DetectorStreamState("s", after, _checkpoint(restored))
    stored += _read(second, 1, len(DOCS)) + _end(second)
    assert sorted(_stored(stored)) == [("d0", False), ("d1", False), ("d2", False), ("x", True)]
    assert sum(out.late for out in stored) == 1


def test_a_late_document_waiting_at_the_checkpoint_is_stored_in_count_windows() -> None:
    """The late document "x" is waiting (no window has closed since) when the checkpoint is
    taken; the stream is restored into count windows, its id still remembered: it joins a count
    window."""
    first = DetectorStreamState("s", _config(), None)
    stored = _read(first, 0, 3, flush=False)
    assert _stored(stored) == [("d0", False)]
    assert first.min_buffered_offset(0) == 1  # "d1" buffered, "x" (offset 2) waiting
    restored = DetectorStreamState("s", _config(count=10), _checkpoint(first))
    stored += _read(restored, 1, len(DOCS)) + _end(restored)
    assert sorted(doc_id for doc_id, _ in _stored(stored)) == ["d0", "d1", "d2", "x"]
