"""The anomaly worker's per-stream state without Kafka: reassembly, dedup, constant features."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sparsewatch.consumers.anomaly_worker import REMEMBERED_WINDOWS, AnomalyStreamState
from sparsewatch.consumers.messages import InvalidMessageError
from sparsewatch.consumers.score_messages import MAX_WINDOW_DOCUMENTS, MAX_WINDOW_SEQ, parse_scored
from sparsewatch.storage.store import Checkpoint

from sparsewatch.config import load_config
from tests.support.anomaly_worker import scores_payload


def _msg(seq: int, i: int, n: int, score: float, atoms: int) -> bytes:
    return scores_payload(
        stream="s",
        doc_id=f"{seq}-{i}",
        seq=seq,
        i=i,
        n=n,
        timestamp=1000 * seq,
        score=score,
        error=score,
        code_value=[0.1] * atoms,
        n_terms=12,
    )


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
        ({"timestamp": 1e400}, "timestamp must be an integer, got float Infinity"),
        ({"window_seq": 1e400}, "window_seq must be an integer"),
        ({"n_terms": 10**400}, "n_terms is not in 0..1e12"),  # log1p overflowed
        ({"n": MAX_WINDOW_DOCUMENTS + 1, "index": 0}, "at most"),
        ({"index": 3, "n": 3}, "index 3 of a window of 3"),
        ({"score": float("nan")}, "score nan is not a finite number"),
        # accepted and used until now: a string, a float, a boolean read as numbers, and a string
        # of digits read as the code values 9, 8, 7
        ({"window_seq": "0"}, "window_seq must be an integer, got str"),
        ({"n": 2.9}, "n must be an integer, got float 2.9"),
        ({"index": True}, "index must be an integer, got bool true"),
        ({"score": True}, "score must be a number, got bool"),
        ({"score": "0.5"}, "score must be a number, got str"),
        ({"code_value": "987"}, "code_value must be a list of numbers, got str"),
        ({"code_value": [0.1, None]}, "a code_value must be a number, got NoneType"),
        ({"n_terms": -1}, "n_terms is not in 0..1e12"),
        # finite, but standardising it overflowed: the model refused the window and the worker
        # stopped on every restart
        ({"score": 1e308}, r"score 1e\+308 is not a finite number of size <= 1e12"),
        ({"reconstruction_error": -2e12}, "reconstruction_error -2000000000000.0 is not"),
        ({"code_value": [1e300]}, r"a code_value 1e\+300 is not"),
        # each of these passed and then stopped the worker when stored, on every restart
        ({"window_seq": 2**63}, "window number"),  # beyond the checkpoint's int64
        ({"window_seq": -1}, "window number"),
        ({"timestamp": 10**17}, "outside 1970..2200"),  # flagged -> datetime out of range
        ({"stream": "s" * 129}, "'stream' is longer than 128"),  # VARCHAR(200) on PostgreSQL
        ({"stream": "s\ud800"}, "'stream' contains an unpaired surrogate"),
        ({"doc_id": "d\x00"}, "'doc_id' contains a NUL"),
        ({"doc_id": "d" * 513}, "'doc_id' is longer than 512"),
        ({"doc_id": 5}, "'doc_id' must be a string"),
        ({"stream": " "}, "'stream' is empty"),
    ],
)
def test_malformed_scores_messages_are_refused_with_a_reason(change, reason):
    msg = {**json.loads(_msg(0, 0, 2, 0.5, 2)), **change}
    with pytest.raises(InvalidMessageError, match=reason):
        parse_scored(json.dumps(msg).encode())


def test_a_scores_message_that_is_not_an_object_is_refused():
    with pytest.raises(InvalidMessageError, match="not an object"):
        parse_scored(b"[1, 2]")


def test_a_null_scores_message_is_refused_as_null_not_as_empty_bytes():
    """Its dead letter's payload is stored as b"": the reason is what tells the two apart."""
    with pytest.raises(InvalidMessageError, match=r"empty message \(null value\)"):
        parse_scored(None)
    with pytest.raises(InvalidMessageError, match="JSONDecodeError"):
        parse_scored(b"")


def test_the_largest_window_number_is_processed_and_checkpointed():
    state = AnomalyStreamState("s", _config(), None)
    top = MAX_WINDOW_SEQ
    outputs = []
    for seq in (top - 2, top - 1, top):
        for i in range(20):
            msg = {**json.loads(_msg(0, i, 20, 0.5 + 0.01 * i, 2)), "window_seq": seq}
            outputs += state.add(parse_scored(json.dumps(msg).encode()), 0, 0, now=0.0)
    assert len(outputs) == 3 and state.last_seq == top
    st, meta = state.checkpoint()
    assert int(st["last_seq"]) == top and meta["last_seq"] == top


