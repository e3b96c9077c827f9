"""Feature names of the DL-/DPL-/KDL-/KDPL-OCSVM detectors, and two error messages (regression
tests).

* A detector fitted on a DataFrame records its column names (``feature_names_in_``) and refuses
  to score a frame whose columns are named or ordered otherwise, as scikit-learn's
  ``OneClassSVM`` does; the rows were converted with ``np.asarray`` and a reordered frame was
  scored silently, each value against another feature's atoms. The names survive
  ``get_state``/``set_state`` through ``np.savez`` without pickle, and a state without them (a
  model fitted on an array, or a checkpoint written before names were kept) still loads.
* DPL-OCSVM's too-few-samples error named a "sparsity 1", a parameter DPL does not have.
* A scores message with an integer feature of thousands of digits gave a dead-letter reason of
  thousands of characters.
"""

from __future__ import annotations

import io
import json
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sparsewatch.consumers.messages import InvalidMessageError
from sparsewatch.consumers.score_messages import parse_scored
from sparsewatch.models._ocsvm_base import OCSVMDetectorBase
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM
from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM, KDPLOCSVM

MODELS = [
    DLOCSVM(n_components=4, n_iter=2, random_state=0),
    DPLOCSVM(n_components=4, n_iter=2, random_state=0),
    KDLOCSVM(n_components=4, n_iter=2, n_landmarks=30, random_state=0),
    KDPLOCSVM(n_components=4, n_iter=2, n_landmarks=30, random_state=0),
]
NAMES = ["a", "b", "c"]
MISMATCH = "The feature names should match those that were passed during fit"


def _frame(seed: int = 0, n: int = 40) -> pd.DataFrame:
    """Three features of very different scales, so that a reordering changes the scores."""
    rows = np.random.default_rng(seed).standard_normal((n, 3)) * [1.0, 5.0, 25.0]
    return pd.DataFrame(rows, columns=NAMES)


def _through_savez(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``state`` written with ``np.savez`` and read back without pickle, as a checkpoint is."""
    buffer = io.BytesIO()
    np.savez(buffer, **state)
    buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as loaded:
        return {k: loaded[k] for k in loaded.files}


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_reordered_columns_are_refused(proto: OCSVMDetectorBase) -> None:
    """Fitted on a DataFrame, the model keeps its column names and every scoring method refuses
    the same frame with its columns in another order or renamed; the frame in fit's order scores
    as its values do."""
    X = _frame()
    model = clone(proto).fit(X)
    np.testing.assert_array_equal(model.feature_names_in_, NAMES)
    assert model.feature_names_in_.dtype == object  # scikit-learn's type
    for method in (model.decision_function, model.score_samples, model.predict):
        with pytest.raises(ValueError, match=MISMATCH):
            method(X[["c", "b", "a"]])
        with pytest.raises(ValueError, match=MISMATCH):
            method(X.rename(columns={"c": "d"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # ("X does not have valid feature names")
        from_values = model.decision_function(X.to_numpy())
    np.testing.assert_array_equal(model.decision_function(X), from_values)
    np.testing.assert_array_equal(model.decision_function(X), model.decision_scores_)


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_names_follow_scikit_learn_on_refit_and_on_arrays(proto: OCSVMDetectorBase) -> None:
    """Names on one side only warn (scikit-learn's behaviour), a refit on an array removes the
    names of an earlier fit, and a failed fit keeps them."""
    X = _frame()
    model = clone(proto).fit(X)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        model.decision_function(X.to_numpy())
    with pytest.raises(ValueError):
        model.fit(X.iloc[:2])  # too few rows: the names of the first fit stay
    np.testing.assert_array_equal(model.feature_names_in_, NAMES)
    model.fit(X.to_numpy())
    assert not hasattr(model, "feature_names_in_")
    with pytest.warns(UserWarning, match="fitted without feature names"):
        model.decision_function(X)


@pytest.mark.parametrize("proto", MODELS, ids=lambda m: type(m).__name__)
def test_names_survive_a_checkpoint_without_pickle(proto: OCSVMDetectorBase) -> None:
    """``get_state`` keeps the names as a unicode array (``np.load(allow_pickle=False)`` refuses
    object arrays); the restored model has scikit-learn's object array, scores the frame as the
    fitted one does and refuses it reordered. A state without names (fitted on an array, or
    written before names were kept) restores a model without them."""
    X = _frame()
    model = clone(proto).fit(X)
    state = model.get_state()
    assert state["feature_names_in_"].dtype.kind == "U"
    restored = clone(proto).set_state(_through_savez(state))
    assert restored.feature_names_in_.dtype == object
    np.testing.assert_array_equal(restored.feature_names_in_, NAMES)
    np.testing.assert_array_equal(restored.decision_function(X), model.decision_function(X))
    with pytest.raises(ValueError, match=MISMATCH):
        restored.decision_function(X[["b", "a", "c"]])

    older = {k: v for k, v in state.items() if k != "feature_names_in_"}
    plain = restored.set_state(_through_savez(older))  # (over a model that had names)
    assert not hasattr(plain, "feature_names_in_")
    values = X.to_numpy()
    np.testing.assert_array_equal(plain.decision_function(values), model.decision_scores_)

    with pytest.raises(ValueError, match="one name per feature"):
        clone(proto).set_state({**state, "feature_names_in_": np.array(["a", "b"])})


@pytest.mark.parametrize("proto", MODELS[1::2], ids=lambda m: type(m).__name__)
def test_too_few_rows_for_dpl_names_no_sparsity(proto: OCSVMDetectorBase) -> None:
    """DPL-OCSVM has no sparsity (its codes ``P y`` are dense): its message names the model and
    the rows it needs, not the "sparsity 1" it claimed."""
    X = _frame().to_numpy()
    name = type(proto).__name__
    with pytest.raises(ValueError, match=f"found 2 sample.*{name} needs at least 3") as info:
        clone(proto).fit(X[:2])
    assert "sparsity" not in str(info.value)


@pytest.mark.parametrize("proto", MODELS[::2], ids=lambda m: type(m).__name__)
def test_too_few_rows_for_dl_names_the_model_and_its_sparsity(proto: OCSVMDetectorBase) -> None:
    """DL-OCSVM's message names the model and its sparsity ``s`` (it needs ``s + 1`` rows)."""
    X = _frame().to_numpy()
    name = type(proto).__name__
    with pytest.raises(ValueError, match=f"{name} with sparsity 3 needs at least 4"):
        clone(proto).set_params(n_nonzero_coefs=3).fit(X[:3])


def test_a_huge_integer_feature_is_cut_in_the_reason() -> None:
    """A 4001-digit integer score is refused with a reason of ordinary length (it quoted all
    the digits), which still shows the value's start and the field."""
    msg = {
        "stream": "s",
        "doc_id": "d",
        "window_seq": 1,
        "index": 0,
        "n": 1,
        "timestamp": 1_700_000_000_000,
        "score": 10**4000,
        "reconstruction_error": 0.1,
        "novel": False,
        "code_index": [],
        "code_value": [],
        "n_terms": 3,
    }
    with pytest.raises(InvalidMessageError) as info:
        parse_scored(json.dumps(msg).encode())
    reason = info.value.reason
    assert len(reason) <= 240
    assert reason.startswith("bad scores message: score 1000")
    assert "is not a finite number of size <= 1e12" in reason
    with pytest.raises(InvalidMessageError, match=r"score 1e\+308 is not a finite number"):
        parse_scored(json.dumps({**msg, "score": 1e308}).encode())
