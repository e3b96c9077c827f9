"""The last threshold of a restored ONLINE detector, with the configuration changed in between.

In ``"top_q"`` mode a window too small for a top-``q`` cut is judged by the last threshold
(``threshold_``, initially ``threshold``), and late documents by it too. A restored model kept
the checkpoint's whatever it was: the ``threshold`` of a checkpoint written in ``"threshold"``
mode (or before any window) where the current ``threshold`` applies, and a cut made with the
screening margin added to the scores (``score_margin``) or not, on the other score scale.
"""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.models.novelty import OnlineL1NoveltyDetector
from sparsewatch.models.text_features import StreamingTfidf
from sparsewatch.models.window_detector import Detector
from sparsewatch.storage.serialization import arrays_to_npz, npz_to_arrays

CUT_FIELDS = ("model.threshold_top_q", "model.threshold_score_margin")


def _topic_docs(rng: np.random.Generator, topic: int, n: int) -> list[str]:
    """Tweet-length documents: seven of a topic's ten keywords plus two shared words."""
    words = [f"t{topic}w{i}" for i in range(10)]
    noise = [f"common{i}" for i in range(30)]
    return [
        " ".join(list(rng.choice(words, 7, replace=False)) + list(rng.choice(noise, 2)))
        for _ in range(n)
    ]


def _detector(**model: object) -> Detector:
    params = {"n_components": 20, "lam": 0.05, "atom_terms": 5, "top_q": 0.1} | model
    return Detector(
        StreamingTfidf(max_features=2000, idf_power=0.0),
        OnlineL1NoveltyDetector(**params),
        warmup_docs=100,
    )


def _checkpoint(n_windows: int, **model: object) -> dict[str, np.ndarray]:
    """A detector's state after its warm-up and ``n_windows`` full windows (of 60 documents, a
    new topic among them), as a stored checkpoint reads back."""
    rng = np.random.default_rng(0)
    d = _detector(**model)
    d.process_window([doc for t in range(4) for doc in _topic_docs(rng, t, 25)])
    assert d.fitted
    for w in range(n_windows):
        d.process_window(
            [doc for t in range(3) for doc in _topic_docs(rng, t, 18)]
            + [*_topic_docs(rng, 10 + w, 6)]
        )
    return npz_to_arrays(arrays_to_npz(d.get_state()))


def _small_window_and_late_threshold(state: dict[str, np.ndarray], **model: object) -> float:
    """The threshold a restored detector judges a window of two documents (``q n < 1``) by,
    checked against its flags and against the one late documents are judged by."""
    d = _detector(**model).set_state(state)
    rng = np.random.default_rng(1)
    texts = [*_topic_docs(rng, 0, 1), "wholly unseen words"]
    small = d.process_window(texts)
    np.testing.assert_array_equal(small.novel, small.scores > small.threshold)
    late = d.score(texts)
    assert late.threshold == small.threshold == d.model.late_threshold()
    np.testing.assert_array_equal(late.novel, late.scores > small.threshold)
    return small.threshold


@pytest.mark.parametrize(
    ("saved", "n_windows"),
    [({"flag": "threshold", "threshold": 0.6}, 2), ({"threshold": 0.6}, 0)],
    ids=["threshold-mode", "no-window-yet"],
)
def test_a_configured_threshold_restored_into_top_q_gives_way_to_the_current_one(
    saved: dict[str, object], n_windows: int
) -> None:
    """The checkpoint's ``threshold_`` was the threshold it was configured with, never a top-q
    cut: the restored model has made no cut of its own, so its small windows are judged by the
    ``threshold`` it is restored with (they were by the old 0.6 until a full window closed)."""
    state = _checkpoint(n_windows, **saved)
    assert float(state["model.threshold"]) == 0.6
    assert _small_window_and_late_threshold(state, threshold=1.02) == 1.02


def test_a_top_q_cut_restored_with_the_same_score_margin_is_kept() -> None:
    """The model's own last cut applies whatever ``threshold`` or ``top_q`` it is restored with
    (``top_q`` only sets the next cut)."""
    state = _checkpoint(2, threshold=0.6)
    cut = float(state["model.threshold"])
    assert cut != 0.6
    assert _small_window_and_late_threshold(state, threshold=1.02) == cut
    assert _small_window_and_late_threshold(state, threshold=1.02, top_q=0.2) == cut


@pytest.mark.parametrize("saved_margin", [True, False])
def test_a_top_q_cut_restored_with_score_margin_toggled_gives_way_to_the_threshold(
    saved_margin: bool,
) -> None:
    """The cut is on the scale of the scores it was made from: with the screening margin added
    (documents no atom explains score up to ``1 + over_weight + lam``) or not (they tie at 1).
    Restored with ``score_margin`` toggled, small windows were judged by it on the other scale."""
    state = _checkpoint(2, score_margin=saved_margin)
    cut = float(state["model.threshold"])
    assert cut != 0.95
    assert _small_window_and_late_threshold(state, score_margin=not saved_margin) == 0.95
    assert _small_window_and_late_threshold(state, score_margin=saved_margin) == cut


def test_the_restored_threshold_is_checkpointed_with_its_origin() -> None:
    """A discarded cut stays discarded across the next checkpoint (before any full window):
    restored again under the checkpoint's first configuration, the model uses ``threshold``."""
    state = _checkpoint(2)
    d = _detector(score_margin=False).set_state(state)
    again = npz_to_arrays(arrays_to_npz(d.get_state()))
    assert float(again["model.threshold"]) == 0.95
    assert all(again[k].dtype == np.int64 and again[k].shape == () for k in CUT_FIELDS)
    assert int(again["model.threshold_top_q"]) == 0
    assert _small_window_and_late_threshold(again, threshold=1.02) == 1.02


@pytest.mark.parametrize("restored", [{}, {"score_margin": False}, {"threshold": 1.02}])
def test_a_checkpoint_without_the_cut_origin_keeps_its_threshold_in_top_q_mode(
    restored: dict[str, object],
) -> None:
    """A checkpoint written before the cut's origin was recorded is taken as made under the
    restored model's ``flag`` and ``score_margin``: it restores as it did before."""
    state = _checkpoint(2)
    cut = float(state["model.threshold"])
    old = {k: v for k, v in state.items() if k not in CUT_FIELDS}
    assert _small_window_and_late_threshold(old, **restored) == cut
    d = _detector(flag="threshold", threshold=1.02).set_state(old)
    assert d.model.late_threshold() == 1.02
