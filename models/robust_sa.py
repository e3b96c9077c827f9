"""Algorithm 2 of Guan et al. (2012): robust stochastic approximation for the bases of OR-NMF.

Projected robust stochastic approximation with step-weighted averaging on the online objective
``f_t`` of :class:`~sparsewatch.models.nmf_online.ORNMF` over its feasible set (simplex columns,
optionally with box bounds): ``W^{k+1} = P(W^k - r_k grad f_t(W^k))`` with
``r_k = theta_t D_W / (M_* sqrt(k))``, ``D_W = sqrt(2 r)`` and ``M_*`` the running maximum of the
gradient norm; the result is the average ``sum_k r_k W^k / sum_k r_k``. The iteration stops by
rule (9), when the objective of the averaged iterate changes by at most ``tau`` relative to its
value, or after ``max_iter`` iterations; a gradient norm that is not finite raises
``ValueError``. The objectives, the diameter and the horizon with warm restarts: the module
docstring of :mod:`sparsewatch.models.nmf_online`.

* :func:`theta_schedule` -- ``theta_t`` of step ``t``, restarted every ``horizon`` steps.
* :func:`robust_sa` -- the plain float64 loop on ``W`` (``m x r``) for any objective (the
  reference of the fast path; OR-NMF-IS minimises its majorised objective exactly instead).
* :func:`robust_sa_frobenius` -- the same iteration for the Frobenius objective on ``W^T``
  (``r x m``), organised for speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = ["robust_sa", "robust_sa_frobenius", "theta_schedule"]


def theta_schedule(t: int, horizon: int) -> float:
    """``theta_t = 0.1 cos(((t - 1) mod T) pi / 2T)`` of step ``t >= 1`` with ``T = horizon``:
    the paper's schedule inside each period of ``T`` steps, re-opened at every period's start."""
    T = horizon
    return 0.1 * np.cos(((t - 1) % T) * np.pi / (2.0 * T))


def _finite_norm(norm: float) -> float:
    """``norm`` of a gradient, or ``ValueError`` when it is NaN or infinite: ``max(M_*, nan)``
    kept ``M_* = 0``, and the iteration stopped as if at a stationary point, which froze the
    bases for good (statistics overflowed by large documents)."""
    if not math.isfinite(norm):
        raise ValueError(
            f"Algorithm 2: the gradient of f_t has norm {norm} (statistics with NaN or "
            "infinite entries)"
        )
    return norm


def robust_sa(
    W: np.ndarray,
    grad_obj: Callable[[np.ndarray], tuple[np.ndarray, float]],
    project: Callable[[np.ndarray], np.ndarray],
    *,
    theta: float,
    tau: float,
    max_iter: int,
) -> np.ndarray:
    """Algorithm 2 as a plain float64 loop on ``W`` (``m x r``): projected robust SA steps with
    step-weighted averaging; returns the averaged bases.

    ``grad_obj`` gives the step direction and the value of ``f_t`` at a point, ``project`` the
    projection of ``m x r`` bases onto the feasible set, ``theta`` is ``theta_t``."""
    D = np.sqrt(2.0 * W.shape[1])
    W_k, W_sum, r_sum, M, f_prev = W, np.zeros_like(W), 0.0, 0.0, None
    W_avg = W
    for k in range(1, max_iter + 1):
        grad, _ = grad_obj(W_k)
        M = max(M, _finite_norm(float(np.linalg.norm(grad))))
        if M == 0.0:
            break
        r_k = theta * D / (M * np.sqrt(k))
        W_sum += r_k * W_k
        r_sum += r_k
        W_avg = W_sum / r_sum
        _, f = grad_obj(W_avg)
        if f_prev is not None and abs(f_prev - f) <= tau * abs(f):
            break
        f_prev = f
        W_k = project(W_k - r_k * grad)
    return W_avg


def robust_sa_frobenius(
    components: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    sq: float,
    n: int,
    *,
    alpha_W: float,
    theta: float,
    tau: float,
    max_iter: int,
    project_rows: Callable[[np.ndarray], np.ndarray],
    float32: bool,
) -> np.ndarray:
    """Algorithm 2 (Frobenius loss) on ``W^T`` (``components``, ``r x m``); returns the averaged
    bases (``components`` itself when no step was taken).

    ``f_t(W) = (1/n)(1/2 tr(W^T W A) - tr(W^T B) + sq) + alpha_W/2 ||W||^2`` with the statistics
    ``A`` (``r x r``), ``B`` (``m x r``) and ``sq`` (``1/2 sum ||v||^2``) of ``n`` samples;
    ``project_rows`` projects ``r x m`` bases (rows) onto the feasible set, ``theta`` is
    ``theta_t``, and ``float32`` (the plain simplex) makes the iterates float32.

    The same iteration as :func:`robust_sa`, organised for speed: one ``r x r`` by ``r x m``
    product per iteration (``A W^T``, the gradient being ``A W^T - B^T``), and the objective of
    the averaged iterate tracked by linearity (``W_avg A`` is the step-weighted average of the
    ``W_k A`` already computed), so stopping rule (9) costs no extra product. On the plain
    simplex the iterates are float32 (projection by pivoting, no sort) and the average is
    renormalised onto the simplex in float64; with box bounds everything is float64.

    The objective is scaled by a power of two that brings its largest coefficient (of
    ``A / n``, ``B / n`` and ``alpha_W``) near 1: the iterates do not depend on the scale
    of ``f_t`` (the step is the gradient over its running maximum norm, rule (9) is
    relative), and a power of two changes no rounding, but float32 does. Unscaled, documents
    of entries ``1e-10`` moved the bases by 0.03 less than the same documents at 1
    (``vdot(grad, grad)`` underflowed), at ``1e-15`` or ``1e15`` (over- and underflow in
    float32) not at all, and ``1e20`` warned of overflow and NaN.
    """
    dtype: type[np.floating] = np.float32 if float32 else np.float64
    W_k = components.astype(dtype)
    A, Bt = A / n, B.T / n
    peak = max(np.abs(A).max(initial=0.0), np.abs(Bt).max(initial=0.0), alpha_W)
    exponent = math.frexp(peak)[1] if 0.0 < peak < math.inf else 0
    A = np.ldexp(A, -exponent).astype(dtype)
    Bt = np.ascontiguousarray(np.ldexp(Bt, -exponent), dtype=dtype)
    alpha_W = math.ldexp(alpha_W, -exponent)
    sq = math.ldexp(sq / n, -exponent)
    step0 = theta * np.sqrt(2.0 * components.shape[0])
    S, SA = np.zeros_like(W_k), np.zeros_like(W_k)
    AW, grad, tmp = np.empty_like(W_k), np.empty_like(W_k), np.empty_like(W_k)
    r_sum, sB, M, f_prev = 0.0, 0.0, 0.0, None
    for k in range(1, max_iter + 1):
        np.matmul(A, W_k, out=AW)
        np.subtract(AW, Bt, out=grad)
        if alpha_W:
            grad += dtype(alpha_W) * W_k
        M = max(M, _finite_norm(float(np.sqrt(np.vdot(grad, grad)))))
        if M == 0.0:
            break
        r_k = step0 / (M * np.sqrt(k))
        S += np.multiply(W_k, dtype(r_k), out=tmp)
        SA += np.multiply(AW, dtype(r_k), out=tmp)
        sB += r_k * float(np.vdot(W_k, Bt))
        r_sum += r_k
        f = 0.5 * float(np.vdot(S, SA)) / r_sum**2 - sB / r_sum + sq
        if alpha_W:
            f += 0.5 * alpha_W * float(np.vdot(S, S)) / r_sum**2
        if f_prev is not None and abs(f_prev - f) <= tau * abs(f):
            break
        f_prev = f
        grad *= dtype(r_k)
        W_k = project_rows(np.subtract(W_k, grad, out=tmp))
    if r_sum == 0.0:
        return components
    W = S.astype(np.float64) / r_sum
    if dtype == np.float32:
        W /= W.sum(axis=1, keepdims=True)
    return W
