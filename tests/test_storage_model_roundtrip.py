"""A detector restored from the database scores exactly like the one that was saved."""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.models.window_detector import Detector
from sparsewatch.replay.synthetic import generate_stream
from sparsewatch.storage.store import Store

WINDOW = 100


@pytest.mark.slow
def test_checkpoint_and_snapshot_restore_bit_identical_scores(database_url):
    texts = [d["text"] for d in generate_stream(n_docs=800, seed=3)]
    original = Detector(warmup_docs=2 * WINDOW)
    for start in range(0, 5 * WINDOW, WINDOW):
        original.process_window(texts[start : start + WINDOW])
    state = original.get_state()
    with Store.open(database_url) as store:
        with store.transaction() as tx:
            tx.put_checkpoint("detector", "default", state, {"window_seq": 4})
            tx.put_snapshot("default", 4, "detector", state, {"window_seq": 4}, 1)
        checkpoint = store.load_checkpoint("detector", "default")
        snapshot = store.load_snapshot("default", "detector", 4)
    assert checkpoint is not None and snapshot is not None
    restored = [
        Detector(warmup_docs=2 * WINDOW).set_state(s) for s in (checkpoint.state, snapshot.arrays)
    ]
    late = texts[5 * WINDOW : 5 * WINDOW + 30]
    following = [texts[start : start + WINDOW] for start in range(6 * WINDOW, 8 * WINDOW, WINDOW)]
    expected_late = original.score(late)
    expected = [original.process_window(window) for window in following]
    for detector in restored:
        got = detector.score(late)
        assert np.array_equal(got.scores, expected_late.scores, equal_nan=True)
        for window, want in zip(following, expected, strict=True):
            got = detector.process_window(window)
            assert got.scores.tobytes() == want.scores.tobytes()
            assert np.array_equal(got.novel, want.novel) and got.threshold == want.threshold
            assert np.array_equal(got.top_atoms, want.top_atoms)
    assert not np.all(expected[-1].scores == 1.0)  # the model explains some documents
