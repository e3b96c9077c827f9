"""The anomaly worker's per-stream state without Kafka: reassembly, dedup, constant features."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sparsewatch.consumers.anomaly_worker import (
    MAX_WINDOW_DOCUMENTS,
    AnomalyStreamState,
    parse_scored,
)
from sparsewatch.consumers.messages import InvalidMessageError

from sparsewatch.config import load_config


def _msg(seq: int, i: int, n: int, score: float, atoms: int) -> bytes:
    return json.dumps(
        {
            "stream": "s",
            "doc_id": f"{seq}-{i}",
            "window_seq": seq,
            "index": i,
            "n": n,
            "timestamp": 1000 * seq,
            "score": score,
            "reconstruction_error": score,
            "novel": False,
            "code_index": list(range(atoms)),
            "code_value": [0.1] * atoms,
            "n_terms": 12,
        }
    ).encode()


def _config():
    return load_config(
        env={
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "40",
            "SPARSEWATCH_ANOMALY_REFIT_EVERY_WINDOWS": "2",
        }
    )


def test_windows_reassembled_in_order_and_resent_messages_ignored():
    rng = np.random.default_rng(0)
    state = AnomalyStreamState("s", _config(), None)
    outputs = []
    for seq in range(6):
        msgs = [
            _msg(seq, i, 20, float(rng.uniform(0.2, 1.0)), int(rng.integers(0, 4)))
            for i in range(20)
        ]
        for k, raw in enumerate(reversed(msgs)):  # any order inside a window
            outputs += state.add(parse_scored(raw), 0, seq * 100 + k, now=0.0)
            if k == 10:
                assert state.min_buffered_offset(0) == seq * 100
        # a restarted detector re-sends the window: nothing happens twice
        assert state.add(parse_scored(msgs[0]), 0, 999, now=0.0) == []
    assert len(outputs) == 6 and state.last_seq == 5 and state.model is not None
    assert state.min_buffered_offset(0) is None


def test_constant_features_are_left_out():
    state = AnomalyStreamState("s", _config(), None)
    for seq in range(3):  # no document uses any atom: three features are constant
        for i in range(20):
            state.add(parse_scored(_msg(seq, i, 20, 0.5 + 0.01 * i, 0)), 0, 0, now=0.0)
    assert state.model is not None
    assert (state.scale > 0).sum() == 2  # score and reconstruction error vary
    restored = AnomalyStreamState("s", _config(), None)
    from sparsewatch.storage.store import Checkpoint

    st, meta = state.checkpoint()
    restored = AnomalyStreamState("s", _config(), Checkpoint("g", "s", st, meta, None))
    x = np.array([[0.7, 0.7, 0, 0, 0, np.log1p(12)]])
    assert np.array_equal(
        restored.model.decision_function(restored._standardise(x)),
        state.model.decision_function(state._standardise(x)),
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"timestamp": 1e400}, "OverflowError"),  # json reads 1e400 as inf; int(inf) overflows
        ({"window_seq": 1e400}, "OverflowError"),
        ({"n_terms": 10**400}, "OverflowError"),  # log1p of an int beyond float range
        ({"n": MAX_WINDOW_DOCUMENTS + 1, "index": 0}, "at most"),
        ({"index": 3, "n": 3}, "index 3 of a window of 3"),
        ({"score": float("nan")}, "non-finite"),
    ],
)
def test_malformed_scores_messages_are_refused_with_a_reason(change, reason):
    msg = {**json.loads(_msg(0, 0, 2, 0.5, 2)), **change}
    with pytest.raises(InvalidMessageError, match=reason):
        parse_scored(json.dumps(msg).encode())


def test_deeply_nested_scores_message_is_refused():
    with pytest.raises(InvalidMessageError, match="RecursionError"):
        parse_scored(b'{"stream": "s", "code_value": ' + b"[" * 20_000 + b"}")


def test_a_message_disagreeing_with_its_window_size_is_refused_before_it_counts():
    state = AnomalyStreamState("s", _config(), None)
    assert state.add(parse_scored(_msg(0, 0, 2, 0.5, 2)), 0, 0, now=0.0) == []
    with pytest.raises(InvalidMessageError, match="window 0 of 2 documents, not 10"):
        state.add(parse_scored(_msg(0, 5, 10, 0.5, 2)), 0, 1, now=0.0)
    # the window still completes with its own second message
    [out] = state.add(parse_scored(_msg(0, 1, 2, 0.5, 2)), 0, 2, now=0.0)
    assert out.n_documents == 2