def test_deeply_nested_scores_message_is_refused():
    with pytest.raises(InvalidMessageError, match="RecursionError"):
        parse_scored(b'{"stream": "s", "code_value": ' + b"[" * 20_000 + b"}")


def _window(state, seq, n, offset0, indices=None):
    """Messages ``indices`` (default all) of window ``seq`` of ``n`` documents, added in order:
    the sizes of the windows processed and the dead letters, as (offset, reason, payload)."""
    outs = []
    for k, i in enumerate(range(n) if indices is None else indices):
        outs += state.add(parse_scored(_msg(seq, i, n, 0.5 + 0.01 * i, 2)), 0, offset0 + k, 0.0)
    windows = [out.n_documents for out in outs if out.is_window]
    dead = [(r["offset"], r["reason"], r["payload"]) for out in outs for r in out.dead]
    assert all(out.dead == [] for out in outs if out.is_window)
    return windows, dead


def test_a_message_claiming_another_window_size_does_not_hold_the_window_back():
    state = AnomalyStreamState("s", _config(), None)
    # a stray message claims window 0 has 10 documents; its real 2 messages still complete it
    stray = _msg(0, 5, 10, 0.5, 2)
    assert state.add(parse_scored(stray), 0, 0, now=0.0) == []
    windows, dead = _window(state, 0, 2, offset0=1)
    assert windows == [2] and state.last_seq == 0
    assert dead == [
        (
            0,
            "scores message of window 0 (10 documents) not used: superseded by its complete "
            "version of 2 documents",
            stray,
        )
    ]
    assert state.min_buffered_offset(0) is None
    assert _window(state, 1, 3, offset0=3) == ([3], [])


def test_a_window_recomputed_with_another_size_after_a_detector_crash_is_processed():
    state = AnomalyStreamState("s", _config(), None)
    # the detector died flushing window 0 (3 of 5 sent) and closed it with 7 documents on restart
    assert _window(state, 0, 5, offset0=0, indices=[0, 1, 2]) == ([], [])
    assert state.min_buffered_offset(0) == 0
    windows, dead = _window(state, 0, 7, offset0=3)
    assert windows == [7] and state.last_seq == 0
    assert [offset for offset, _, _ in dead] == [0, 1, 2]
    assert state.min_buffered_offset(0) is None
    # messages of either version re-sent later are recognised as done
    assert _window(state, 0, 5, offset0=10) == ([], [])


def test_an_incomplete_window_is_dead_lettered_when_a_later_window_completes(caplog):
    state = AnomalyStreamState("s", _config(), None)
    assert _window(state, 0, 4, offset0=0, indices=[0, 1]) == ([], [])
    assert _window(state, 1, 3, offset0=2, indices=[0, 1]) == ([], [])
    assert state.min_buffered_offset(0) == 0  # both wait, holding back the resume offset
    with caplog.at_level("WARNING"):
        windows, dead = _window(state, 1, 3, offset0=4, indices=[2])
    assert windows == [3] and state.last_seq == 1
    assert [(offset, reason) for offset, reason, _ in dead] == [
        (
            o,
            "scores message of window 0 (4 documents) not used: incomplete; window 1, sent "
            "after it, completed",
        )
        for o in (0, 1)
    ]
    assert "window 0: 2 messages dead-lettered" in caplog.text
    assert state.min_buffered_offset(0) is None
    # too late: an incomplete version again, dead letters once a later window completes
    assert _window(state, 0, 4, offset0=5, indices=[2, 3]) == ([], [])
    assert state.min_buffered_offset(0) == 5
    windows, dead = _window(state, 2, 1, offset0=7)
    assert windows == [1] and [offset for offset, _, _ in dead] == [5, 6]


def test_a_later_window_interleaved_with_an_incomplete_one_waits_for_it():
    """A detector that lost its partition may still send window 1 while the new owner re-sends
    window 0: their messages interleave, so window 0 can still complete and is not dropped."""
    state = AnomalyStreamState("s", _config(), None)
    order = [(0, 0), (0, 1), (1, 0), (0, 2), (1, 1), (1, 2), (0, 3)]  # (window, index); n 4 / 3
    outputs = []
    for offset, (seq, i) in enumerate(order):
        n = 4 if seq == 0 else 3
        outputs += state.add(parse_scored(_msg(seq, i, n, 0.5 + 0.01 * i, 2)), 0, offset, 0.0)
        if offset == 5:  # window 1 is complete, window 0 is not: both wait
            assert outputs == [] and state.min_buffered_offset(0) == 0
    assert [(out.n_documents, out.dead) for out in outputs] == [(4, []), (3, [])]
    assert state.last_seq == 1
    assert state.min_buffered_offset(0) is None


