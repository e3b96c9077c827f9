"""The anomaly worker when its input or its configuration changes over a stream's life.

Messages are built as the detector builds them (:class:`ScoreMessages` from a window's CSR
codes) and go through the worker's transport-free pieces (:func:`parse_scored`,
:class:`AnomalyStreamState`, its checkpoint and restore).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp
from sparsewatch.consumers.anomaly_worker import AnomalyStreamState, build_model
from sparsewatch.consumers.score_messages import ScoreMessages, parse_scored

from sparsewatch.config import load_config
from tests.support.anomaly_worker import restore


def _config(**anomaly: object):
    env = {"reference_documents": 100, "contamination": 0.1, **anomaly}
    return load_config(env={f"SPARSEWATCH_ANOMALY_{k.upper()}": str(v) for k, v in env.items()})


def _codes(rng: np.random.Generator, n: int, n_atoms: int) -> sp.csr_matrix:
    """``n`` non-negative sparse codes of 1-4 active atoms over a dictionary of ``n_atoms``."""
    rows, cols, values = [], [], []
    for i in range(n):
        active = rng.choice(n_atoms, size=int(rng.integers(1, 5)), replace=False)
        rows += [i] * len(active)
        cols += active.tolist()
        values += rng.uniform(0.05, 0.4, len(active)).tolist()
    return sp.csr_matrix((values, (rows, cols)), shape=(n, n_atoms))


def _window(rng: np.random.Generator, seq: int, n: int = 100, n_atoms: int = 50) -> ScoreMessages:
    """A window's scores messages as the detector sends them (ordinary documents)."""
    scores = rng.normal(0.6, 0.1, n).clip(0.0, 1.0)
    return ScoreMessages(
        "s",
        seq,
        [f"{seq}-{i}" for i in range(n)],
        np.full(n, 1_700_000_000_000 + seq, dtype=np.int64),
        scores,
        0.9 * scores,
        scores > 0.9,
        _codes(rng, n, n_atoms),
        rng.integers(5, 40, n),
    )


def _feed(state: AnomalyStreamState, messages: ScoreMessages) -> np.ndarray | None:
    """Feed one window; its flags, or None while it only filled the reference set."""
    outputs = [
        o
        for k, (_, raw) in enumerate(messages)
        for o in state.add(parse_scored(raw), 0, 1000 * messages.window_seq + k, now=0.0)
    ]
    assert len(outputs) == 1
    calls = dict(outputs[0].calls)
    if "upsert_anomaly_scores" not in calls:
        return None
    return np.array([row["anomaly"] for row in calls["upsert_anomaly_scores"][0]])


def _fitted_state(rng: np.random.Generator, config) -> AnomalyStreamState:
    state = AnomalyStreamState("s", config, None)
    for seq in range(3):
        _feed(state, _window(rng, seq))
    assert state.model is not None
    return state


def test_features_do_not_depend_on_atom_ids_or_the_dictionary_size():
    """The detector's dictionary grows, replaces atoms at its cap and, restored with a lowered
    ``detector.max_atoms``, drops atoms and renumbers the rest: a document's representation is
    a summary of its code's values (mass, count, largest), the same whatever the atoms' ids
    and however many atoms the dictionary has, so the reference fit and later scoring stay
    aligned."""
    window = _window(np.random.default_rng(0), 7, n=30, n_atoms=50)
    codes = window.codes.tocoo()
    renumbered = sp.csr_matrix((codes.data, (codes.row, 999 - codes.col)), shape=(30, 1000))
    permuted = sp.csr_matrix(window.codes[:, np.argsort(-window.codes.getnnz(axis=0))])
    features = np.array([parse_scored(raw).features for _, raw in window])
    for other_codes in (renumbered, permuted):
        other = ScoreMessages(**{**vars(window), "codes": other_codes})
        # (equal up to the order of the code's sum)
        assert np.allclose([parse_scored(raw).features for _, raw in other], features, 1e-15, 0)


