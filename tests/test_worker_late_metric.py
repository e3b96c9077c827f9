"""``sparsewatch_late_documents_total`` counts a late document once across restarts.

A restart (a clean one, a rebalance, a crash) re-reads a partition from its stored resume offset:
the documents of windows closed before the stream's checkpoint come again and are late again. They
were scored and stored again (the store kept the first row) and counted again by the metric
(``Output.late``), so every restart over-counted. Now a document read again is neither counted nor
scored, unless it was still waiting to be stored when the checkpoint was taken; after a crash, one
stored since the stream's last checkpoint is counted again, like the windows a crash recomputes.
(tests/test_detector_late_reread.py: the alerts the re-scoring raised.)
"""

from __future__ import annotations

from datetime import UTC, datetime

from sparsewatch.consumers.detector_worker import DetectorStreamState
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.processor import Output
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import load_config

CONFIG = load_config(env={"SPARSEWATCH_WINDOWS_SIZE": "1s"})
WORDS = ["storm", "market", "election", "football", "vaccine", "bridge", "festival", "court"]


def _doc(i: int, ts: int) -> Document:
    return Document(f"d{i}", f"{WORDS[i % 8]} {WORDS[(i * 3 + 1) % 8]} report number {i}", ts)


# offset -> (document): window 0, a document closing it (window 1 stays open), a late one
MESSAGES = {0: _doc(0, 100), 1: _doc(1, 1100), 2: _doc(2, 200)}


def _restore(state: DetectorStreamState) -> DetectorStreamState:
    arrays, meta = state.checkpoint()
    checkpoint = Checkpoint("g", "s", arrays, meta, datetime.now(UTC))
    return DetectorStreamState("s", CONFIG, checkpoint)


def _feed(state: DetectorStreamState, offsets: range, batch_end: bool = True) -> list[Output]:
    outputs = []
    for offset in offsets:
        outputs += state.add(MESSAGES[offset], 0, offset, now=0.0)
    if batch_end:  # where the worker hands over the late documents of a batch
        outputs += state.close_idle(silent_until=0.0, wall_ms=0.0)
    return outputs


def _late(outputs: list[Output]) -> tuple[int, list[str]]:
    """The late count, and the late documents stored."""
    stored = [
        row["doc_id"]
        for out in outputs
        for name, args in out.calls
        if name == "insert_documents"
        for row in args[0].rows()
        if row["late"]
    ]
    return sum(out.late for out in outputs), stored


def test_a_late_document_read_again_after_a_restart_is_neither_stored_nor_counted_again():
    state = DetectorStreamState("s", CONFIG, None)
    first = _feed(state, range(3))
    assert _late(first) == (1, ["d2"])
    resume = state.min_buffered_offset(0)
    assert resume == 1  # window 1 is open: a restart re-reads d1 and d2
    again = _feed(_restore(state), range(resume, 3))
    assert _late(again) == (0, [])


def test_a_late_document_not_stored_when_the_checkpoint_was_taken_is_counted_on_the_re_read():
    """(A checkpoint taken in a transaction before the one storing the late document, then a
    crash: its first reading was never counted.)"""
    state = DetectorStreamState("s", CONFIG, None)
    first = _feed(state, range(3), batch_end=False)
    assert _late(first) == (0, [])  # waiting to be handed over
    restored = _restore(state)
    assert _late(_feed(restored, range(1, 3))) == (1, ["d2"])
    # and, stored now, a later restore from a checkpoint taken after that does not count it
    assert _late(_feed(_restore(restored), range(1, 3))) == (0, [])


def test_a_crash_recounts_what_it_stored_since_the_checkpoint():
    """The documented semantics: like the windows a crash recomputes."""
    state = DetectorStreamState("s", CONFIG, None)
    _feed(state, range(2))
    arrays, meta = state.checkpoint()  # the stream's last checkpoint
    assert _late(_feed(state, range(2, 3))) == (1, ["d2"])  # stored (and counted), then a crash
    restored = DetectorStreamState(
        "s", CONFIG, Checkpoint("g", "s", arrays, meta, datetime.now(UTC))
    )
    assert _late(_feed(restored, range(1, 3))) == (1, ["d2"])