def test_a_stray_window_far_ahead_is_dead_lettered_once_a_window_sent_after_it_completes():
    state = AnomalyStreamState("s", _config(), None)
    stray = _msg(10**9, 0, 5, 0.5, 2)  # an outside producer's message, window number far ahead
    assert state.add(parse_scored(stray), 0, 0, now=0.0) == []
    windows, dead = _window(state, 0, 3, offset0=1)
    assert windows == [3] and [(o, p) for o, _, p in dead] == [(0, stray)]
    assert "sent before window 0, which completed" in dead[0][1]
    assert state.min_buffered_offset(0) is None  # it no longer holds back the resume offset
    # a later window's messages interleaved with the one completing are kept
    assert _window(state, 1, 2, offset0=4, indices=[0]) == ([], [])
    assert _window(state, 2, 2, offset0=5, indices=[0]) == ([], [])
    assert _window(state, 1, 2, offset0=6, indices=[1]) == ([2], [])
    assert _window(state, 2, 2, offset0=7, indices=[1]) == ([2], [])
    assert state.last_seq == 2 and state.min_buffered_offset(0) is None


def test_copies_of_a_dead_lettered_version_are_dead_lettered_with_it():
    """A detector that crashed twice while sending window 0 re-sent some of its messages before
    closing it with another size: every copy of the abandoned version is a dead letter, none is
    lost (consumed past, in neither the DLQ nor SQL)."""
    state = AnomalyStreamState("s", _config(), None)
    assert _window(state, 0, 5, offset0=0, indices=[0, 1]) == ([], [])
    assert _window(state, 0, 5, offset0=2, indices=[0, 1, 2]) == ([], [])  # 0 and 1 again
    assert state.min_buffered_offset(0) == 0
    windows, dead = _window(state, 0, 7, offset0=5)
    assert windows == [7]
    assert sorted(offset for offset, _, _ in dead) == [0, 1, 2, 3, 4]
    assert state.min_buffered_offset(0) is None
    # copies of the version that completes are deduplicated, not dead-lettered
    assert _window(state, 1, 3, offset0=20, indices=[0, 1, 0, 2]) == ([3], [])
    # copies of an incomplete window dropped because a later one completed
    assert _window(state, 2, 4, offset0=30, indices=[0, 0, 1]) == ([], [])
    windows, dead = _window(state, 3, 2, offset0=40)
    assert windows == [2] and [offset for offset, _, _ in dead] == [30, 31, 32]
    assert state.min_buffered_offset(0) is None


@pytest.mark.parametrize(
    "score",
    [
        lambda i: 123456789.123,  # constant, but its std rounds to 1.5e-8, above the cut-off
        lambda i: 1e12 if i == 5 else 1e12 * (1 - 1e-17),  # one ulp apart: a std of ~1e-5
    ],
    ids=["large-constant", "largest-near-constant"],
)
def test_a_feature_the_model_cannot_use_is_left_out_instead_of_stopping_the_worker(score):
    """Finite scores messages whose feature DL-OCSVM refused after the standardisation stopped
    the worker with a ValueError, on every restart (the same messages are read again)."""
    state = AnomalyStreamState("s", _config(), None)
    outputs = []
    for seq in range(4):
        for i in range(20):
            msg = {**json.loads(_msg(seq, i, 20, 0.5, 1 + i % 3)), "score": score(i)}
            outputs += state.add(parse_scored(json.dumps(msg).encode()), 0, 0, now=0.0)
    assert len(outputs) == 4 and state.model is not None
    assert state.scale[0] == 0.0  # the score is left out
    assert all(np.isfinite(state.scale))


def test_a_window_never_processed_below_the_last_processed_one_is_processed():
    """A stray complete window far ahead, or window numbers that went down when the detector's
    windows.size changed, made every later window of the stream count as already processed:
    silently dropped, for ever, with nothing in the dead letters or the log."""
    state = AnomalyStreamState("s", _config(), None)
    for seq in range(3):
        assert _window(state, seq, 20, offset0=100 * seq)[0] == [20]
    assert _window(state, 500, 1, offset0=300)[0] == [1]  # a stray, complete window
    assert _window(state, 3, 20, offset0=400) == ([20], [])
    assert _window(state, 4, 20, offset0=500) == ([20], [])
    assert state.last_seq == 4 and state.model is not None
    # windows it processed, re-sent by a restarted detector, are still ignored silently
    assert _window(state, 1, 20, offset0=600) == ([], [])
    assert _window(state, 500, 1, offset0=700) == ([], [])
    # and so after a restore; from a checkpoint that did not remember windows, all those up to
    # its last one count as processed, as before
    st, meta = state.checkpoint()
    restored = AnomalyStreamState("s", _config(), Checkpoint("g", "s", st, meta, None))
    assert _window(restored, 2, 20, offset0=800) == ([], [])
    assert _window(restored, 5, 20, offset0=900) == ([20], [])
    legacy = {k: v for k, v in st.items() if not k.startswith("done_")}
    old = AnomalyStreamState("s", _config(), Checkpoint("g", "s", legacy, meta, None))
    assert _window(old, 4, 20, offset0=1000) == ([], [])
    assert _window(old, 5, 20, offset0=1100) == ([20], [])


