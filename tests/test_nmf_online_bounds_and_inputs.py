"""The online topic models (OR-/MOR-/WOR-NMF): regressions for bugs found."""

from __future__ import annotations

import numpy as np
import pytest
from sparsewatch.models.nmf_online import MORNMF, ORNMF, WORNMF


def _planted(seed: int = 0) -> np.ndarray:
    """Two planted topics on terms 0-2 and 3-5, 20 documents each."""
    planted = np.repeat([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], 20, axis=0)
    return np.random.default_rng(seed).random((40, 6)) * planted


@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
@pytest.mark.parametrize(
    ("params", "message"),
    [
        # a negative lower bound made the box projection return negative bases
        ({"w_min": -0.2, "w_max": 0.9}, "w_min must be None or a finite number in"),
        # NaN bounds passed the feasibility check and gave NaN bases
        ({"w_min": float("nan")}, "w_min must be None or a finite number in"),
        ({"w_max": float("nan")}, "w_max must be a number > 0"),
        ({"w_max": 0.0}, "w_max must be a number > 0"),
        # Itakura-Saito needs positive bases (w_min = 0 divided by zero in the objective)
        ({"w_min": 0.0, "beta_loss": "itakura-saito"}, "w_min must be > 0 for Itakura-Saito"),
    ],
)
def test_basis_bounds_are_checked(cls, params: dict, message: str) -> None:
    X = _planted() + 1e-3
    with pytest.raises(ValueError, match=message):
        cls(2, batch_size=10, random_state=0, **params).fit(X)


def test_negative_lower_bound_never_gave_negative_bases() -> None:
    """The symptom of the unchecked ``w_min``: bases with negative entries (-0.14)."""
    with pytest.raises(ValueError):
        ORNMF(2, batch_size=10, random_state=0, w_min=-0.2, w_max=0.9).fit(_planted())
    model = ORNMF(2, batch_size=10, random_state=0, w_min=0.0, w_max=0.9).fit(_planted())
    assert model.components_.min() >= 0.0


def test_upper_bound_the_vocabulary_cannot_reach_is_named() -> None:
    """``w_max * n_features < 1``: no basis sums to 1 (the projection said only "empty set")."""
    with pytest.raises(ValueError, match=r"w_max = 0\.1 for 6 terms"):
        ORNMF(2, batch_size=10, random_state=0, w_max=0.1).fit(_planted())


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
def test_non_finite_init_array_is_refused(cls, bad: float) -> None:
    """An ``init`` array with NaN gave NaN bases for good (inf: NaN after normalising)."""
    init = np.random.default_rng(1).random((6, 2))
    init[0, 0] = bad
    model = cls(2, batch_size=10, init=init, random_state=0)
    with pytest.raises(ValueError, match="init must be finite"):
        model.fit(_planted())
    with pytest.raises(ValueError, match="init must be finite"):
        model.partial_fit(_planted())
    assert not hasattr(model, "components_")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("cls", [ORNMF, WORNMF, MORNMF])
def test_itakura_saito_coefficients_of_no_documents(cls) -> None:
    """``transform`` of an empty window under Itakura-Saito warned "Mean of empty slice"
    (the multiplicative updates started from ``mean(X)``)."""
    model = cls(2, batch_size=10, beta_loss="itakura-saito", random_state=0)
    model.fit(_planted() + 1e-3)
    assert model.transform(np.zeros((0, 6))).shape == (0, 2)
    assert model.predict(np.zeros((0, 6))).shape == (0,)