@pytest.mark.parametrize(
    "change", [{"n_atoms": 3}, {"n_atoms": 20}, {"sparsity": 1}, {"contamination": 0.02}]
)
def test_a_restored_model_is_refitted_when_its_settings_changed(change, caplog):
    """``anomaly.n_atoms``, ``sparsity`` or ``contamination`` changed before a restart: the
    restored model is the one those settings fit on the checkpointed reference set, with a
    warning. (It stayed the old model, scored with the new sparsity against the old
    threshold, or with the old dictionary size and contamination, until the next refit.)"""
    rng = np.random.default_rng(1)
    state = _fitted_state(rng, _config(refit_every_windows=1000))
    new = _config(refit_every_windows=1000, **change)
    with caplog.at_level(logging.WARNING):
        restored = restore(state, new)
    ((name, value),) = change.items()
    assert f"configured now {name} {value}" in caplog.text
    Z = restored._standardise(restored.reference)
    expected = build_model(new.anomaly, min(new.anomaly.sparsity, restored._usable())).fit(Z)
    assert restored.model.dictionary_.shape[1] == new.anomaly.n_atoms
    assert restored.model.n_nonzero_coefs == expected.n_nonzero_coefs
    assert np.array_equal(restored.model.decision_function(Z), expected.decision_function(Z))
    assert restored.model.threshold_ == expected.threshold_
    # the new settings survive the next checkpoint: a second restart does not refit again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        again = restore(restored, new)
    assert "configured now" not in caplog.text
    assert np.array_equal(again.model.decision_function(Z), expected.decision_function(Z))


def test_a_restore_with_the_same_settings_keeps_the_checkpointed_model(caplog):
    rng = np.random.default_rng(2)
    state = _fitted_state(rng, _config())
    with caplog.at_level(logging.WARNING):
        restored = restore(state, _config())
    assert "configured now" not in caplog.text
    before, after = state.model.get_state(), restored.model.get_state()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_a_checkpoint_without_the_settings_is_refitted_when_its_dictionary_size_changed():
    """A checkpoint written before the settings were recorded tells its dictionary's size."""
    rng = np.random.default_rng(3)
    state = _fitted_state(rng, _config())
    recorded = ("model_sparsity", "fitted_n_atoms", "fitted_sparsity", "fitted_contamination")
    same = restore(state, _config(), drop=recorded)
    assert np.array_equal(same.model.dictionary_, state.model.dictionary_)
    assert restore(state, _config(n_atoms=4), drop=recorded).model.dictionary_.shape[1] == 4


def test_the_window_after_a_sparsity_change_is_flagged_at_the_configured_rate():
    """Sparsity 2 -> 1 with the old model kept flagged about 40% of the next window of
    ordinary documents at a contamination of 10% (the drift test refitted only after it). The
    refitted model's largest rate over three windows of 100 is 0.13-0.29 over seeds 4-11
    (mean rate 0.15-0.16), with the data-initialised atoms as they were and as they are."""
    rng = np.random.default_rng(4)
    state = _fitted_state(rng, _config())
    restored = restore(state, _config(sparsity=1))
    rates = [_feed(restored, _window(rng, seq)).mean() for seq in range(3, 6)]
    assert max(rates) <= 0.3


def test_raising_sparsity_and_the_reference_size_together_does_not_stop_the_worker():
    """Fitted on a reference of 3 documents at sparsity 2, restarted with sparsity 4 and a
    reference of 5: the reference holds 4 documents after the next 1-document window, too few
    for sparsity 4 (DL-OCSVM needs 5), and the refit raised, on every restart. The fit's
    sparsity is capped by the rows it has; the reference refills to the configured size."""
    rng = np.random.default_rng(5)
    old = _config(reference_documents=3, sparsity=2, refit_every_windows=1)
    state = AnomalyStreamState("s", old, None)
    for seq in range(3):
        _feed(state, _window(rng, seq, n=1))
    assert state.model is not None and len(state.reference) == 3
    new = _config(reference_documents=5, sparsity=4, refit_every_windows=1)
    restored = restore(state, new)
    for seq in range(3, 6):
        assert _feed(restored, _window(rng, seq, n=1)) is not None
        assert restored.model.n_nonzero_coefs <= len(restored.reference) - 1
    assert len(restored.reference) == 5 and restored.model.n_nonzero_coefs == 4


def test_a_refit_on_restore_uses_the_latest_rows_of_a_lowered_reference_size():
    """``reference_documents`` lowered with ``n_atoms``: the restored reference set keeps its
    latest rows (as the next window would have) and the model is refitted on those."""
    rng = np.random.default_rng(6)
    state = _fitted_state(rng, _config())
    new = _config(reference_documents=60, n_atoms=4)
    restored = restore(state, new)
    assert np.array_equal(restored.reference, state.reference[-60:])
    Z = restored._standardise(restored.reference)
    expected = build_model(new.anomaly, min(new.anomaly.sparsity, restored._usable())).fit(Z)
    assert np.array_equal(restored.model.decision_function(Z), expected.decision_function(Z))