def test_processed_windows_are_remembered_within_a_bound():
    state = AnomalyStreamState("s", _config(), None)
    for seq in range(REMEMBERED_WINDOWS + 5):
        assert _window(state, seq, 1, offset0=seq)[0] == [1]
    assert len(state.done) == REMEMBERED_WINDOWS and state.done_floor == -1
    assert _window(state, 5, 1, offset0=10**6) == ([], [])  # remembered: a re-send
    assert _window(state, 0, 1, offset0=10**6 + 1) == ([1], [])  # forgotten: processed again


def test_a_stream_whose_features_never_vary_says_so_once(caplog):
    """Every document unexplained (score 1, empty code): no feature varies, so no model is ever
    fitted and nothing is scored, which the log did not say."""
    state = AnomalyStreamState("s", _config(), None)
    with caplog.at_level("WARNING"):
        for seq in range(5):
            outs = [
                o
                for i in range(20)
                for o in state.add(parse_scored(_msg(seq, i, 20, 1.0, 0)), 0, 0, now=0.0)
            ]
            assert [o.n_documents for o in outs] == [20] and not outs[0].calls
    assert state.model is None
    assert caplog.text.count("every feature is constant over its 40 reference documents") == 1


def _features_window(state, seq, rows):
    """Feed one window whose documents have the given (score, atoms) rows; return its flags."""
    n = len(rows)
    outputs = [
        o
        for i, (score, atoms) in enumerate(rows)
        for o in state.add(parse_scored(_msg(seq, i, n, score, atoms)), 0, 0, now=0.0)
    ]
    assert len(outputs) == 1
    calls = dict(outputs[0].calls)
    if "upsert_anomaly_scores" not in calls:
        return None
    return np.array([r["anomaly"] for r in calls["upsert_anomaly_scores"][0]])


def _normal_rows(rng, n):
    return [(float(rng.normal(0.6, 0.05)), int(rng.integers(1, 4))) for _ in range(n)]


def _anomaly_config(**env):
    return load_config(
        env={
            "SPARSEWATCH_ANOMALY_REFERENCE_DOCUMENTS": "40",
            "SPARSEWATCH_ANOMALY_CONTAMINATION": "0.1",
            **{f"SPARSEWATCH_ANOMALY_{k.upper()}": str(v) for k, v in env.items()},
        }
    )


def test_a_window_is_scored_by_the_model_fitted_before_it():
    """A burst of odd documents is judged against what came before it: the refit due at its
    window comes after it is scored. (Refitting first put the burst into its own reference,
    where half the rows looked like it, and passed most of it as normal.)"""
    rng = np.random.default_rng(1)
    state = AnomalyStreamState("s", _anomaly_config(refit_every_windows=1), None)
    assert _features_window(state, 0, _normal_rows(rng, 20)) is None  # reference filling
    assert _features_window(state, 1, _normal_rows(rng, 20)) is not None  # fitted, in sample
    burst = [(float(rng.normal(0.05, 0.01)), 12) for _ in range(20)]
    assert _features_window(state, 2, burst).all()
    # the refit after it took the burst in: the same kind of document is no longer flagged
    assert _features_window(state, 3, burst).mean() < 0.5


