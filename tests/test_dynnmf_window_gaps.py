"""Windows without documents are empty time points of the dynamic NMF (at most omega a gap).

A duration window opens only when a document arrives, so hourly windows at hours 0, 1, 2 and 9
reached the dynamic NMF as four consecutive time points: the documents of hour 0 stayed in its
omega = 7 window at hour 9, and the volumes had no silent hours."""

from __future__ import annotations

import io

import numpy as np
from sparsewatch.consumers.detector_core import StreamModels, build_models, process_window
from sparsewatch.consumers.messages import Document
from sparsewatch.consumers.windowing import Buffered, ClosedWindow

from sparsewatch.config import DetectorConfig

HOUR = 3_600_000
WORDS = [f"qx{chr(97 + a)}{chr(97 + b)}" for a in range(26) for b in range(26)]
CONFIG = DetectorConfig(warmup_documents=100)


def _window(seq: int, closed_by: str = "watermark") -> ClosedWindow:
    """100 documents on four stories, in hourly window ``seq`` (the same texts for a seq)."""
    rng = np.random.default_rng(seq)
    items = []
    for i in range(100):
        story = WORDS[8 * (i % 4) : 8 * (i % 4) + 8]
        text = " ".join([*rng.choice(story, 6, replace=False), *rng.choice(WORDS[200:], 2)])
        items.append(Buffered(Document(f"{seq}-{i}", text, seq * HOUR + i, "s"), 0, i))
    return ClosedWindow("s", seq, seq * HOUR, (seq + 1) * HOUR, items, closed_by)


def _run(seqs: list[int], models: StreamModels | None = None) -> tuple[StreamModels, list[int]]:
    """The windows ``seqs`` through the core; the dynamic NMF's time points after each."""
    models = models or build_models(CONFIG)
    steps = []
    for seq in seqs:
        process_window(models, _window(seq), CONFIG)
        assert models.emerging is not None
        steps.append(int(getattr(models.emerging, "n_steps_", 0)))
    return models, steps


def test_consecutive_windows_are_consecutive_time_points() -> None:
    """(Count windows are numbered consecutively: they never skip.)"""
    models, steps = _run([0, 1, 2, 3])
    assert steps == [1, 2, 3, 4]
    assert models.emerging_seq == 3


def test_skipped_windows_are_empty_time_points() -> None:
    models, steps = _run([0, 1, 2, 9])
    assert steps == [1, 2, 3, 10]  # hours 3-8 are 6 empty time points (was 4)
    emerging = models.emerging
    assert emerging is not None
    # omega = 7: at time point 9 the window holds hours 3-9, so only hour 9's documents
    assert set(emerging.doc_times_.tolist()) == {9}
    assert all(len(e.volume) == emerging.window for e in emerging.events_)
    assert all(e.volume[:-1] == (0.0,) * (emerging.window - 1) for e in emerging.events_)


def test_a_long_gap_costs_at_most_omega_time_points() -> None:
    models, steps = _run([0, 1, 2, 1000])
    assert models.emerging is not None
    assert steps == [1, 2, 3, 3 + models.emerging.window + 1]


def test_window_numbers_going_down_fill_nothing() -> None:
    _, steps = _run([5, 6, 2])  # (windows.size changed: numbers counted in other units)
    assert steps == [1, 2, 3]


def _npz_round_trip(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    buffer = io.BytesIO()
    np.savez(buffer, **state)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def test_a_restore_in_the_middle_of_a_gap_fills_it() -> None:
    uninterrupted, steps = _run([0, 1, 2, 9])
    before, _ = _run([0, 1, 2])
    restored = build_models(CONFIG).set_state(_npz_round_trip(before.get_state()))
    assert restored.emerging_seq == 2
    _, after = _run([9], restored)
    assert after == steps[-1:]
    assert restored.emerging is not None and uninterrupted.emerging is not None
    np.testing.assert_allclose(
        restored.emerging.components_, uninterrupted.emerging.components_, atol=1e-10
    )
    np.testing.assert_array_equal(restored.emerging.labels_, uninterrupted.emerging.labels_)


def test_a_checkpoint_from_before_the_last_seq_was_kept_still_restores() -> None:
    before, _ = _run([0, 1, 2])
    state = before.get_state()
    del state["emerging_seq"]
    restored = build_models(CONFIG).set_state(_npz_round_trip(state))
    assert restored.emerging_seq == -1
    _, after = _run([9], restored)
    assert after == [4]  # no gap known: the next window is the next time point, as before
    _, later = _run([11], restored)
    assert later == [6]  # from then on gaps are filled
