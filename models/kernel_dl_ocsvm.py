"""KDL-OCSVM and KDPL-OCSVM: the kernel variants (Irofti et al. 2024, Sections 5.1 and 5.2).

In Section 5.1 the atoms live in the feature space of a kernel ``k`` as combinations of mapped
training signals, ``D = Phi(Y_L) A``; kernel OMP needs only ``D^T D = A^T K A`` and
``D^T Phi(y) = A^T k(Y_L, y)``, and the K-SVD sweep of Theorem 1 runs on ``Phi``-space residuals.
With the symmetric square root ``K = U Lambda U^T`` of the landmark Gram matrix, write
``A = U Lambda^{-1/2} Z`` and ``psi(y) = Lambda^{-1/2} U^T k(Y_L, y)`` (the empirical kernel map):
then ``D^T D = Z^T Z`` and ``D^T Phi(y) = Z^T psi(y)`` exactly, so kernel OMP and the kernel sweep
are OMP and the sweep of DL-OCSVM on the signals ``psi(y)`` with dictionary ``Z`` (the part of
``Phi(y)`` outside the span of the landmarks is orthogonal to every atom and changes neither the
atom choices nor the updates). The models below run the DL-OCSVM / DPL-OCSVM algorithms in these
coordinates and expose the atoms' kernel coefficients ``A`` (``atom_coefficients_``).

Numerically safe square root: eigenvalues of ``K`` under ``eig_floor * lambda_max`` are treated as
zero (pseudo-inverse square root), so a rank-deficient or ill-conditioned Gram (duplicates,
linear or polynomial kernels in few dimensions) never amplifies round-off. The landmarks are all
training rows, or a random subset of ``n_landmarks`` of them (a Nyström restriction of the atoms'
span) to bound the ``O(L^3)`` eigendecomposition.

Kernel width. ``gamma=None`` uses ``gamma_scale / (n_features * X.var())``, a multiple of
scikit-learn's ``"scale"`` (RBF and polynomial kernels; the factor was chosen for RBF).
KDPL-OCSVM keeps ``gamma_scale = 1`` (its codes ``P psi(y)`` are a linear map of the kernel map,
and at ``"scale"`` it matches the RBF OC-SVM). KDL-OCSVM defaults to
``KDL_GAMMA_SCALE = 10``: its representations are ``s``-sparse OMP codes over atoms whose mutual
inner products are kernel values (Section 5.1, ``D^T D = A^T K A``); at ``"scale"`` every RBF value
between training rows is large and positive, the data-initialised atoms are very coherent, and
the 3-sparse codes of such a dictionary lose the kernel geometry (the linear OC-SVM on the codes
sees code inner products, not kernel values). A narrower kernel makes the atoms nearly
orthogonal and the codes local. With the narrower kernel a smaller dictionary,
``KDL_N_COMPONENTS = 8`` atoms (``s = 3``), validated better than 32 (and than 4, 12 or 16).
Both values were chosen on validation scores of k-fold splits of the training data only
(``benchmarks/anomaly.md``, section "KDL-OCSVM's kernel width and dictionary size").
"""

from __future__ import annotations

import numpy as np
from sparsewatch.models._ocsvm_base import (
    FloatArray,
    OCSVMDetectorBase,
    row_matmul,
    row_products,
)
from sparsewatch.models.dl_ocsvm import DLOCSVM
from sparsewatch.models.dpl_ocsvm import DPLOCSVM

KERNELS = ("rbf", "poly", "linear")
KDL_GAMMA_SCALE = 10.0
KDL_N_COMPONENTS = 8


