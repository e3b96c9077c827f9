"""The coefficient solver (problem (27) of OR-NMF): regressions for bugs found."""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls
from sparsewatch.models.nmf_online import ORNMF
from sparsewatch.models.nnls import nnls_bpp, solve_nnls

# 10 topics over 4 terms (columns on the simplex), topics 0 and 9 equal: W^T W is singular up to
# the ridge solve_nnls adds, and block principal pivoting's exchanges cycled for ever
_TOPICS = np.array(
    [
        [2, 0, 0, 1, 0, 2, 2, 2, 0, 2],
        [2, 0, 0, 0, 1, 0, 0, 1, 0, 2],
        [1, 2, 1, 2, 1, 2, 1, 2, 1, 1],
        [2, 1, 0, 0, 1, 1, 0, 0, 0, 2],
    ],
    dtype=np.float64,
)
_DOCUMENT = np.array([2.0, 0.0, 2.0, 3.0])


def _loss(W: np.ndarray, v: np.ndarray, h: np.ndarray) -> float:
    return 0.5 * float(np.sum((W @ h - v) ** 2))


def test_block_principal_pivoting_that_cycles_still_returns_the_optimum() -> None:
    """The unsettled iterate was clipped at 0 and returned: loss 66, where ``h = 0`` has 8.5
    and the optimum (``scipy.optimize.nnls``) 1.10."""
    W = _TOPICS / _TOPICS.sum(axis=0)
    h = solve_nnls(W, (W.T @ _DOCUMENT)[:, None])[:, 0]
    reference = nnls(W, _DOCUMENT)[0]
    assert h.min() >= 0.0
    assert _loss(W, _DOCUMENT, h) <= _loss(W, _DOCUMENT, reference) + 1e-9
    G = W.T @ W + 1e-12 * np.eye(10)
    h = nnls_bpp(G, (W.T @ _DOCUMENT)[:, None])[:, 0]
    assert _loss(W, _DOCUMENT, h) <= _loss(W, _DOCUMENT, reference) + 1e-9


def test_coefficients_of_a_model_with_more_topics_than_terms_are_optimal() -> None:
    """The same bases in an OR-NMF model (``n_components`` above the number of terms):
    ``transform`` returned coefficients far worse than none at all."""
    W = _TOPICS / _TOPICS.sum(axis=0)
    model = ORNMF(10, batch_size=None, random_state=0).set_state(
        {
            "components_": W.T.copy(),
            "A_": np.zeros((10, 10)),
            "B_": np.zeros((4, 10)),
            "sq_": 0.0,
            "n_samples_seen_": 0,
            "n_steps_": 0,
            "n_features_in_": 4,
        }
    )
    h = model.transform(_DOCUMENT[None, :])[0]
    assert _loss(W, _DOCUMENT, h) <= _loss(W, _DOCUMENT, nnls(W, _DOCUMENT)[0]) + 1e-9
