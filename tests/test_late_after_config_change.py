"""A document buffered in an open window when its stream was checkpointed, read again after a
restart whose configuration makes it late: a smaller ``windows.allowed_lateness`` (or
``windows.size``), or count windows turned into time windows.

Its offset was at or below the checkpoint's read position and it was not waiting as a late
document, so the restored stream took it for one stored at its first reading: it was never
scored, stored, learnt from or dead-lettered. The checkpoint now records the offsets read but
not processed (its open windows', and its late documents' not yet stored): such a document is
stored late (scored against the current model, not learnt from), exactly once, also when the
restored run is itself checkpointed before it has read it again. A late document stored before
the checkpoint is still never stored again, and a checkpoint written before the offsets were
recorded has them derived from its bounds.
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

# Event times in ms; 20 ms windows. With 10 ms of allowed lateness, "d4" (37 ms, window 1) joins
# its window, still open at the checkpoint; with none, "d3" (42 ms) has closed window 1 first.
DOCS = [
    Document("d0", "storm warning issued for the coast", 0, "s"),
    Document("d1", "market rally lifts shares", 25, "s"),
    Document("d2", "court rules on the appeal", 35, "s"),
    Document("d3", "election results announced tonight", 42, "s"),
    Document("d4", "river floods the valley towns", 37, "s"),
]
# what the stream stores across the restart: "d4" late (not learnt), the others in windows
EVERY_DOCUMENT_ONCE = [("d0", False), ("d1", False), ("d2", False), ("d3", False), ("d4", True)]


def _config(lateness: str, count: int = 0) -> Config:
    return load_config(
        env={
            "SPARSEWATCH_WINDOWS_SIZE": "20ms",
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


def _checkpoint(state: DetectorStreamState, drop: str | None = None) -> Checkpoint:
    """``state``'s checkpoint as the store gives it back (without the entry ``drop``)."""
    arrays, meta = state.checkpoint()
    stored = npz_to_arrays(arrays_to_npz(arrays))
    return Checkpoint(
        "g", "s", {k: v for k, v in stored.items() if k != drop}, meta, datetime.now(UTC)
    )


def _read(
    state: DetectorStreamState, docs: list[Document], start: int, stop: int | None = None
) -> list[Output]:
    """``docs[start:stop]`` at their offsets (a batch each, late documents handed over)."""
    outputs: list[Output] = []
    for offset in range(start, len(docs) if stop is None else stop):
        outputs += state.add(docs[offset], 0, offset, now=float(offset))
        outputs += state.close_idle(silent_until=float(offset), wall_ms=0.0)
    return outputs


def _end(state: DetectorStreamState) -> list[Output]:
    return state.add(EndOfStream("s"), 0, len(DOCS), now=100.0)


def _before_the_stop(config: Config) -> tuple[DetectorStreamState, list[Output], int]:
    """The stream read up to the end under ``config``: its state, what it stored, and where a
    restart re-reads from."""
    state = DetectorStreamState("s", config, None)
    first = _read(state, DOCS, 0)
    resume = state.min_buffered_offset(0)
    assert resume is not None
    return state, first, resume


@pytest.mark.parametrize(
    ("before", "after"),
    [(_config("10ms"), _config("0ms")), (_config("0ms", count=10), _config("0ms"))],
    ids=["allowed lateness 10ms -> 0ms", "count 10 -> 20ms windows"],
)
def test_a_document_of_an_open_window_late_after_the_restart_is_stored_late_once(
    before: Config, after: Config
) -> None:
    state, first, resume = _before_the_stop(before)
    assert ("d4", False) not in _stored(first)  # buffered in an open window at the stop
    restored = DetectorStreamState("s", after, _checkpoint(state))
    again = _read(restored, DOCS, resume)
    stored = _stored(first) + _stored(again + _end(restored))
    assert sorted(stored) == EVERY_DOCUMENT_ONCE
    assert sum(out.late for out in again) == 1  # counted once (sparsewatch_late_documents)


def test_a_restored_run_checkpointed_before_reading_it_again_still_stores_it() -> None:
    """The restored run is checkpointed (its window 1 closed) before it reads "d4" again, then
    crashes: its checkpoint carries on the offsets its own restore had not read again yet."""
    state, first, resume = _before_the_stop(_config("10ms"))
    restored = DetectorStreamState("s", _config("0ms"), _checkpoint(state))
    partly = _read(restored, DOCS, resume, stop=4)  # up to "d3", which closes window 1
    assert [out.window for out in partly if out.is_window] == [("s", 1)]
    checkpoint, resume_again = _checkpoint(restored), restored.min_buffered_offset(0)
    assert resume_again == 3
    second = DetectorStreamState("s", _config("0ms"), checkpoint)
    again = _read(second, DOCS, resume_again)
    assert _stored(again) == [("d4", True)]
    assert sorted(_stored(first + partly + again + _end(second))) == EVERY_DOCUMENT_ONCE


def _with_a_stored_late_document() -> tuple[list[Document], DetectorStreamState, list[Output]]:
    """10 ms of allowed lateness: window 0 closes at "d2"; "late" (window 0, offset 3) is stored
    late; "d3" and "d4" join the open windows around it (offsets 1, 2, 4 and 5)."""
    docs = [*DOCS[:3], Document("late", "bridge closed for repairs", 5, "s"), *DOCS[3:]]
    state = DetectorStreamState("s", _config("10ms"), None)
    first = _read(state, docs, 0)
    assert ("late", True) in _stored(first)
    assert state.min_buffered_offset(0) == 1
    return docs, state, first


@pytest.mark.parametrize("drop", [None, "windows.unprocessed"])
def test_a_late_document_stored_before_the_checkpoint_is_not_stored_again(
    drop: str | None,
) -> None:
    """Unchanged configuration: the late document between the open windows' offsets, read
    again, was stored at its first reading; the open windows' documents are buffered again.
    The same from a checkpoint that did not record the unprocessed offsets (derived from its
    bounds)."""
    docs, state, first = _with_a_stored_late_document()
    restored = DetectorStreamState("s", _config("10ms"), _checkpoint(state, drop=drop))
    again = _read(restored, docs, 1)
    assert _stored(again) == []
    assert sum(out.late for out in again) == 0
    assert sorted(_stored(first + again + _end(restored))) == [
        ("d0", False),
        ("d1", False),
        ("d2", False),
        ("d3", False),
        ("d4", False),
        ("late", True),
    ]


def test_a_checkpoint_without_the_unprocessed_offsets_derives_them_from_its_bounds() -> None:
    """A checkpoint written before the unprocessed offsets were recorded, restored with a
    smaller allowed lateness: a document read by then at or after the first open window's
    start was buffered, so "d4" is stored late; "late", before it, was stored and is not."""
    docs, state, _ = _with_a_stored_late_document()
    legacy = _checkpoint(state, drop="windows.unprocessed")
    restored = DetectorStreamState("s", _config("0ms"), legacy)
    again = _read(restored, docs, 1)
    assert sorted(_stored(again + _end(restored))) == [
        ("d1", False),
        ("d2", False),
        ("d3", False),
        ("d4", True),
    ]