def kernel_matrix(
    A: FloatArray, B: FloatArray, kernel: str, gamma: float, degree: int, coef0: float
) -> FloatArray:
    """``k(a_i, b_j)`` for the RBF ``exp(-gamma ||a-b||^2)``, polynomial
    ``(gamma a^T b + coef0)^degree`` and linear ``a^T b`` kernels, each row a function of
    ``a_i`` alone, bit for bit.

    The formulas are scikit-learn's (``pairwise_kernels``; the RBF's squared distance is
    ``||a||^2 - 2 a^T b + ||b||^2``, clipped at 0), but its matrix products went through BLAS,
    whose sums depend on the shape of the whole batch: the same row scored alone or at another
    place in another batch got other kernel values in the last bits, and so another score.
    Here the products ``a^T b`` are :func:`~._ocsvm_base.row_matmul`'s and the squared norms
    :func:`~._ocsvm_base.row_products`' (the rest is elementwise).

    An RBF value of a finite row whose squared norm overflows is 0, its limit far from the
    landmarks (``||a||^2 + ||b||^2 - 2 a^T b`` gave ``inf - inf``, NaN, and the row a NaN
    score, which ``predict`` took for an inlier)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    K = row_matmul(A, B.T)
    if kernel == "linear":
        return K
    if kernel == "poly":
        K *= gamma
        K += coef0
        K **= degree
        return K
    with np.errstate(over="ignore", invalid="ignore"):  # (the NaN values are set below)
        K *= -2.0
        K += _squared_norms(A)[:, None]
        K += _squared_norms(B)[None, :]
        np.maximum(K, 0.0, out=K)
        K *= -gamma
        np.exp(K, out=K)
    K[np.isnan(K)] = 0.0
    return K


def _squared_norms(A: FloatArray) -> FloatArray:
    """The squared l2 norms of the rows of ``A``, each a function of its row alone
    (:func:`~._ocsvm_base.row_products`); ``inf`` where they overflow."""
    return row_products(A * A, np.ones(A.shape[1]))


def kernel_sqrt_inverse(K: FloatArray, eig_floor: float) -> FloatArray:
    """``U_r Lambda_r^{-1/2}`` over the eigenvalues above ``eig_floor * lambda_max`` (L x r).

    ``ValueError`` for a Gram matrix that is not finite (a polynomial kernel's overflow on
    large rows: its eigenvalues were NaN, no column was kept, and the fit failed later with an
    IndexError or another estimator's parameter error)."""
    if not np.isfinite(K).all():
        raise ValueError(
            "the kernel Gram matrix of the training rows is not finite (a polynomial kernel "
            "overflows on rows this large: lower gamma or the degree, or scale the data)"
        )
    vals, vecs = np.linalg.eigh((K + K.T) / 2.0)
    top = float(vals[-1])
    if top <= 0.0:
        raise ValueError("the kernel Gram matrix of the training rows is zero")
    keep = vals > eig_floor * top
    return vecs[:, keep] / np.sqrt(vals[keep])


class _KernelMapMixin(OCSVMDetectorBase):
    """Landmarks, kernel parameters and the empirical kernel map ``psi`` (module docstring)."""

    _kernel_state_keys = ("landmarks_", "kernel_map_", "gamma_")
    # parameters, set by the estimators' ``__init__``
    kernel: str
    gamma: float | None
    gamma_scale: float
    degree: int
    coef0: float
    n_landmarks: int | None
    eig_floor: float
    random_state: int | None

    def _fit_features(self, X: FloatArray) -> FloatArray:
        X = self._fit_normalize(X)
        rng = np.random.default_rng(self.random_state)
        n = X.shape[0]
        rows = np.arange(n)
        if self.n_landmarks is not None and n > int(self.n_landmarks):
            rows = np.sort(rng.choice(n, size=int(self.n_landmarks), replace=False))
        self.landmarks_ = X[rows].copy()
        if self.gamma is not None:
            gamma = float(self.gamma)
        else:
            # scikit-learn's "scale" is 1 when the (normalised) rows do not vary at all, as
            # "l2" makes one positive feature (1 / 0 raised ZeroDivisionError here).
            var = float(X.var())
            gamma = float(self.gamma_scale) / (X.shape[1] * var if var > 0.0 else 1.0)
        self.gamma_ = float(gamma)
        K = self._kernel(self.landmarks_, self.landmarks_)
        self.kernel_map_ = kernel_sqrt_inverse(K, float(self.eig_floor))
        return self._kernel_map(X)

    def _kernel(self, A: FloatArray, B: FloatArray) -> FloatArray:
        return kernel_matrix(
            A, B, self.kernel, float(self.gamma_), int(self.degree), float(self.coef0)
        )

    def _features(self, X: FloatArray) -> FloatArray:
        """``psi(x) = Lambda^{-1/2} U^T k(Y_L, x)`` for the normalised rows of ``X`` (rows x r)."""
        return self._kernel_map(self._normalize(X))

    def _kernel_map(self, X: FloatArray) -> FloatArray:
        """``psi`` of normalised rows (the training ones at fit, as they are scored), each row's
        a function of that row alone, bit for bit (:func:`kernel_matrix`,
        :func:`~._ocsvm_base.row_matmul`): through BLAS's matrix products, a row got other
        codes, and so another score, alone or at another place in another batch."""
        return row_matmul(self._kernel(X, self.landmarks_), self.kernel_map_)


class KDLOCSVM(_KernelMapMixin, DLOCSVM):
    """KDL-OCSVM (Section 5.1): DL-OCSVM with atoms ``Phi(Y_L) A`` and kernel OMP.

    Parameters are DL-OCSVM's (but ``n_components`` defaults to ``KDL_N_COMPONENTS = 8``, module
    docstring) plus ``kernel`` (``"rbf"``, ``"poly"``, ``"linear"``), ``gamma``
    (a number; ``None``: ``gamma_scale / (n_features * X.var())``, a multiple of scikit-learn's
    ``"scale"``), ``gamma_scale`` (default ``KDL_GAMMA_SCALE = 10``, module docstring; ignored when
    ``gamma`` is given), ``degree``, ``coef0``,
    ``n_landmarks`` (``None``: all training rows) and ``eig_floor`` (relative eigenvalue floor of
    the kernel square root). ``atom_coefficients_`` gives ``A`` (landmarks x atoms).
    ``normalize`` defaults to ``None`` here: the RBF kernel already scores distance from the bulk.

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.kernel_dl_ocsvm import KDLOCSVM
    >>> X = np.random.default_rng(0).standard_normal((60, 4))
    >>> model = KDLOCSVM(n_components=8, n_iter=2, random_state=0).fit(X)
    >>> int(model.labels_.sum())  # contamination=0.1: the 6 highest training scores
    6
    >>> model.predict(np.full((1, 4), 8.0))  # far from the training rows: 1 = outlier
    array([1])
    >>> model.decision_function(X[:3]).shape  # higher = more anomalous
    (3,)
    """

    _state_keys = DLOCSVM._state_keys + _KernelMapMixin._kernel_state_keys

    def __init__(
        self,
        n_components: int = KDL_N_COMPONENTS,
        n_nonzero_coefs: int = 3,
        beta: float = 0.0,
        alpha: float = 1.0,
        n_iter: int = 6,
        nu: float | None = 0.5,
        contamination: float | None = 0.1,
        kernel: str = "rbf",
        gamma: float | None = None,
        gamma_scale: float = KDL_GAMMA_SCALE,
        degree: int = 3,
        coef0: float = 1.0,
        n_landmarks: int | None = 300,
        eig_floor: float = 1e-8,
        atom_solver: str = "exact",
        power_iter: int = 50,
        omp_refresh: bool = False,
        replace_dead_atoms: bool = False,
        init: str = "data",
        ocsvm_tol: float | None = None,
        random_state: int | None = None,
        normalize: str | None = None,
    ) -> None:
        super().__init__(
            n_components=n_components,
            n_nonzero_coefs=n_nonzero_coefs,
            beta=beta,
            alpha=alpha,
            n_iter=n_iter,
            nu=nu,
            contamination=contamination,
            atom_solver=atom_solver,
            power_iter=power_iter,
            omp_refresh=omp_refresh,
            replace_dead_atoms=replace_dead_atoms,
            init=init,
            ocsvm_tol=ocsvm_tol,
            random_state=random_state,
            normalize=normalize,
        )
        self.kernel = kernel
        self.gamma = gamma
        self.gamma_scale = gamma_scale
        self.degree = degree
        self.coef0 = coef0
        self.n_landmarks = n_landmarks
        self.eig_floor = eig_floor

    @property
    def atom_coefficients_(self) -> FloatArray:
        """``A`` with atoms ``Phi(landmarks_) A`` (landmarks x atoms)."""
        return self.kernel_map_ @ self.dictionary_


class KDPLOCSVM(_KernelMapMixin, DPLOCSVM):
    """KDPL-OCSVM (Section 5.2): DPL-OCSVM with the synthesis atoms and the analysis rows in the
    kernel feature space (``D = Phi(Y_L) A``, ``P = B Phi(Y_L)^T``), computed in the
    coordinates ``psi`` of the module docstring. Kernel parameters as in :class:`KDLOCSVM`, but
    ``gamma_scale`` defaults to 1 (``gamma=None`` is scikit-learn's ``"scale"``);
    ``tau`` as in :class:`~sparsewatch.models.dpl_ocsvm.DPLOCSVM` (default ``"auto"`` = ``0.02 N``,
    ``N`` the number of training rows). ``analysis_coefficients_`` gives ``B`` (atoms x
    landmarks).

    Examples
    --------
    >>> import numpy as np
    >>> from sparsewatch.models.kernel_dl_ocsvm import KDPLOCSVM
    >>> X = np.random.default_rng(0).standard_normal((60, 4))
    >>> model = KDPLOCSVM(n_components=8, n_iter=2, random_state=0).fit(X)
    >>> int(model.labels_.sum())  # contamination=0.1: the 6 highest training scores
    6
    >>> model.predict(np.full((1, 4), 8.0))  # far from the training rows: 1 = outlier
    array([1])
    >>> model.decision_function(X[:3]).shape  # higher = more anomalous
    (3,)
    """

    _state_keys = DPLOCSVM._state_keys + _KernelMapMixin._kernel_state_keys

    def __init__(
        self,
        n_components: int = 32,
        tau: float | str = "auto",
        alpha: float = 1.0,
        n_iter: int = 6,
        nu: float | None = 0.5,
        contamination: float | None = 0.1,
        kernel: str = "rbf",
        gamma: float | None = None,
        gamma_scale: float = 1.0,
        degree: int = 3,
        coef0: float = 1.0,
        n_landmarks: int | None = 300,
        eig_floor: float = 1e-8,
        atom_solver: str = "exact",
        power_iter: int = 50,
        init: str = "data",
        ocsvm_tol: float | None = None,
        random_state: int | None = None,
        normalize: str | None = None,
    ) -> None:
        super().__init__(
            n_components=n_components,
            tau=tau,
            alpha=alpha,
            n_iter=n_iter,
            nu=nu,
            contamination=contamination,
            atom_solver=atom_solver,
            power_iter=power_iter,
            init=init,
            ocsvm_tol=ocsvm_tol,
            random_state=random_state,
            normalize=normalize,
        )
        self.kernel = kernel
        self.gamma = gamma
        self.gamma_scale = gamma_scale
        self.degree = degree
        self.coef0 = coef0
        self.n_landmarks = n_landmarks
        self.eig_floor = eig_floor

    @property
    def analysis_coefficients_(self) -> FloatArray:
        """``B`` with analysis rows ``B Phi(landmarks_)^T`` (atoms x landmarks): ``P psi(y) =
        B k(Y_L, y)``."""
        return self.analysis_ @ self.kernel_map_.T

    def _codes(self, X: FloatArray) -> FloatArray:
        """The codes ``P psi(y)`` of the rows as ``B k(Y_L, y)`` (Section 5.2's ``P = B
        Phi(Y_L)^T``), each row's a function of that row alone, bit for bit
        (:func:`kernel_matrix`, :func:`~._ocsvm_base.row_matmul`). Through ``psi`` (a
        coordinate per kept eigenvalue of the landmarks' Gram, up to ``n_landmarks``) each row
        took a product by a landmarks x landmarks matrix, one BLAS call per row; ``B`` has a row
        per atom."""
        return row_matmul(
            self._kernel(self._normalize(X), self.landmarks_), self.analysis_coefficients_.T
        )
