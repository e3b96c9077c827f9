"""A window processed in one version, then re-sent by a restarted detector in a larger one.

The detector sent a window closed by the idle timer whole (10 documents), then crashed before its
SQL commit; on restart it closed the window later, with the documents that had arrived since (12):
the anomaly worker has already processed the first version, so the second one's first 10
messages are re-sends of what it scored, but its last 2 are documents it never saw. They were
ignored as re-sends: consumed past, in neither SQL nor the dead letters, with nothing logged.
They are dead letters now, with the reason (a processed window cannot take more documents).
"""

from __future__ import annotations

import pytest
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import load_config
from tests.support.anomaly_worker import run_anomaly_worker, scores_topic, window_message

REASON = (
    "scores message of window 0 (12 documents) not used: window 0 was processed with its "
    "version of 10 documents"
)


def _config(**env: str):
    return load_config(env={"SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "10", **env})


def _add(state, seq, n, offset0, indices=None):
    outs = []
    for k, i in enumerate(range(n) if indices is None else indices):
        outs += state.add(parse_scored(window_message(seq, i, n)), 0, offset0 + k, 0.0)
    return [o.n_documents for o in outs if o.is_window], [
        (r["offset"], r["reason"]) for o in outs for r in o.dead
    ]


def test_documents_of_a_larger_version_of_a_processed_window_are_dead_lettered():
    state = AnomalyStreamState("s", _config(), None)
    assert _add(state, 0, 10, 0) == ([10], [])
    windows, dead = _add(state, 0, 12, 10)
    assert windows == []
    assert dead == [(20, REASON), (21, REASON)]  # its first 10 were processed: re-sends
    assert state.min_buffered_offset(0) is None
    # the same after a restore, and re-sends of either version's processed documents are ignored
    st, meta = state.checkpoint()
    restored = AnomalyStreamState("s", _config(), Checkpoint("g", "s", st, meta, None))
    assert _add(restored, 0, 12, 30) == ([], [(40, REASON), (41, REASON)])
    assert _add(restored, 0, 10, 50) == ([], [])
    assert _add(restored, 0, 12, 60, indices=range(10)) == ([], [])
    assert _add(restored, 1, 4, 70) == ([4], [])
    # a checkpoint that did not remember the sizes: every message of the window is a re-send
    legacy = {k: v for k, v in st.items() if k != "done_sizes"}
    old = AnomalyStreamState("s", _config(), Checkpoint("g", "s", legacy, meta, None))
    assert _add(old, 0, 12, 80) == ([], [])


@pytest.mark.kafka
@pytest.mark.slow
def test_a_larger_version_of_a_processed_window_reaches_the_dead_letters(kafka_bootstrap, tmp_path):
    sent = [window_message(0, i, 10) for i in range(10)]
    sent += [window_message(0, i, 12) for i in range(12)]
    sent += [window_message(1, i, 5) for i in range(5)]
    env = scores_topic(kafka_bootstrap, tmp_path, "aversions", sent, "4")
    run = run_anomaly_worker(_config(**env), 6.0)
    assert run.scored == {f"0-{i}" for i in range(10)} | {f"1-{i}" for i in range(5)}
    assert run.offsets == {0: len(sent)}
    # every message is used, a re-send of one used, or a dead letter: none is lost
    assert run.dead == [(20, REASON, sent[20]), (21, REASON, sent[21])]