def test_a_drifted_representation_is_refitted_at_once():
    """When the detector's output shifts for good (its dictionary grew), the stale model flags
    nearly every document until the scheduled refit. A window with improbably many flags for
    the contamination rate (0.1 here) triggers a refit at once; the rate stays far below the
    stale model's. (That refit's reference mixes the old and the new documents: the model of
    coherent initial atoms flagged too few there, 2-3 %, which triggered another refit; the
    one of distinct atoms flags 6-9 %, no improbable rate. The lower tail of the drift test is
    test_the_drift_test_is_the_binomial_tail's.)"""

    def run(drift_p):
        rng = np.random.default_rng(2)
        config = _anomaly_config(
            refit_every_windows=1000, refit_drift_p=drift_p, reference_documents=200
        )
        state = AnomalyStreamState("s", config, None)
        rates, since_fit = [], []
        for seq in range(14):
            shift = 0.3 if seq >= 5 else 0.0
            flags = _features_window(
                state, seq, [(s + shift, a) for s, a in _normal_rows(rng, 100)]
            )
            rates.append(None if flags is None else float(flags.mean()))
            since_fit.append(state.since_fit)
        return rates, since_fit

    stale, since_fit = run(0)
    assert stale[0] is None and since_fit[-1] == 13  # fitted once, on windows 0-1
    assert min(stale[5:]) > 0.9
    adapted, since_fit = run(1e-3)
    assert adapted[:5] == stale[:5]  # stationary: no refit before the shift
    assert adapted[5] > 0.9 and since_fit[5] == 0  # the shift is flagged, then refitted on
    assert max(adapted[6:]) <= 0.25 and np.mean(adapted[6:]) >= 0.03


@pytest.mark.parametrize(
    ("flagged", "n", "drifted"),
    [(0, 40, False), (4, 40, False), (12, 40, True), (3, 3, True), (1, 1, False), (0, 100, True)],
)
def test_the_drift_test_is_the_binomial_tail(flagged, n, drifted):
    """Drift when P(K >= flagged) or P(K <= flagged), K ~ Binomial(n, contamination 0.1), is
    below ``refit_drift_p`` (1.01e-3 here): 12 of 40 (upper tail 3.8e-4), 3 of 3 (1e-3) and 0 of
    100 (lower tail 2.7e-5) are; 4 of 40 (the contamination rate), 0 of 40 (lower tail 0.015)
    and 1 of 1 (0.1) are not."""
    state = AnomalyStreamState("s", _anomaly_config(refit_drift_p=1.01e-3), None)
    flags = np.zeros(n, bool)
    flags[:flagged] = True
    assert state._drifted(flags) is drifted


def test_windows_too_small_to_tell_alone_are_tested_together_and_checkpointed():
    """0 of 20 flagged is no evidence at a contamination of 0.1 (tail 0.12); 5 of the 200 scored
    since the last fit is (tail 4e-5). The counts survive a restart."""
    state = AnomalyStreamState("s", _anomaly_config(), None)
    assert not state._drifted(np.zeros(20, bool))
    state.scored_since_fit, state.flagged_since_fit = 200, 5
    assert state._drifted(np.zeros(20, bool))
    st, meta = state.checkpoint()
    restored = AnomalyStreamState("s", _anomaly_config(), Checkpoint("g", "s", st, meta, None))
    assert (restored.scored_since_fit, restored.flagged_since_fit) == (200, 5)
    legacy = {k: v for k, v in st.items() if not k.endswith("_since_fit") or k == "since_fit"}
    old = AnomalyStreamState("s", _anomaly_config(), Checkpoint("g", "s", legacy, meta, None))
    assert (old.scored_since_fit, old.flagged_since_fit) == (0, 0)


def test_each_window_says_what_it_was_for_the_log():
    state = AnomalyStreamState("s", _anomaly_config(), None)
    rng = np.random.default_rng(3)
    summaries = []
    for seq, rows in enumerate([_normal_rows(rng, 20), _normal_rows(rng, 20), [(0.05, 12)] * 20]):
        for i, (score, atoms) in enumerate(rows):
            summaries += [
                o.summary
                for o in state.add(parse_scored(_msg(seq, i, 20, score, atoms)), 0, 0, now=0.0)
            ]
    assert summaries[0] == "stream s window 0: 20 documents into the reference set (20 of 40)"
    assert summaries[1].startswith("stream s window 1: 20 documents, ")
    assert summaries[2] == "stream s window 2: 20 documents, 20 anomalous"


def test_the_flags_are_the_models_predictions():
    """The worker thresholds the scores it already has instead of calling predict (a second
    OMP per document); the flags must be predict's."""
    rng = np.random.default_rng(4)
    state = AnomalyStreamState("s", _anomaly_config(refit_every_windows=100), None)
    _features_window(state, 0, _normal_rows(rng, 40))
    rows = _normal_rows(rng, 30) + [(0.05, 12)] * 3
    model = state.model
    flags = _features_window(state, 1, rows)
    assert state.model is model  # not refitted after window 1
    X = np.array([parse_scored(_msg(1, i, 33, s, a)).features for i, (s, a) in enumerate(rows)])
    Z = state._standardise(X)
    assert np.array_equal(flags, model.predict(Z).astype(bool)) and flags[-3:].all()
