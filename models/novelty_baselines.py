"""Batch baselines of Kasiviswanathan, Wang, Banerjee and Melville (NIPS 2012), Section 5.

* :class:`L2BatchNovelty` -- L2-BATCH (Algorithm 8): squared-loss sparse coding
  ``min_{x >= 0} 1/2 ||p - A x||_2^2 + lambda ||x||_1`` (the non-negative lasso) and the
  non-negative sparse-coding dictionary update of Hoyer (2002) over all documents seen so far.
* :class:`BatchL1Novelty` -- BATCH-IMPL (Algorithm 7): alternating minimisation of the l1 objective
  ``||P - A X||_1 + lambda ||X||_1`` (Eq. (3)) over all documents so far, codes by the ADMM of
  Algorithm 5 (:func:`~sparsewatch.models.l1_coding.l1_sparse_code`) and the dictionary by the
  ADMM of Algorithm 6 (:func:`~sparsewatch.models.oiadmm.l1_dictionary_update`), warm-started
  from the previous step. It starts from exactly the dictionary the ONLINE detector
  (:class:`~sparsewatch.models.novelty.OnlineL1NoveltyDetector`) builds on the warm-up.

Both grow the dictionary by ``eta`` atoms per step, as the paper's batch methods do; the new atoms
are the normalised documents of the step that the old dictionary represented worst (the most novel
ones), which keeps runs deterministic.

Rows of ``X`` are documents (scikit-learn convention); internally the paper's column layout is used
(``P`` is ``m x n``, ``A`` is ``m x k``, codes ``X`` are ``k x n``). The vocabulary may grow between
calls (more columns in ``X``): dictionary rows are zero-padded, as the paper's footnote says; a
narrower ``X`` than the dictionary raises ``ValueError``. Both are scikit-learn transformers of
non-negative input (TF-IDF); ``score_samples`` is "higher = more novel".
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.preprocessing import normalize
from sklearn.utils import Tags
from sklearn.utils.validation import check_is_fitted
from sparsewatch.models._validation import tfidf_model_tags
from sparsewatch.models.l1_coding import L1CodingResult, weighted_l1_loss
from sparsewatch.models.novelty import (
    OnlineL1NoveltyDetector,
    _as_columns,
    _check_documents,
    _nonzero_columns,
    _truncate_columns,
    l1_code,
)
from sparsewatch.models.oiadmm import l1_dictionary_update
from sparsewatch.models.projections import project_l1_ball_nonneg


def _csc_columns(X: sp.spmatrix | np.ndarray) -> sp.csc_matrix:
    """Documents (rows of a checked ``X``, :func:`~sparsewatch.models.novelty._check_documents`)
    as l1-normalised columns ``P`` (``m x n``); a window without documents gives ``m x 0``
    (``normalize`` refuses zero rows)."""
    X = sp.csr_matrix(X, dtype=np.float64)
    return (normalize(X, norm="l1") if X.shape[0] else X).T.tocsc()


def _pad_rows(A: np.ndarray, m: int) -> np.ndarray:
    return A if A.shape[0] >= m else np.vstack([A, np.zeros((m - A.shape[0], A.shape[1]), A.dtype)])


def _checked_scores(scores: np.ndarray | None, n_docs: int) -> np.ndarray | None:
    """Scores passed to ``partial_fit``: ``None``, or one finite value per document of the step
    (``ValueError`` otherwise, before any state changes)."""
    if scores is None:
        return None
    scores = np.asarray(scores, dtype=np.float64).ravel()
    if scores.shape != (n_docs,) or not np.all(np.isfinite(scores)):
        raise ValueError(f"scores must be {n_docs} finite values, one per document of X")
    return scores


def _worst_documents(
    P_new: sp.csc_matrix, scores: np.ndarray | None, eta: int, score: Callable[[], np.ndarray]
) -> np.ndarray:
    """The documents a step's ``eta`` new atoms are seeded from: those with a term (columns of
    ``P_new``) that the current dictionary represents worst, by ``scores`` (from ``score()``
    when ``None``), ties to the earlier. Empty, and nothing scored, when ``eta`` is 0 or no
    document of the step has a term."""
    seeds = _nonzero_columns(P_new)
    if eta <= 0 or seeds.size == 0:
        return seeds[:0]
    if scores is None:
        scores = score()
    return seeds[np.argsort(-scores[seeds], kind="stable")[:eta]]


def project_l2_ball_nonneg(A: np.ndarray) -> np.ndarray:
    """Columns projected onto ``{a >= 0, ||a||_2 <= 1}`` (clip, then shrink long columns)."""
    A = np.maximum(A, 0)
    norms = np.linalg.norm(A, axis=0)
    return A / np.maximum(norms, 1.0)


def nonneg_lasso_cd(
    G: np.ndarray,
    C: np.ndarray,
    alpha: float,
    X0: np.ndarray | None = None,
    max_iter: int = 200,
    tol: float = 1e-6,
) -> np.ndarray:
    """Solve ``min_{x >= 0} 1/2 x'Gx - c'x + alpha sum(x)`` for every column ``c`` of ``C``.

    Cyclic coordinate descent on the Gram form of the non-negative lasso
    ``1/2 ||p - A x||^2 + alpha ||x||_1`` (``G = A'A``, ``C = A'P``), vectorised over all columns:
    each coordinate update is exact, so the objective never increases and the fixed point satisfies
    the KKT conditions (the solution LARS-lasso with positivity reaches, Efron et al. 2004). Stops
    when no coordinate moves more than ``tol`` (relative to the largest coefficient) in a sweep.
    """
    k, n = C.shape
    X = np.zeros((k, n)) if X0 is None else np.array(X0, dtype=np.float64)
    R = C - G @ X  # R = C - G X, kept up to date
    diag = np.diag(G).copy()
    active = diag > 0
    X[~active] = 0.0
    for _ in range(max_iter):
        biggest = 0.0
        for j in np.flatnonzero(active):
            new = np.maximum(X[j] + (R[j] - alpha) / diag[j], 0.0)
            delta = new - X[j]
            if np.any(delta):
                R -= np.outer(G[:, j], delta)
                X[j] = new
                biggest = max(biggest, float(np.abs(delta).max()))
        if biggest <= tol * max(1.0, float(X.max(initial=0.0))):
            break
    return X


def l2_objective(P: sp.csc_matrix, A: np.ndarray, X: np.ndarray, alpha: float) -> np.ndarray:
    """Per-document ``1/2 ||p_i - A x_i||_2^2 + alpha ||x_i||_1`` (Algorithm 8's score)."""
    G = A.T @ A
    C = np.asarray((P.T @ A).T)
    pp = np.asarray(P.multiply(P).sum(axis=0)).ravel()
    quad = np.einsum("ij,ij->j", X, G @ X)
    return 0.5 * pp - np.einsum("ij,ij->j", C, X) + 0.5 * quad + alpha * X.sum(axis=0)


class L2BatchNovelty(TransformerMixin, BaseEstimator):
    """L2-BATCH (Algorithm 8): non-negative lasso codes, non-negative sparse-coding dictionary.

    At each step (:meth:`partial_fit`) the new documents join all earlier ones, the dictionary
    grows by ``eta`` atoms, and ``n_alternations`` rounds alternate (a) codes of every document by
    the non-negative lasso (:func:`nonneg_lasso_cd`, warm-started) and (b) ``dict_iter`` projected
    gradient steps (step ``1 / ||X X'||_2``) of ``1/2 ||P - A X||_F^2`` over
    ``{A >= 0, ||a_j||_2 <= 1}`` (Hoyer 2002's non-negative sparse coding, with the ball instead of
    the sphere so every step decreases the objective). The novelty score of a document is its
    objective value ``1/2 ||p - A x||^2 + alpha ||x||_1`` under the current dictionary.

    Parameters
    ----------
    n_components : initial number of atoms (taken from random documents of the first ``fit``).
    eta : atoms added per :meth:`partial_fit` step.
    alpha : the l1 weight ``lambda``.
    n_alternations : coding/dictionary rounds per step.
    dict_iter : projected gradient steps per dictionary update.
    code_max_iter, code_tol : coordinate-descent sweeps and tolerance.
    random_state : seed of the initial atom choice.

    Attributes
    ----------
    components_ : (m, k) dictionary; codes_ : (k, n) codes of the stored documents; P_ : (m, n)
    the stored documents (l1-normalised columns); n_features_in_ : terms the dictionary has rows
    for (a wider ``X`` appends new terms, a narrower one raises ``ValueError``).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.novelty_baselines import L2BatchNovelty
    >>> rng = np.random.default_rng(0)
    >>> X = np.hstack([rng.random((40, 8)) ** 3, np.zeros((40, 4))])  # terms 8-11 unused
    >>> new = np.full((1, 12), 0.25)
    >>> new[0, :8] = 0.0  # a document on the unused terms only: a new story
    >>> model = L2BatchNovelty(n_components=10).fit(X[:30])
    >>> scores = model.score_samples(np.vstack([X[30:], new]))  # higher = more novel
    >>> int(np.argmax(scores))
    10
    >>> model.transform(X[30:]).shape
    (10, 10)
    >>> model.partial_fit(np.vstack([X[30:], new])).components_.shape  # eta = 10 atoms added
    (12, 20)
    """

    # learned state (fit)
    components_: np.ndarray
    codes_: np.ndarray

    def __init__(
        self,
        n_components: int = 100,
        eta: int = 10,
        alpha: float = 0.01,
        n_alternations: int = 3,
        dict_iter: int = 20,
        code_max_iter: int = 100,
        code_tol: float = 1e-5,
        random_state: int = 0,
    ) -> None:
        self.n_components = n_components
        self.eta = eta
        self.alpha = alpha
        self.n_alternations = n_alternations
        self.dict_iter = dict_iter
        self.code_max_iter = code_max_iter
        self.code_tol = code_tol
        self.random_state = random_state

    def __sklearn_tags__(self) -> Tags:
        return tfidf_model_tags(super().__sklearn_tags__(), None)

    @property
    def n_features_in_(self) -> int:
        """Terms the dictionary has rows for (grows with the vocabulary)."""
        return int(self.components_.shape[0])

    def _code(self, P: sp.csc_matrix, A: np.ndarray, X0: np.ndarray | None = None) -> np.ndarray:
        C = np.asarray((P.T @ A).T)
        return nonneg_lasso_cd(A.T @ A, C, self.alpha, X0, self.code_max_iter, self.code_tol)

    def _update_dictionary(self, P: sp.csc_matrix, A: np.ndarray, X: np.ndarray) -> np.ndarray:
        XXt = X @ X.T
        PXt = np.asarray(P @ X.T)
        L = max(float(np.linalg.norm(XXt, 2)), 1e-12)
        for _ in range(self.dict_iter):
            A = project_l2_ball_nonneg(A - (A @ XXt - PXt) / L)
        return A

    def _alternate(self) -> None:
        for _ in range(self.n_alternations):
            self.codes_ = self._code(self.P_, self.components_, self.codes_)
            self.components_ = self._update_dictionary(self.P_, self.components_, self.codes_)
        self.codes_ = self._code(self.P_, self.components_, self.codes_)

    def fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> L2BatchNovelty:
        """Initialise atoms from ``n_components`` random documents and alternate on ``X``."""
        self.P_ = _csc_columns(_check_documents(X, self))
        rng = np.random.default_rng(self.random_state)
        n = self.P_.shape[1]
        seeds = _nonzero_columns(self.P_)
        if seeds.size == 0:
            raise ValueError("no document has a term: there is nothing to seed atoms from")
        pick = seeds[rng.choice(seeds.size, size=min(self.n_components, seeds.size), replace=False)]
        self.components_ = project_l2_ball_nonneg(
            normalize(self.P_[:, pick].T, norm="l2").T.toarray()
        )
        self.codes_ = np.zeros((self.components_.shape[1], n))
        self._alternate()
        return self

    def transform(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Non-negative lasso codes of the rows of ``X`` (shape ``n x k``)."""
        check_is_fitted(self, "components_")
        P = self._columns(X)
        return self._code(P, self._atoms(P.shape[0])).T

    def score_samples(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Novelty score: the l2 objective value of each row of ``X`` (higher is more novel)."""
        check_is_fitted(self, "components_")
        P = self._columns(X)
        A = self._atoms(P.shape[0])
        return l2_objective(P, A, self._code(P, A), self.alpha)

    def partial_fit(
        self, X: sp.spmatrix | np.ndarray, y: None = None, scores: np.ndarray | None = None
    ) -> L2BatchNovelty:
        """One time step: add the documents, grow the dictionary by ``eta``, alternate over all.

        ``scores``: :meth:`score_samples` of ``X`` under the current dictionary when the caller
        has them already (Algorithm 8's detection step precedes its dictionary step); they pick
        the ``eta`` new atoms instead of coding the step's documents a second time.
        """
        if not hasattr(self, "components_"):
            return self.fit(X)
        P_new = self._columns(X)
        scores = _checked_scores(scores, P_new.shape[1])
        m = P_new.shape[0]
        A = self._atoms(m)
        worst = _worst_documents(P_new, scores, self.eta, lambda: self.score_samples(X))
        if worst.size:
            new_atoms = normalize(P_new[:, worst].T, norm="l2").T.toarray()
            A = np.hstack([A, new_atoms])
        old_p = self.P_
        self.P_ = sp.hstack(
            [
                sp.csc_matrix((old_p.data, old_p.indices, old_p.indptr), shape=(m, old_p.shape[1])),
                P_new,
            ],
            format="csc",
        )
        self.components_ = A
        X0 = np.zeros((A.shape[1], self.P_.shape[1]))
        X0[: self.codes_.shape[0], : self.codes_.shape[1]] = self.codes_
        self.codes_ = X0
        self._alternate()
        return self

    def objective(self) -> float:
        """Sum over stored documents of ``1/2 ||p_i - A x_i||^2 + alpha ||x_i||_1``."""
        check_is_fitted(self, "components_")
        return float(l2_objective(self.P_, self.components_, self.codes_, self.alpha).sum())

    def _columns(self, X: sp.spmatrix | np.ndarray) -> sp.csc_matrix:
        """Checked documents as columns, at least as many rows as the dictionary."""
        return _csc_columns(_check_documents(X, self, n_features_in=self.n_features_in_))

    def _atoms(self, m: int) -> np.ndarray:
        return _pad_rows(self.components_, m)


def _seed_atoms(P_new: sp.csc_matrix, cols: np.ndarray, n_terms: int | None) -> np.ndarray:
    """Documents ``cols`` of ``P_new`` kept to their ``n_terms`` largest weights, unit l1 (as
    the ONLINE detector seeds its dense atoms)."""
    S = _truncate_columns(P_new[:, cols].toarray(), n_terms)
    return S / np.maximum(S.sum(axis=0, keepdims=True), 1e-12)


class BatchL1Novelty(TransformerMixin, BaseEstimator):
    """BATCH-IMPL (Algorithm 7): l1 dictionary re-learned on all documents at every step.

    :meth:`fit` builds the warm-up dictionary exactly as the ONLINE detector does (same atom
    seeding, same alternations, same ``random_state``), so both start from the same ``A``. Each
    :meth:`partial_fit` (one time step) appends the documents to the history ``P_[t]``, adds
    ``eta`` atoms seeded from the step's worst-represented documents, and runs
    ``n_alternations`` rounds of (a) Algorithm 5 codes of every document (warm-started from the
    previous codes) and (b) ``dict_iter`` iterations of Algorithm 6 on the whole history. The
    novelty score is the optimal value of Eq. (3) under the current dictionary.

    Parameters
    ----------
    n_components, lam, beta, phi, gamma, coding_tol, coding_max_iter, coding_polish_after,
    n_init_iter, init_dict_iter, atom_terms, dtype, random_state : as in
        :class:`~sparsewatch.models.novelty.OnlineL1NoveltyDetector` (initialisation and coding;
        the polishing LP after 300 Algorithm 5 iterations by default, as the paper's ONLINE is
        run in the evaluation).
    eta : atoms added per step.
    n_alternations : Algorithm 5 / Algorithm 6 rounds per step; the default repeats, at every step
        and on all documents so far, the effort that built the warm-up dictionary
        (``n_init_iter`` rounds), warm-started.
    dict_iter : Algorithm 6 iterations per round (default: ``init_dict_iter``).
    over_weight : the weighted l1 loss of the ONLINE detector (1 = Eq. (3), the paper's BATCH).

    Attributes
    ----------
    components_ : (m, k) dictionary; codes_ : CSR (n, k) codes of the stored documents; P_ :
    CSC (m, n) the stored documents; n_features_in_ : terms the dictionary has rows for (a wider
    ``X`` appends new terms, a narrower one raises ``ValueError``).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.novelty_baselines import BatchL1Novelty
    >>> rng = np.random.default_rng(0)
    >>> X = np.hstack([rng.random((40, 8)) ** 3, np.zeros((40, 4))])  # terms 8-11 unused
    >>> X /= X.sum(axis=1, keepdims=True)  # unit-l1 documents (rows)
    >>> new = np.full((1, 12), 0.25)
    >>> new[0, :8] = 0.0  # a document on the unused terms only: a new story
    >>> model = BatchL1Novelty(n_components=10).fit(X[:30])
    >>> scores = model.score_samples(np.vstack([X[30:], new]))  # Eq. (3): higher = more novel
    >>> int(np.argmax(scores)), round(float(scores[-1]), 3)  # nothing explains it: score 1
    (10, 1.0)
    >>> model = model.partial_fit(np.vstack([X[30:], new]))  # all 41 documents, eta = 10 atoms
    >>> model.components_.shape, model.P_.shape
    ((12, 20), (12, 41))
    >>> bool(model.score_samples(new)[0] < 0.5)  # the story is known now
    True
    """

    # learned state (fit)
    components_: np.ndarray

    def __init__(
        self,
        n_components: int = 100,
        lam: float = 0.1,
        beta: float = 5.0,
        phi: float = 5.0,
        gamma: float = 1.89,
        coding_tol: float = 1e-3,
        coding_max_iter: int = 2000,
        coding_polish_after: int | None = 300,
        n_init_iter: int = 5,
        init_dict_iter: int = 20,
        atom_terms: int | None = 10,
        eta: int = 10,
        n_alternations: int = 5,
        dict_iter: int = 20,
        over_weight: float = 1.0,
        dtype: type = np.float32,
        random_state: int | None = 0,
    ) -> None:
        self.n_components = n_components
        self.lam = lam
        self.beta = beta
        self.phi = phi
        self.gamma = gamma
        self.coding_tol = coding_tol
        self.coding_max_iter = coding_max_iter
        self.coding_polish_after = coding_polish_after
        self.n_init_iter = n_init_iter
        self.init_dict_iter = init_dict_iter
        self.atom_terms = atom_terms
        self.eta = eta
        self.n_alternations = n_alternations
        self.dict_iter = dict_iter
        self.over_weight = over_weight
        self.dtype = dtype
        self.random_state = random_state

    def __sklearn_tags__(self) -> Tags:
        return tfidf_model_tags(super().__sklearn_tags__(), self.dtype)

    @property
    def n_features_in_(self) -> int:
        """Terms the dictionary has rows for (grows with the vocabulary)."""
        return int(self.components_.shape[0])

    def _columns(self, X: sp.spmatrix | np.ndarray) -> sp.csc_matrix:
        """Checked documents as columns, at least as many rows as the dictionary (``ValueError``
        for invalid input, before any state changes)."""
        X = _check_documents(X, self, n_features_in=self.n_features_in_)
        return _as_columns(X, self.dtype)

    def _code(
        self, P: sp.csc_matrix, A: np.ndarray, x0: sp.spmatrix | None = None
    ) -> L1CodingResult:
        return l1_code(self, P, A, x0)

    def fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> BatchL1Novelty:
        """Warm-up: the ONLINE detector's initial dictionary on ``X``; ``X`` starts the history."""
        X = _check_documents(X, self)
        init = OnlineL1NoveltyDetector(
            n_components=self.n_components,
            lam=self.lam,
            beta=self.beta,
            phi=self.phi,
            gamma=self.gamma,
            coding_tol=self.coding_tol,
            coding_max_iter=self.coding_max_iter,
            coding_polish_after=self.coding_polish_after,
            n_init_iter=self.n_init_iter,
            init_dict_iter=self.init_dict_iter,
            atom_terms=self.atom_terms,
            over_weight=self.over_weight,
            dtype=self.dtype,
            random_state=self.random_state,
        ).fit(X)
        A = init.components_
        self.components_ = (A if isinstance(A, np.ndarray) else A.toarray()).astype(self.dtype)
        self.P_ = _as_columns(X, self.dtype)
        self.codes_ = self._code(self.P_, self.components_).codes
        return self

    def _pad(self, m: int) -> None:
        """Vocabulary growth: zero rows appended to the dictionary and the history."""
        if self.components_.shape[0] < m:
            self.components_ = _pad_rows(self.components_, m)
        if self.P_.shape[0] < m:
            P = self.P_
            self.P_ = sp.csc_matrix((P.data, P.indices, P.indptr), shape=(m, P.shape[1]))

    def code(self, X: sp.spmatrix | np.ndarray) -> L1CodingResult:
        """Algorithm 5 result (codes, objective, reconstruction error) for the rows of ``X``."""
        check_is_fitted(self, "components_")
        P = self._columns(X)
        # new vocabulary rows are zero in the dictionary; padded here, the model is left as fitted
        return self._code(P, _pad_rows(self.components_, P.shape[0]))

    def transform(self, X: sp.spmatrix | np.ndarray) -> sp.csr_matrix:
        """Non-negative l1 codes (``n x k``)."""
        return self.code(X).codes

    def score_samples(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Novelty scores: the optimal value of Eq. (3) (higher is more novel)."""
        return self.code(X).objective

    def partial_fit(
        self, X: sp.spmatrix | np.ndarray, y: None = None, scores: np.ndarray | None = None
    ) -> BatchL1Novelty:
        """One time step of Algorithm 7 (history grows, ``eta`` atoms added, alternations).

        ``scores``: :meth:`score_samples` of ``X`` under the current dictionary when the caller
        has them already (Algorithm 7's detection step precedes its dictionary step); they pick
        the ``eta`` new atoms instead of coding the step's documents a second time.
        """
        if not hasattr(self, "components_"):
            return self.fit(X)
        P_new = self._columns(X)
        scores = _checked_scores(scores, P_new.shape[1])
        self._pad(P_new.shape[0])
        n_old = self.P_.shape[1]
        codes = self.codes_
        worst = _worst_documents(
            P_new, scores, self.eta, lambda: self._code(P_new, self.components_).objective
        )
        if worst.size:
            atoms = project_l1_ball_nonneg(_seed_atoms(P_new, worst, self.atom_terms))
            self.components_ = np.hstack([self.components_, atoms.astype(self.dtype)])
            codes = sp.hstack([codes, sp.csr_matrix((n_old, atoms.shape[1]))], format="csr")
        self.P_ = sp.hstack([self.P_, P_new], format="csc")
        codes = sp.vstack(
            [codes, sp.csr_matrix((P_new.shape[1], self.components_.shape[1]))], format="csr"
        )
        for _ in range(self.n_alternations):
            codes = self._code(self.P_, self.components_, codes).codes
            self.components_ = np.asarray(
                l1_dictionary_update(
                    self.P_,
                    codes.T,
                    self.components_,
                    beta=self.beta,
                    n_iter=self.dict_iter,
                    over_weight=self.over_weight,
                ),
                dtype=self.dtype,
            )
        self.codes_ = self._code(self.P_, self.components_, codes).codes
        return self

    def objective(self) -> float:
        """Eq. (3) summed over the history with the stored codes."""
        check_is_fitted(self, "components_")
        R = self.P_.toarray() - self.components_ @ self.codes_.T.toarray()
        loss = weighted_l1_loss(R, self.over_weight).sum()
        return float(loss + self.lam * self.codes_.sum())
