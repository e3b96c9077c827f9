"""ONLINE novel-document detection (Kasiviswanathan et al., NIPS 2012, Algorithm 3).

For every window ``P_t`` (unit-l1 TF-IDF columns): code each document against the dictionary
``A_t`` with Algorithm 5 (:func:`~sparsewatch.models.l1_coding.l1_sparse_code`), its novelty score
is the optimal value ``min_{x>=0} ||p - A_t x||_1 + lambda ||x||_1`` (Eq. (3)); flag the documents
above a threshold ``zeta`` or the top ``q`` of the window; then take one OIADMM step (Algorithm 2,
:class:`~sparsewatch.models.oiadmm.OIADMM`) with those codes. The dictionary is initialised on a
warm-up window by alternating minimisation (Algorithms 5 and 6), as the paper does.

:class:`OnlineL1NoveltyDetector` is the estimator on matrices (scikit-learn convention: ``X`` is
``n_docs x n_terms``; internally ``P = X^T``). :class:`~sparsewatch.models.window_detector.Detector`
composes streaming features (its :data:`~sparsewatch.models.window_detector.DEFAULT_FEATURES`),
scoring, flagging and the update for one closed window of raw texts, with no I/O.

Default representation and settings (why)
-----------------------------------------
The screening rule of DESIGN.md says an atom can help a document only when more than
``(||a_j||_1 + lambda) / 2`` of the atom's mass lies on the document's terms. Broad atoms (whole
documents, topic distributions) never pass, so most scores sit at exactly 1 (ties) and AUC falls
towards 0.5; on short documents even 5-term atoms rarely pass. The defaults keep Algorithms 2, 3,
5 and 6 at the core and change what they are given (measured in
``benchmarks/novelty_quality.md``: the ``tuning`` ablations and the exploration table list every
setting tried):

* **dictionary growth** (``grow_threshold = 0.7``, up to ``grow_size = 1000`` atoms per window,
  ``max_components = 1500`` with least-recently-used replacement): after the window's OIADMM
  step, the documents no atom explains seed new atoms (their ``atom_terms = 8`` heaviest terms),
  so the next document of the same story is explained. The largest lever (synthetic tweets:
  0.76 pooled AUC without it, 0.94 with it). OIADMM still updates every atom each window, but
  its effect on the AUCs is within their errors (the ablation without it scores the same);
* **weighted l1 loss** ``over_weight = 0.1``: mass an atom puts on words the document lacks costs
  ``0.1`` instead of 1, so an atom is usable once a small share of its mass lies on the
  document's words (``(1 + w) m_j > w ||a_j||_1 + lambda``); unexplained document mass still
  costs 1;
* ``lambda = 0.01``: using atoms is cheap, so a known story's document is explained almost fully;
* **TF-IDF weighted by the past** (``idf_power = 1``, ``past_idf``): a word's weight says how
  surprising it is given the earlier windows; words new in the window weigh most, and no atom
  covers them (their dictionary rows are zero), so their mass is unexplained;
* **screening-margin tie-break** (``score_margin``): the documents no atom can explain rank by
  how far the best atom is from helping them;
* documents keep all their terms (``max_terms_per_doc = None``; tweets have fewer than 20 anyway).
  Truncating them to their 20 most salient terms, the default until session seventeen, put
  news-length documents that mix a known story with a new one among the wholly new documents
  (past idf gives the never-seen words most of the weight, so the known half, the part an atom
  explains, was cut away): 0.0023 below nearest neighbour on the news-length synthetic stream
  under rule none, tied (0.0002 below, standard error 0.001) with all terms; on Reuters rule none
  it scored 0.614 against 0.549 now (12 positives, standard error 0.087; nearest neighbour
  0.534), and coding long documents whole costs about twice the time
  (``benchmarks/novelty_mixed_documents.py``);
* ``k = 200`` initial atoms seeded from warm-up exemplars and refined by ``n_init_iter = 5``
  rounds of Algorithms 5 and 6 (100 scored 0.934 on the synthetic tweets, level with nearest
  neighbour; 200 scores 0.943, with Reuters unchanged; 300 and 600 score higher on tweets but
  lower on Reuters).

With these defaults the :class:`~sparsewatch.models.window_detector.Detector` scores pooled AUC
0.943 on the synthetic tweet stream (exact nearest-neighbour first-story detection 0.934; the
previous defaults 0.62), matches nearest neighbour on the news-length synthetic stream and beats
it on Reuters-21578, under both novelty rules.
``flag="top_q"`` flags every document scoring at or above the ``ceil(q n)``-th largest score
(ties at the cut are all flagged), ``n`` counting the documents with at least one term: a document
without any (no token, or only numbers) scores 0 and is never flagged. ``q n`` is exact, of the
decimal ``q`` is written as in its own precision: a ``float``, float32 or float64 ``0.1`` flags 10
of 100 documents (``grow_fraction`` is read the same way). A window too small for a
top-``q`` cut (``q n < 1``: a handful of documents that an idle stream's timeout closed) is
flagged against the last threshold used, as late documents are: rounding ``q n`` up to one
document flagged the best of every such window, so a quiet stream raised an alert per window.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import Tags, check_random_state
from sklearn.utils.validation import (
    assert_all_finite,
    check_array,
    check_is_fitted,
    check_non_negative,
)
from sparsewatch.models._validation import tfidf_model_tags
from sparsewatch.models.l1_coding import L1CodingResult, l1_sparse_code
from sparsewatch.models.oiadmm import OIADMM, l1_dictionary_update

__all__ = ["OnlineL1NoveltyDetector"]


def _check_documents(
    X: sp.spmatrix | np.ndarray,
    estimator: BaseEstimator,
    *,
    n_features_in: int | None = None,
    non_negative: bool = True,
) -> sp.spmatrix | np.ndarray:
    """``X`` (documents x terms) checked as scikit-learn checks input, values left as they are.

    ``ValueError`` for input that is not 2-D, complex, non-numeric, NaN or infinite, negative
    (``non_negative``: TF-IDF), and, for ``fit`` (``n_features_in`` ``None``), without documents
    or terms. Once fitted (``n_features_in`` given) an empty window passes (a streaming step with
    no documents learns nothing), and so does a WIDER ``X``: its extra columns are terms a growing
    vocabulary appended since (an append-only vocabulary keeps the meaning of the others); a
    NARROWER one does not (the columns it lacks cannot be told apart from misaligned input).
    Checked before any model state changes.
    """
    fitting = n_features_in is None
    X = check_array(
        X,
        accept_sparse=("csr", "csc", "coo"),  # others (dok, lil, ...) to CSR, checkable
        dtype="numeric",
        ensure_min_samples=1 if fitting else 0,
        ensure_min_features=1 if fitting else 0,
        estimator=estimator,
        input_name="X",
    )
    if non_negative and 0 not in X.shape:  # (scikit-learn's check fails on an empty dense X)
        check_non_negative(X, type(estimator).__name__)
    if not fitting and X.shape[1] < n_features_in:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} is expecting "
            f"{n_features_in} features as input (or more: a wider X appends new terms)"
        )
    return X


def _decimal(value: float) -> Fraction:
    """``value`` as the decimal it is written as: the shortest one that reads back as it in its
    own float precision. A float32 ``0.1`` is ``0.1`` (as a float64 it is 0.10000000149, and its
    top-``q`` cut of 100 documents flagged 11); a product with a count is then exact (in float64
    ``0.07 * 100`` is 7.000000000000001 and ``0.29 * 100`` is 28.999999999999996)."""
    v = np.asarray(value)[()]
    return Fraction(str(v if isinstance(v, np.floating) else np.float64(v)))


def _as_columns(X: sp.spmatrix | np.ndarray, dtype: type) -> sp.csc_matrix:
    """Documents (rows of a checked ``X``, :func:`_check_documents`) as the columns of a CSC
    ``P``; ``ValueError`` for entries beyond the range of ``dtype`` (infinite after the cast)."""
    P = sp.csc_matrix(sp.csr_matrix(X).T, dtype=dtype)
    assert_all_finite(P, input_name="X")
    return P


def _nonzero_columns(P: sp.csc_matrix) -> np.ndarray:
    """Indices of the columns of ``P`` with a non-zero entry (documents with a term): the only
    ones an atom can be seeded from (a zero column seeds a zero atom, which no document can use
    and which, at the dictionary's cap, took the place of a real one)."""
    return np.flatnonzero(np.asarray(abs(P).sum(axis=0)).ravel() > 0)


def _truncate_columns(M: np.ndarray, t: int | None) -> np.ndarray:
    """Keep the ``t`` largest entries of every column of a dense matrix (others set to 0)."""
    if t is None or t >= M.shape[0]:
        return M
    idx = np.argpartition(-M, t - 1, axis=0)[:t]
    out = np.zeros_like(M)
    cols = np.arange(M.shape[1])
    out[idx, cols] = M[idx, cols]
    return out


def _truncate_columns_sparse(S: sp.spmatrix, t: int | None) -> sp.csc_matrix:
    """:func:`_truncate_columns` for a sparse matrix (ties: the lower row), without densifying:
    seeding a window's 1,000 atoms densely cost ~100 MB of transient memory at 6,000 terms."""
    S = sp.csc_matrix(S)
    S.eliminate_zeros()
    S.sort_indices()
    if t is None:
        return S
    col = np.repeat(np.arange(S.shape[1]), np.diff(S.indptr))
    order = np.lexsort((S.indices, -S.data, col))  # by column, then value (largest first)
    rank = np.arange(order.size) - S.indptr[col[order]]
    keep = np.sort(order[rank < t])
    indptr = np.r_[0, np.cumsum(np.bincount(col[keep], minlength=S.shape[1]))]
    return sp.csc_matrix((S.data[keep], S.indices[keep], indptr), shape=S.shape)


def _same_layout(a: OIADMM, b: OIADMM) -> bool:
    """Whether two OIADMM models hold their dictionary and dual alike (float type, dense or
    CSC)."""
    return bool(np.dtype(a.dtype) == np.dtype(b.dtype) and bool(a.sparse) == bool(b.sparse))


def _converted_components(
    A: np.ndarray | sp.spmatrix, target: OIADMM
) -> np.ndarray | sp.csc_matrix:
    """Dictionary ``A`` as :meth:`OIADMM.set_state` of ``target`` restores it from a checkpoint
    of ``A`` (CSC entries cast to ``target.dtype``, then ``target``'s layout), bit for bit."""
    C = sp.csc_matrix(A)
    cast = sp.csc_matrix((np.array(C.data, dtype=target.dtype), C.indices, C.indptr), shape=C.shape)
    return target._layout(cast)


def _concatenate(parts: Sequence[L1CodingResult]) -> L1CodingResult:
    """One :class:`L1CodingResult` of the documents of ``parts`` in order."""
    return L1CodingResult(
        sp.vstack([r.codes for r in parts], format="csr"),
        np.concatenate([r.objective for r in parts]),
        np.concatenate([r.reconstruction_error for r in parts]),
        np.concatenate([r.gap for r in parts]),
        np.concatenate([r.converged for r in parts]),
        max(r.n_iter for r in parts),
        sum(r.n_screened for r in parts),
        None
        if any(r.screening_margin is None for r in parts)
        else np.concatenate([r.screening_margin for r in parts]),
        sum(r.n_polished for r in parts),
    )


def l1_code(
    model: BaseEstimator,
    P: sp.csc_matrix,
    A: np.ndarray | sp.spmatrix,
    x0: sp.spmatrix | None = None,
    tol: float | None = None,
    polish: bool = True,
) -> L1CodingResult:
    """Algorithm 5 on the columns of ``P`` with the coding hyper-parameters of ``model`` (ONLINE
    or BATCH: ``lam``, ``phi``, ``gamma``, ``coding_tol`` unless ``tol`` is given,
    ``coding_max_iter``, ``coding_polish_after`` unless ``polish`` is false, ``over_weight``)."""
    return l1_sparse_code(
        P,
        A,
        model.lam,
        phi=model.phi,
        gamma=model.gamma,
        tol=model.coding_tol if tol is None else tol,
        max_iter=model.coding_max_iter,
        polish_after=model.coding_polish_after if polish else None,
        x0=x0,
        over_weight=model.over_weight,
    )


class OnlineL1NoveltyDetector(TransformerMixin, BaseEstimator):
    """l1 dictionary novelty detector: Algorithm 3 with Algorithms 2, 5 and 6.

    Parameters
    ----------
    n_components : number of atoms ``k`` at initialisation (at most one per warm-up document with
        a term, and at most ``max_components``).
    lam : l1 penalty ``lambda`` of Eq. (3) (coding and scoring).
    beta, tau : OIADMM penalty and step (``None`` = ``1 / (2 Psi_max(X_t))``).
    phi, gamma : Algorithm 5 parameters; coding_tol, coding_max_iter : its stopping rule;
        coding_polish_after : Algorithm 5 iterations before the documents still iterating are
        solved exactly as one LP (``polish_after`` of
        :func:`~sparsewatch.models.l1_coding.l1_sparse_code`). With a grown dictionary of
        short atoms and a small ``lam`` nearly no document converges within 300 iterations
        (the LP then does all the work), so the default stops after 30.
    n_init_iter : alternations (Algorithm 5 then Algorithm 6) at initialisation;
    init_dict_iter : Algorithm 6 steps per alternation.
    atom_terms : seed atoms (warm-up and growth) are documents truncated to their ``atom_terms``
        largest weights (``None``: whole documents), then l1-normalised.
    flag : ``"top_q"`` (the top ``top_q`` fraction of each window is novel; a window with fewer
        than ``1 / top_q`` documents is judged by the last threshold) or ``"threshold"``
        (score ``> threshold``, the paper's ``zeta``).
    grow_threshold : a document scoring above it is "poorly represented"; when more than
        ``grow_fraction`` of a window is, up to ``grow_size`` new atoms are seeded from the worst
        documents, after the window's OIADMM step; beyond ``max_components`` they replace the
        least recently used atoms. ``None`` disables growth.
    max_components : cap on the number of atoms, grown or not. A model restored with a lower
        cap than it was learnt with (:meth:`set_state`) drops its least recently used atoms
        down to it after its next window's update (:meth:`partial_fit`).
    score_margin : add the screening margin (:class:`L1CodingResult`) to the score: documents no
        atom can explain then rank by how far they are from any atom instead of tying at 1
        (scores then lie in ``[0, 1 + over_weight + lam]``).
    over_weight : weight ``w`` of over-representation in the l1 loss (coding, scoring, OIADMM
        and Algorithm 6; :func:`~sparsewatch.models.l1_coding.weighted_l1_loss`); 1 = Eq. (3).
    update_steps : OIADMM steps per window on that window's fixed codes (1 = Algorithm 3 as
        published; more moves the dictionary further per window at proportional cost).
    update_passes : passes over each window: after the OIADMM step(s) of a pass the window is
        re-coded (Algorithm 5) against the updated dictionary for the next pass (1 = Algorithm 3
        as published). Scores always come from the coding before the window's updates. Three
        passes bring the paper's ONLINE within 0.02 AUC of BATCH-IMPL on the synthetic tweet
        stream at a fraction of its time, not on Reuters (``benchmarks/novelty_quality.md``).
    grow_first : seed the window's new atoms before its OIADMM step(s) instead of after, so that
        with ``update_passes`` > 1 the later passes re-code the window with them and OIADMM
        refines them on the documents that seeded them (their codes in the first pass are
        zero, so with one pass this changes nothing).
    recode_tol : with ``update_passes`` > 1, the relative duality-gap tolerance of the
        re-codings between passes, warm-started from the previous pass's codes and without the
        exact LP polish: they only feed the next (inexact) OIADMM step, never a score. ``None``:
        re-coded as the window's scores are (``coding_tol``, cold start, polished). ``1e-2``
        makes 3 passes about 1.4x faster at the same AUC (``benchmarks/novelty_quality.md``).
    max_step_documents : most documents one OIADMM step (Algorithm 2), one coding call and the
        initialisation take. A larger window is coded in consecutive blocks of near-equal size
        (document order) and learnt in one step per block, Algorithm 2 with finer time steps
        (its scores and flags are still the whole window's); the initialisation uses the last
        ``max_step_documents`` documents (the last with a term when none of those has one).
        The step's ``n x m`` arrays and the dual ``Delta`` (``m x n``, dense once filled, part
        of every checkpoint) then stay bounded: one step over a window of 7,367 Reuters
        stories at 20,000 terms peaked at 3 GB and left a 577 MB state. ``None``: no bound
        (Algorithm 3 as published, one step a window).
    dtype : float type of the dictionary and the iterations; random_state : seeding of atoms.

    Attributes
    ----------
    components_ : (m, k) dictionary, CSC when it grows (``grow_threshold`` set: atoms of a few
    terms), else dense; oiadmm_ : the :class:`OIADMM` state;
    n_features_in_ : current vocabulary size ``m``; threshold_ : last threshold used;
    threshold_top_q_ : whether it was a window's top-``q`` cut (else ``threshold``);
    threshold_score_margin_ : the ``score_margin`` it was used with.

    ``score_samples`` is "higher = more novel" (the opposite sign of scikit-learn's outlier
    detectors). Input must be non-negative (TF-IDF rows, ideally unit l1), dense or sparse; a
    wider ``X`` than the dictionary holds new terms (zero rows for them), a narrower one raises
    ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.novelty import OnlineL1NoveltyDetector
    >>> rng = np.random.default_rng(0)
    >>> X = np.hstack([rng.random((40, 8)) ** 3, np.zeros((40, 4))])  # terms 8-11 unused
    >>> X /= X.sum(axis=1, keepdims=True)  # unit-l1 documents (rows)
    >>> new = np.full((1, 12), 0.25)
    >>> new[0, :8] = 0.0  # a document on the unused terms only: a new story
    >>> model = OnlineL1NoveltyDetector(n_components=10).fit(X[:30])
    >>> model.components_.shape  # terms x atoms
    (12, 10)
    >>> scores = model.score_samples(np.vstack([X[30:], new]))  # higher = more novel
    >>> int(np.argmax(scores))
    10
    >>> model.transform(X[30:]).shape  # sparse non-negative codes
    (10, 10)
    >>> model = model.partial_fit(np.vstack([X[30:], new]))  # learns the window, grows an atom
    >>> model.components_.shape
    (12, 11)
    >>> bool(model.score_samples(new)[0] < 0.1)  # the story is known now
    True
    """

    def __init__(
        self,
        n_components: int = 200,
        lam: float = 0.01,
        beta: float = 5.0,
        tau: float | None = None,
        phi: float = 5.0,
        gamma: float = 1.89,
        coding_tol: float = 1e-3,
        coding_max_iter: int = 5000,
        coding_polish_after: int | None = 30,
        n_init_iter: int = 5,
        init_dict_iter: int = 20,
        atom_terms: int | None = 8,
        flag: str = "top_q",
        threshold: float = 0.95,
        top_q: float = 0.1,
        grow_threshold: float | None = 0.7,
        grow_fraction: float = 0.0,
        grow_size: int = 1000,
        max_components: int = 1500,
        score_margin: bool = True,
        update_steps: int = 1,
        update_passes: int = 1,
        grow_first: bool = False,
        recode_tol: float | None = None,
        max_step_documents: int | None = 1000,
        over_weight: float = 0.1,
        dtype: type = np.float32,
        random_state: int | None = 0,
    ) -> None:
        self.n_components = n_components
        self.lam = lam
        self.beta = beta
        self.tau = tau
        self.phi = phi
        self.gamma = gamma
        self.coding_tol = coding_tol
        self.coding_max_iter = coding_max_iter
        self.coding_polish_after = coding_polish_after
        self.n_init_iter = n_init_iter
        self.init_dict_iter = init_dict_iter
        self.atom_terms = atom_terms
        self.flag = flag
        self.threshold = threshold
        self.top_q = top_q
        self.grow_threshold = grow_threshold
        self.grow_fraction = grow_fraction
        self.grow_size = grow_size
        self.max_components = max_components
        self.score_margin = score_margin
        self.update_steps = update_steps
        self.update_passes = update_passes
        self.grow_first = grow_first
        self.recode_tol = recode_tol
        self.max_step_documents = max_step_documents
        self.over_weight = over_weight
        self.dtype = dtype
        self.random_state = random_state

    def __sklearn_tags__(self) -> Tags:
        return tfidf_model_tags(super().__sklearn_tags__(), self.dtype)

    # ----------------------------------------------------------------- helpers
    @property
    def components_(self) -> np.ndarray | sp.csc_matrix:
        """The dictionary (``m x k``) in the float type and layout of the current ``dtype`` and
        ``grow_threshold`` (CSC when it is set): after :meth:`set_params` changed either on a
        fitted model, a converted copy, the dictionary a model restored from a checkpoint under
        them holds (:meth:`set_state`), so both score alike; :meth:`partial_fit` converts the
        stored one (:meth:`_synced_oiadmm`)."""
        target = self._oiadmm()
        if _same_layout(self.oiadmm_, target):
            return self.oiadmm_.components_
        return _converted_components(self.oiadmm_.components_, target)

    @property
    def n_features_in_(self) -> int:
        return int(self.oiadmm_.components_.shape[0])

    def _docs_as_columns(self, X: sp.spmatrix | np.ndarray) -> sp.csc_matrix:
        """Documents as columns, at least as many rows as the dictionary (more rows than the
        dictionary's are terms new to it; the model is left as it is)."""
        return _as_columns(_check_documents(X, self, n_features_in=self.n_features_in_), self.dtype)

    def padded_components(self, m: int) -> np.ndarray | sp.csc_matrix:
        """The dictionary with zero rows appended up to ``m`` terms (new terms: no atom has
        mass on them), as a padded copy for scoring: only :meth:`partial_fit` and
        :meth:`remap_features` grow the model."""
        A = self.components_
        if A.shape[0] >= m:
            return A
        if isinstance(A, np.ndarray):
            return np.vstack([A, np.zeros((m - A.shape[0], A.shape[1]), dtype=A.dtype)])
        return sp.csc_matrix((A.data, A.indices, A.indptr), shape=(m, A.shape[1]))

    def _blocks(self, n: int) -> list[slice]:
        """Consecutive column blocks of near-equal size, at most ``max_step_documents`` each
        (one block for ``n`` within the bound)."""
        cap = self.max_step_documents
        if cap is not None and cap < 1:
            raise ValueError(f"max_step_documents must be >= 1 or None, got {cap}")
        if cap is None or n <= cap:
            return [slice(0, n)]
        bounds = np.linspace(0, n, -(-n // cap) + 1).round().astype(int)
        return [slice(a, b) for a, b in itertools.pairwise(bounds.tolist())]

    def _code(
        self,
        P: sp.csc_matrix,
        A: np.ndarray | sp.spmatrix,
        x0: sp.spmatrix | None = None,
        tol: float | None = None,
        polish: bool = True,
    ) -> L1CodingResult:
        """Algorithm 5 for the columns of ``P``, a block of documents at a time
        (:meth:`_blocks`; each document's problem is its own, so only the bound on memory
        changes); ``tol`` (default ``coding_tol``) and ``polish`` for the re-codings."""
        x0 = None if x0 is None else sp.csr_matrix(x0)
        parts = [
            l1_code(self, P[:, b], A, None if x0 is None else x0[b], tol=tol, polish=polish)
            for b in self._blocks(P.shape[1])
        ]
        return parts[0] if len(parts) == 1 else _concatenate(parts)

    def _synced_oiadmm(self) -> OIADMM:
        """``oiadmm_`` under the current hyper-parameters (``beta``, ``tau``, ``over_weight``,
        ``dtype``, and ``grow_threshold`` for the layout), as :meth:`set_state` builds it from a
        checkpoint: :meth:`set_params` on a fitted model changed the coding at once but never
        reached the dictionary update, so a live model and one restored from its checkpoint
        under the same parameters learnt different dictionaries. A new float type or layout
        goes through the checkpoint's arrays (:meth:`OIADMM.get_state`), exactly as a restore
        does, and leaves ``oiadmm_`` as it is (a failed conversion changes nothing); otherwise
        ``oiadmm_`` itself is returned with those step parameters set."""
        target = self._oiadmm()
        if not _same_layout(self.oiadmm_, target):
            return target.set_state(self.oiadmm_.get_state())
        return self.oiadmm_.set_params(
            beta=target.beta, tau=target.tau, over_weight=target.over_weight
        )

    def _checked_codes(
        self, codes: sp.spmatrix | np.ndarray, scores: np.ndarray, n_docs: int
    ) -> tuple[sp.csr_matrix, np.ndarray]:
        """``codes`` (``n_docs x k``, ``k`` the atoms now) and ``scores`` (``n_docs``) of a
        scoring pass handed to :meth:`partial_fit`, checked before any state changes:
        ``ValueError`` for a wrong shape or NaN or infinite entries (the OIADMM step refused
        them only after the window had been counted, its atoms marked used and the vocabulary
        grown)."""
        codes = check_array(
            codes,
            accept_sparse=("csr", "csc", "coo"),
            dtype="numeric",
            ensure_2d=True,
            ensure_min_samples=0,
            ensure_min_features=0,
            input_name="codes",
        )
        k = self.oiadmm_.components_.shape[1]
        if codes.shape != (n_docs, k):
            raise ValueError(f"codes must be (documents, atoms) = {(n_docs, k)}, got {codes.shape}")
        scores = check_array(
            scores, ensure_2d=False, dtype="numeric", ensure_min_samples=0, input_name="scores"
        )
        if scores.shape != (n_docs,):
            raise ValueError(f"scores must be ({n_docs},) (one per document), got {scores.shape}")
        return sp.csr_matrix(codes), scores

    def _oiadmm(self) -> OIADMM:
        return OIADMM(
            beta=self.beta,
            tau=self.tau,
            dtype=self.dtype,
            over_weight=self.over_weight,
            # A growing dictionary (up to max_components atoms of atom_terms terms each) is kept
            # CSC: a tenth of the memory at its cap; a fixed one (k = 100 in the paper's setting)
            # stays dense (a few megabytes, and 3-4% faster per window).
            sparse=self.grow_threshold is not None,
        )

    def _seed_atoms(self, P: sp.csc_matrix, cols: np.ndarray) -> np.ndarray | sp.csc_matrix:
        """Atoms of the ``atom_terms`` heaviest terms of documents ``cols``, unit l1 (sparse
        for a growing dictionary)."""
        if self.grow_threshold is None:
            S = _truncate_columns(P[:, cols].toarray().astype(self.dtype), self.atom_terms)
            return S / np.maximum(S.sum(axis=0, keepdims=True), 1e-12)
        S = _truncate_columns_sparse(P[:, cols].astype(self.dtype), self.atom_terms)
        sums = np.maximum(np.asarray(S.sum(axis=0)).ravel(), 1e-12)
        return sp.csc_matrix(S @ sp.diags((1.0 / sums).astype(self.dtype)))

    # ----------------------------------------------------------------- fitting
    def _check_params(self) -> None:
        """``ValueError`` naming the parameter, before any state changes, for an integer
        hyper-parameter that is not an integer in its range (``atom_terms=0`` seeded empty atoms,
        ``update_steps=0`` learnt nothing from a window, a negative ``coding_max_iter`` or
        ``n_init_iter`` ran as 0), a ``recode_tol`` neither ``None`` nor > 0, or a
        ``grow_fraction`` that is not a finite number >= 0."""
        at_least = {
            "n_components": (1, False),
            "max_components": (1, False),
            "coding_max_iter": (0, False),  # 0: the initial codes (then the polish) only
            "coding_polish_after": (0, True),
            "n_init_iter": (0, False),  # 0: the seed atoms as they are
            "init_dict_iter": (0, False),
            "atom_terms": (1, True),
            "grow_size": (0, False),
            "update_steps": (1, False),
            "update_passes": (1, False),
            "max_step_documents": (1, True),
        }
        for name, (low, optional) in at_least.items():
            value = getattr(self, name)
            if value is None and optional:
                continue
            what = f"{name} must be {'None or ' if optional else ''}"
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise ValueError(f"{what}an integer >= {low}, got {value!r}")
            if value < low:
                raise ValueError(f"{what}>= {low}, got {value!r}")
        if self.recode_tol is not None and not self.recode_tol > 0:
            raise ValueError(f"recode_tol must be > 0 or None, got {self.recode_tol}")
        if not isinstance(self.grow_fraction, numbers.Real) or not 0 <= self.grow_fraction < np.inf:
            raise ValueError(
                f"grow_fraction must be a finite number >= 0, got {self.grow_fraction!r}"
            )

    def fit(self, X: sp.spmatrix | np.ndarray, y: None = None) -> OnlineL1NoveltyDetector:
        """Initialise on a warm-up window by alternating minimisation (Algorithms 5 and 6)."""
        self._check_params()
        P = _as_columns(_check_documents(X, self), self.dtype)
        if self.max_step_documents is not None and P.shape[1] > self.max_step_documents:
            tail = P[:, P.shape[1] - self.max_step_documents :]
            # a tail of documents without a term (empty texts) has nothing to seed an atom
            # from: then the last documents with a term
            if _nonzero_columns(tail).size == 0:
                tail = P[:, _nonzero_columns(P)[-self.max_step_documents :]]
            P = tail
        rng = check_random_state(self.random_state)
        seeds = _nonzero_columns(P)  # atoms come from documents with a term
        if seeds.size == 0:
            raise ValueError("no document has a term: there is nothing to seed atoms from")
        k = min(self.n_components, seeds.size, self.max_components)
        A = self._seed_atoms(P, seeds[rng.choice(seeds.size, size=k, replace=False)])
        codes = None
        for _ in range(self.n_init_iter):
            codes = self._code(P, A, codes).codes
            A = l1_dictionary_update(
                P,
                codes.T,
                A,
                beta=self.beta,
                n_iter=self.init_dict_iter,
                over_weight=self.over_weight,
            )
        self.oiadmm_ = self._oiadmm().initialize(A)
        self._set_threshold(float(self.threshold), top_q=False)
        self.n_windows_ = 0
        self.atom_last_used_ = np.zeros(A.shape[1], dtype=np.int64)
        return self

    def partial_fit(
        self,
        X: sp.spmatrix | np.ndarray,
        y: None = None,
        codes: sp.spmatrix | None = None,
        scores: np.ndarray | None = None,
    ) -> OnlineL1NoveltyDetector:
        """OIADMM step(s) (Algorithm 2) on a window, ``update_passes`` times with the window
        re-coded in between; ``codes``/``scores`` reuse a scoring pass. A wider ``X`` than the
        dictionary means new terms: zero rows are appended to it and the dual first
        (:meth:`remap_features`). Invalid input (``codes`` and ``scores`` included) raises
        ``ValueError`` before any change. Hyper-parameters set since the last window apply to
        this one's update as they would after a restore (:meth:`_synced_oiadmm`)."""
        if not hasattr(self, "oiadmm_"):
            return self.fit(X)
        self._check_params()
        P = self._docs_as_columns(X)
        if codes is not None and scores is not None:
            codes, scores = self._checked_codes(codes, scores, P.shape[1])
        self.oiadmm_ = self._synced_oiadmm()
        m = self.n_features_in_
        if P.shape[0] > m:
            self.remap_features(np.arange(m), P.shape[0] - m)
        if codes is None or scores is None:
            res = self._code(P, self.components_)
            codes, scores = res.codes, self.novelty_scores(res)
        codes = sp.csr_matrix(codes)
        self.n_windows_ += 1
        self.atom_last_used_[np.unique(codes.indices)] = self.n_windows_
        Xt = codes.T
        if self.grow_first:
            k = self.components_.shape[1]
            self._maybe_grow(P, np.asarray(scores))
            # new atoms, and atoms replaced at the cap (unused by this window), have zero codes
            new = sp.csr_matrix((self.components_.shape[1] - k, Xt.shape[1]), dtype=Xt.dtype)
            Xt = sp.vstack([Xt, new], format="csr")
        blocks = self._blocks(P.shape[1])
        Xt = sp.csc_matrix(Xt)
        for p in range(self.update_passes):
            if p and self.recode_tol is None:
                Xt = sp.csc_matrix(self._code(P, self.components_).codes.T)
            elif p:
                res = self._code(P, self.components_, x0=Xt.T, tol=self.recode_tol, polish=False)
                Xt = sp.csc_matrix(res.codes.T)
            for b in blocks:
                for _ in range(self.update_steps):
                    self.oiadmm_.partial_fit(P[:, b], Xt[:, b])
        if not self.grow_first:
            self._maybe_grow(P, np.asarray(scores))
        self._drop_atoms_over_cap()
        return self

    def _drop_atoms_over_cap(self) -> None:
        """Keep the ``max_components`` most recently used atoms (ties: the lower index) of a
        dictionary above the cap, which only a model restored with a lowered cap has."""
        excess = self.components_.shape[1] - self.max_components
        if excess <= 0:
            return
        recent = np.argsort(-self.atom_last_used_, kind="stable")
        keep = np.sort(recent[: self.max_components])
        self.oiadmm_.keep_atoms(keep)
        self.atom_last_used_ = self.atom_last_used_[keep]

    def _maybe_grow(self, P: sp.csc_matrix, scores: np.ndarray) -> None:
        """Dictionary growth: atoms seeded from the worst-represented documents of the window.

        Once ``max_components`` atoms exist, new atoms replace the least recently used ones that
        this window did not use (so the dictionary, and memory, stay bounded on a long stream).
        """
        if self.grow_threshold is None:
            return
        # a document without a term in P (all its terms out of the vocabulary) scores its
        # out-of-vocabulary mass, but has nothing to seed an atom with
        poor = _nonzero_columns(P)
        poor = poor[scores[poor] > self.grow_threshold]
        if poor.size == 0 or poor.size <= _decimal(self.grow_fraction) * scores.size:
            return
        k = self.components_.shape[1]
        stale = np.flatnonzero(self.atom_last_used_ < self.n_windows_)
        stale = stale[np.argsort(self.atom_last_used_[stale], kind="stable")]
        room = max(self.max_components - k, 0)
        n_new = min(self.grow_size, poor.size, room + stale.size)
        if n_new <= 0:
            return
        worst = poor[np.argsort(-scores[poor], kind="stable")[:n_new]]
        atoms = self._seed_atoms(P, worst)
        n_add = min(room, n_new)
        if n_add:
            self.oiadmm_.add_atoms(atoms[:, :n_add])
        if n_new > n_add:
            self.oiadmm_.replace_atoms(stale[: n_new - n_add], atoms[:, n_add:])
        used = np.r_[self.atom_last_used_, np.zeros(n_add, dtype=np.int64)]
        used[np.r_[np.arange(k, k + n_add), stale[: n_new - n_add]].astype(np.int64)] = (
            self.n_windows_
        )
        self.atom_last_used_ = used

    def remap_features(self, kept_rows: np.ndarray, n_new: int) -> OnlineL1NoveltyDetector:
        """Apply a vocabulary update (evicted rows dropped, ``n_new`` zero rows appended)."""
        check_is_fitted(self, "oiadmm_")
        self.oiadmm_.remap_rows(kept_rows, n_new)
        return self

    # ----------------------------------------------------------------- scoring
    def code(self, X: sp.spmatrix | np.ndarray) -> L1CodingResult:
        """Full Algorithm 5 result (codes, scores, reconstruction errors) for documents ``X``.

        Read-only: terms beyond the dictionary's rows are scored against zero rows (they are
        unexplained mass) without growing the model."""
        check_is_fitted(self, "oiadmm_")
        P = self._docs_as_columns(X)
        return self._code(P, self.padded_components(P.shape[0]))

    def transform(self, X: sp.spmatrix | np.ndarray) -> sp.csr_matrix:
        """Sparse codes (``n_docs x k``)."""
        return self.code(X).codes

    def score_samples(self, X: sp.spmatrix | np.ndarray) -> np.ndarray:
        """Novelty scores (Eq. (3) optimal values): HIGHER means MORE novel."""
        return self.novelty_scores(self.code(X))

    def novelty_scores(self, res: L1CodingResult) -> np.ndarray:
        """Eq. (3) optimum, plus the screening margin when ``score_margin`` is set."""
        if self.score_margin:
            return res.objective + res.screening_margin
        return res.objective

    def unsupported_margin(self) -> float:
        """The screening margin (:func:`l1_sparse_code`) of a document on none of whose terms
        any atom has mass, such as one of words the vocabulary does not hold: ``min_j (w
        ||a_j||_1 + lam)``; 0 without atoms or without ``score_margin``."""
        check_is_fitted(self, "oiadmm_")
        A = self.components_
        if not self.score_margin or A.shape[1] == 0:
            return 0.0
        colnorm = np.asarray(A.sum(axis=0, dtype=np.float64)).ravel()
        return max(float((self.over_weight * colnorm + self.lam).min()), 0.0)

    def flag_novel(
        self, scores: np.ndarray, eligible: np.ndarray | None = None
    ) -> tuple[np.ndarray, float]:
        """Novel flags and the threshold used (``threshold`` mode or top-``q`` of the window).

        ``eligible`` (bool per document, default all) marks the documents that can be novel: the
        others are never flagged and the top-``q`` cut is taken among the eligible ones only.
        :class:`~sparsewatch.models.window_detector.Detector` passes the documents with a term:
        one without any has score 0 (nothing to explain) and, when fewer than ``ceil(q n)``
        documents had terms, a cut at 0 flagged every empty one. With fewer than ``1 / q``
        eligible documents (none included) there is no top-``q`` fraction to cut: the last
        threshold (``threshold_``, initially ``threshold``) is used and kept.
        """
        scores = np.asarray(scores, dtype=np.float64)
        ok = np.ones(scores.size, dtype=bool) if eligible is None else np.asarray(eligible, bool)
        if self.flag == "threshold":
            thr = float(self.threshold)
        elif self.flag == "top_q":
            if not 0 < self.top_q <= 1:
                raise ValueError(f"top_q must be in (0, 1], got {self.top_q}")
            pool = scores[ok]
            # ceil(q n) of the decimal q: in floats q n rounds up (0.07 * 100 = 7.000000000000001
            # flagged 8 documents), and past n (q > 1) the cut moved down from the top
            q_n = _decimal(self.top_q) * pool.size
            if q_n < 1:  # too few documents for a top-q cut: the last threshold, kept as it is
                thr = float(getattr(self, "threshold_", self.threshold))
                return (scores > thr) & ok, thr
            n_top = math.ceil(q_n)
            thr = float(np.partition(pool, pool.size - n_top)[pool.size - n_top])
            thr = np.nextafter(thr, -np.inf)
        else:
            raise ValueError(f"flag must be 'top_q' or 'threshold', got {self.flag!r}")
        self._set_threshold(thr, top_q=self.flag == "top_q")
        return (scores > thr) & ok, thr

    def _set_threshold(self, thr: float, top_q: bool) -> None:
        """Record ``thr`` as the last threshold used: a top-``q`` cut of a window (on the score
        scale of the current ``score_margin``) or the configured ``threshold``."""
        self.threshold_ = thr
        self.threshold_top_q_ = top_q
        self.threshold_score_margin_ = bool(self.score_margin)

    def late_threshold(self) -> float:
        """The threshold documents scored outside a window (late ones) are flagged by: the last
        window's cut (``threshold_``) in ``"top_q"`` mode, ``threshold`` in ``"threshold"`` mode.
        ``threshold_`` alone held, for a model restored with another ``threshold`` or switched
        to ``"threshold"`` mode, the checkpoint's cut until the next window closed. A restored
        ``threshold_`` is the checkpoint's only while it still applies (:meth:`set_state`)."""
        check_is_fitted(self, "oiadmm_")
        return float(self.threshold if self.flag == "threshold" else self.threshold_)

    # ----------------------------------------------------------------- state
    def get_state(self) -> dict[str, np.ndarray]:
        """Learned state as npz-safe arrays (``NotFittedError`` before :meth:`fit`)."""
        check_is_fitted(self, "oiadmm_")
        st = self.oiadmm_.get_state()
        st["threshold"] = np.asarray(self.threshold_, dtype=np.float64)
        st["threshold_top_q"] = np.asarray(self.threshold_top_q_, dtype=np.int64)
        st["threshold_score_margin"] = np.asarray(self.threshold_score_margin_, dtype=np.int64)
        st["n_windows"] = np.asarray(self.n_windows_, dtype=np.int64)
        st["atom_last_used"] = self.atom_last_used_.astype(np.int64)
        return st

    def set_state(self, state: dict[str, np.ndarray]) -> OnlineL1NoveltyDetector:
        """Restore :meth:`get_state` under this model's parameters (:meth:`_restore_threshold`)."""
        self.oiadmm_ = self._oiadmm().set_state(state)
        self._restore_threshold(state)
        k = self.oiadmm_.components_.shape[1]  # checkpoints older than growth lack the two below
        self.n_windows_ = int(state.get("n_windows", 0))
        self.atom_last_used_ = np.array(
            state.get("atom_last_used", np.zeros(k, dtype=np.int64)), dtype=np.int64
        )
        return self

    def _restore_threshold(self, state: dict[str, np.ndarray]) -> None:
        """The checkpoint's last threshold while it is a top-``q`` cut made with this model's
        ``score_margin``; otherwise the current ``threshold``, as for a model that has made no
        cut yet. A checkpoint's configured threshold (``"threshold"`` mode, or no window since
        :meth:`fit`) judged the small windows of a model restored into ``"top_q"`` mode with
        another ``threshold``, and a cut made with the screening margin added (or not) judged
        them on the other score scale. A checkpoint written before the cut's origin was recorded
        is taken as made under this model's ``flag`` and ``score_margin``, as it was restored
        before: in ``"top_q"`` mode its threshold is kept."""
        top_q = bool(state.get("threshold_top_q", self.flag == "top_q"))
        margin = bool(state.get("threshold_score_margin", self.score_margin))
        if top_q and margin == bool(self.score_margin):
            self._set_threshold(float(state["threshold"]), top_q=True)
        else:
            self._set_threshold(float(self.threshold), top_q=False)
