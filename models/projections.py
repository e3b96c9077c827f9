"""Exact Euclidean projections used by the dictionary-learning solvers.

* :func:`project_simplex` -- onto ``{v >= 0, sum v = z}`` (sort-based, Duchi et al. 2008, Fig. 1;
  or ``method="pivot"``: Michelot's pivoting, no sort, faster on long slices).
* :func:`project_l1_ball_nonneg` -- onto ``{v >= 0, ||v||_1 <= radius}``; applied column-wise to a
  dictionary this is the projection onto the set
  ``A = {A in R^{m x k}: A >= 0, ||A_j||_1 <= 1}`` of Kasiviswanathan et al. (NIPS 2012, Eq. (2)),
  used by OIADMM (Algorithm 2) and by the batch dictionary update (Algorithm 6);
  :func:`project_l1_ball_nonneg_csc` does the same on the stored entries of a sparse matrix
  (Michelot's pivoting, finished by the sort when slow).
* :func:`project_simplex_box` -- onto ``{lower <= v <= upper, sum v = z}`` (exact: safeguarded
  Newton steps on the threshold followed by a closed-form solve on the free set; a slice whose
  entries spread too far for that, ``1e-30 .. 1e30``, is solved again by a search over its
  breakpoints, relative to an entry next to the threshold);
  :func:`simplex_box_threshold` is its scalar path for one vector, hot-startable.

All functions work on every 1-d slice along ``axis`` at once (columns by default), cost
``O(m log m)`` per slice (``O(m)`` per pivoting pass) and never loop over slices in Python.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

__all__ = [
    "project_l1_ball_nonneg",
    "project_l1_ball_nonneg_csc",
    "project_simplex",
    "project_simplex_box",
    "simplex_box_threshold",
]


# a coordinate free in a simplex-box projection this many times max(z, 1) from its frame's
# origin, rounded by the shift there: the slice is solved again in another frame
_FAR = 1024.0


def _as_float(V: np.ndarray) -> np.ndarray:
    V = np.asarray(V)
    # the dtype's kind, not ``np.issubdtype`` (a few microseconds, in dynamic NMF's inner loop)
    return V if V.dtype.kind == "f" else V.astype(np.float64)


def _simplex_rows(W: np.ndarray, z: float) -> np.ndarray:
    """Project every row of the 2-d array ``W`` onto ``{w >= 0, sum w = z}``.

    The rows are first shifted to a largest entry of 0 (the projection is unchanged by a shift,
    :func:`_shift_to_max`), so the threshold lies in ``[-z, 0)`` whatever the entries' size.
    """
    n = W.shape[1]
    W = _shift_to_max(W)
    U = -np.sort(-W, axis=1)
    css = np.cumsum(U, axis=1, dtype=np.float64) - z
    ind = np.arange(1, n + 1, dtype=np.float64)
    cond = U - css / ind > 0
    rho = n - np.argmax(cond[:, ::-1], axis=1)  # last index where cond holds, 1-based
    theta = css[np.arange(W.shape[0]), rho - 1] / rho
    # z = 0: cond holds nowhere (argmax then said index n); the projection is 0 (theta = the
    # largest entry, 0 after the shift)
    theta = np.where(cond.any(axis=1), theta, 0.0)
    return np.maximum(W - theta[:, None].astype(W.dtype), 0)


def _empty_slices(V: np.ndarray, axis: int, z: float | None) -> np.ndarray | None:
    """A copy of ``V`` when its slices along ``axis`` have length 0 (the only vector of length 0
    is empty, and it sums to 0), else ``None``. ``ValueError`` when ``z`` (the mass the slices
    must have; ``None`` for the l1 ball, which holds the empty vector) is not 0 and there is
    at least one slice: the set is empty (numpy raised "cannot reshape" or "argmax of an empty
    sequence"). Callers test ``0 in V.shape`` first: a projection runs per topic in dynamic
    NMF's inner loop, where this test's moveaxis cost 4 us a call."""
    if V.ndim == 0:
        return None
    moved = np.moveaxis(V, axis, -1)  # a view; numpy's AxisError for a bad axis
    if moved.shape[-1] != 0:
        return None
    if z is not None and abs(z) > 1e-9 and np.prod(moved.shape[:-1], dtype=np.int64):
        raise ValueError(
            f"cannot project slices of length 0 onto a set of mass z = {z} != 0: "
            "an empty vector sums to 0"
        )
    return V.copy()


def _check_mass(z: float, name: str) -> None:
    if not 0 <= z < np.inf:  # NaN fails too
        raise ValueError(f"{name} must be finite and >= 0, got {z}")


def _shift_to_max(rows: np.ndarray) -> np.ndarray:
    """``rows`` minus each row's largest entry (a new array; rows of length 0 stay empty).

    Projections onto a simplex depend only on the differences of a slice's entries
    (``max(v - theta, 0)`` with ``v + c`` takes the threshold ``theta + c``). On the raw entries
    ``v - theta`` cancels once the entries are large next to ``z``: at ``1e8`` in float32 or
    ``1e17`` in float64 the exact threshold is not representable and rounds onto the entries, so
    the sort returned zeros and the pivot returned the slice unprojected. Shifted, the largest
    entry is 0 and the threshold lies in ``[-z, 0)``; the entries that can stay positive are
    within ``z`` of the maximum, where the subtraction is exact (Sterbenz) once the maximum
    exceeds ``2 z``.
    """
    return rows - rows.max(axis=1, initial=-np.inf)[:, None]


def project_simplex(
    V: np.ndarray, z: float = 1.0, axis: int = 0, method: str = "sort"
) -> np.ndarray:
    """Euclidean projection of every slice of ``V`` along ``axis`` onto the simplex of mass ``z``.

    Solves ``min_w ||w - v||_2`` subject to ``w >= 0`` and ``sum(w) = z`` for each slice ``v``
    (Duchi, Shalev-Shwartz, Singer, Chandra, ICML 2008, Fig. 1), vectorised over slices.
    ``method="pivot"`` finds the same threshold without sorting (:func:`_simplex_pivot`), which is
    several times faster on long slices such as the term columns of a topic model.
    """
    _check_mass(z, "z")
    V = _as_float(V)
    if method not in ("sort", "pivot"):
        raise ValueError(f"unknown method {method!r}")
    if 0 in V.shape and (empty := _empty_slices(V, axis, z)) is not None:
        return empty
    if method == "pivot":
        return _simplex_pivot(V, z, axis)
    if V.ndim == 1:
        return _simplex_rows(V[None, :], z)[0]
    W = np.moveaxis(V, axis, -1)
    shape = W.shape
    out = _simplex_rows(W.reshape(-1, shape[-1]), z).reshape(shape)
    return np.moveaxis(out, -1, axis)


def _simplex_pivot(V: np.ndarray, z: float, axis: int, max_passes: int = 50) -> np.ndarray:
    """Simplex projection by Michelot's pivoting (J. Optim. Theory Appl. 50, 1986), no sort.

    Start from the threshold ``theta = (sum v - z) / m`` of the full support and repeat
    ``S = {v > theta}``, ``theta = (sum_S v - z) / |S|``: ``theta`` increases, ``S`` shrinks,
    and once ``S`` stops changing ``theta`` is the exact threshold of the projection
    ``max(v - theta, 0)``. The first pass runs on the dense slices; the entries it keeps (on long
    slices such as a dictionary's term columns, a few percent) go on as compact arrays
    (:func:`_pivot_thresholds`), so later passes cost what is left, not ``O(m)`` each. The slices
    are shifted to a largest entry of 0 first (:func:`_shift_to_max`): exact at any magnitude,
    and the largest entry, above every threshold, is always a candidate.
    """
    Vm = np.moveaxis(V, axis, -1)
    shape = Vm.shape
    rows = _shift_to_max(np.ascontiguousarray(Vm).reshape(-1, shape[-1]))
    m = rows.shape[1]
    theta = (rows.sum(axis=1, dtype=np.float64) - z) / m
    idx = np.flatnonzero(rows > theta.astype(rows.dtype)[:, None])
    theta = _pivot_thresholds(
        rows.ravel()[idx].astype(np.float64), idx // m, rows.shape[0], z, max_passes
    )
    rows -= theta.astype(rows.dtype)[:, None]
    np.maximum(rows, 0, out=rows)
    return np.moveaxis(rows.reshape(shape), -1, axis)


def _pivot_thresholds(
    v: np.ndarray, slice_of: np.ndarray, n_slices: int, z: float, max_passes: int
) -> np.ndarray:
    """Michelot's pivoting on the candidate entries ``v`` of every slice (``slice_of``: each
    entry's slice), all slices at once: on a slice's active entries ``theta = (sum - z) / count``;
    entries ``<= theta`` cannot be in the final support (``theta`` only grows towards the exact
    threshold) and are dropped; a slice whose active set no longer changes has its exact
    ``theta``. Slices still unsettled after ``max_passes`` are finished by the segmented sort, so
    the worst case stays ``O(n log n)``. Slices without candidates get ``theta = 0``: callers
    shift the slices they project to a largest entry of 0 (:func:`_shift_to_max`), which every
    threshold ``(sum - z) / count`` of non-positive entries lies below, so it is never dropped and
    each of them gets its threshold."""
    theta = np.zeros(n_slices)
    c = slice_of
    for _ in range(max_passes):
        if not v.size:
            break
        n = np.bincount(c, minlength=n_slices)
        th = (np.bincount(c, weights=v, minlength=n_slices) - z) / np.maximum(n, 1)
        keep = v > th[c]
        settled = (np.bincount(c[~keep], minlength=n_slices) == 0) & (n > 0)
        theta[settled] = th[settled]
        keep &= ~settled[c]
        v, c = v[keep], c[keep]
    if v.size:
        _sorted_thresholds(v, c, theta, z)
    return theta


def project_l1_ball_nonneg(
    V: np.ndarray, radius: float = 1.0, axis: int = 0, method: str = "sort"
) -> np.ndarray:
    """Project every slice along ``axis`` onto ``{w >= 0, ||w||_1 <= radius}``.

    With ``axis=0`` on a dictionary this is the exact projection onto the constraint set ``A`` of
    the paper (non-negative atoms with l1 norm at most one). Slices whose positive part is already
    inside the ball are clipped at zero; the others are projected onto the simplex of mass
    ``radius`` (the ball constraint is then active), by ``method`` as in :func:`project_simplex`.
    """
    if method not in ("sort", "pivot"):
        raise ValueError(f"unknown method {method!r}")
    _check_mass(radius, "radius")
    V = _as_float(V)
    if 0 in V.shape and (empty := _empty_slices(V, axis, None)) is not None:
        return empty
    W = np.maximum(V, 0)
    if W.ndim == 1:
        return W if W.sum() <= radius else _simplex_rows(W[None, :], radius)[0]
    Wm = np.moveaxis(W, axis, -1)
    shape = Wm.shape
    flat = np.ascontiguousarray(Wm.reshape(-1, shape[-1]))
    over = np.flatnonzero(flat.sum(axis=1, dtype=np.float64) > radius)
    if over.size:
        flat[over] = (
            _simplex_pivot(flat[over], radius, axis=1)
            if method == "pivot"
            else _simplex_rows(flat[over], radius)
        )
    return np.moveaxis(flat.reshape(shape), -1, axis)


def project_simplex_box(
    V: np.ndarray,
    lower: np.ndarray | float,
    upper: np.ndarray | float,
    axis: int = 0,
    z: float = 1.0,
) -> np.ndarray:
    """Project every slice along ``axis`` onto ``{lower <= w <= upper, sum(w) = z}``.

    The solution is ``w = clip(v - theta, lower, upper)`` with the scalar ``theta`` that makes the
    sum equal ``z``. ``theta`` is found by safeguarded Newton steps (bisection when a step leaves
    the bracket), then solved in closed form on the free coordinates, so the result is exact up
    to rounding. ``lower``/``upper`` broadcast
    against ``V``; the set must be non-empty (``sum(lower) <= z <= sum(upper)``). A 1-d ``V``
    takes the scalar path of :func:`simplex_box_threshold`.

    The slices are shifted to a largest entry of 0 (:func:`_shift_to_max`) and projected in
    float64, the result cast back to ``V``'s dtype: ``v - theta`` on the raw entries cancels
    once they are large next to ``z`` (float32 entries near ``1e7`` came back summing to 1.77 for
    ``z = 2``, float64 ones of ``1e14`` to 0.49 for ``z = 0.5``, some over their upper bound).
    """
    V = _as_float(V)
    lo = np.broadcast_to(np.asarray(lower, dtype=V.dtype), V.shape)
    hi = np.broadcast_to(np.asarray(upper, dtype=V.dtype), V.shape)
    if 0 in V.shape and (empty := _empty_slices(V, axis, z)) is not None:
        return empty
    if V.ndim == 1:
        v = V.astype(np.float64) - float(V.max())
        theta = simplex_box_threshold(v, lo, hi, z)
        w = np.clip(v - theta, lo, hi)
        s = float(w.sum())  # _box_miss's first test in scalars: 1 us, against its 4 us
        if (
            abs(s - z) > 1e-12 * abs(z)
            and _box_miss(
                v[None, :], np.array([theta]), lo[None, :], hi[None, :], z, np.array([s])
            )[0]
        ):
            # the threshold cannot place v - theta (see _simplex_box_rows)
            rows, lo_rows, hi_rows = (a.astype(np.float64)[None, :] for a in (V, lo, hi))
            w = _simplex_box_rows(rows, lo_rows, hi_rows, z)[0]
        return w.astype(V.dtype, copy=False)
    moved = [np.moveaxis(a, axis, -1) for a in (V, lo, hi)]
    shape = moved[0].shape
    _check_simplex_box(moved[1], moved[2], z)
    # the set is checked in V's dtype, solved with float64 bounds (float32 sums of the bounds
    # missed z by 6e-8, which read as a row off its root)
    out = _simplex_box_rows(
        moved[0].reshape(-1, shape[-1]),
        _bound_rows(lower, V.dtype, V.shape, axis),
        _bound_rows(upper, V.dtype, V.shape, axis),
        z,
    )
    return np.moveaxis(out.astype(V.dtype, copy=False).reshape(shape), -1, axis)


def _bound_rows(
    bound: np.ndarray | float, dtype: np.dtype, shape: tuple[int, ...], axis: int
) -> np.ndarray:
    """``bound`` in ``dtype``, widened to float64, broadcast to ``shape`` and laid out as the rows
    of the slices along ``axis``. Widened before it is broadcast: a scalar bound stays one number
    (widening the broadcast float32 bounds made two float64 arrays of the batch's size, which the
    Newton loop then read through: the float32 batch took 40% longer)."""
    wide = np.asarray(bound, dtype=dtype).astype(np.float64, copy=False)
    moved = np.moveaxis(np.broadcast_to(wide, shape), axis, -1)
    return moved.reshape(-1, moved.shape[-1])


def _bracket(V: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float) -> tuple[np.ndarray, ...]:
    """Per row of ``V``, thresholds ``a <= b`` with ``s(a) >= z >= s(b)``, ``s(theta) = sum
    clip(v - theta, lo, hi)``: every coordinate at its upper bound, or at its lower bound. An
    infinite bound gives no such point (the midpoint of the bracket was infinite and the result
    inf or NaN); it is searched for instead, in steps that double from the entries' spread."""
    a = (V - hi).min(axis=1).astype(np.float64)
    b = (V - lo).max(axis=1).astype(np.float64)
    if np.isfinite(a).all() and np.isfinite(b).all():
        return a, b

    def s(theta: np.ndarray) -> np.ndarray:
        return np.clip(V - theta[:, None], lo, hi).sum(axis=1, dtype=np.float64)

    width = 1.0 + abs(z) + np.ptp(V, axis=1).astype(np.float64)
    for bound, start, sign in ((a, V.min(axis=1), -1.0), (b, V.max(axis=1), 1.0)):
        bad = ~np.isfinite(bound)
        bound[bad] = start[bad] + sign * width[bad]
        step = width.copy()
        for _ in range(64):
            short = bad & ((s(bound) < z) if sign < 0 else (s(bound) > z))
            if not short.any():
                break
            bound[short] += sign * step[short]
            step[short] *= 2
    return a, b


def _check_simplex_box(lo: np.ndarray, hi: np.ndarray, z: float) -> None:
    """``ValueError`` for an empty set. The sums may pass ``z`` by ``1e-9`` relative and by their
    own rounding (bounds ``z / 49`` with ``z = 3e7`` summed to ``z + 4e-9``, past the absolute
    ``1e-9`` it was; float32 bounds ``z / 6`` fell ``1e-7`` short of ``z``)."""
    eps = float(np.finfo(np.result_type(lo.dtype, hi.dtype, np.float32)).eps)
    slack = 1e-9 * max(abs(z), 1.0)
    lo_sum, hi_sum = lo.sum(axis=-1), hi.sum(axis=-1)
    if (
        (lo_sum > z + slack + 4 * eps * np.abs(lo_sum)).any()
        or (hi_sum < z - slack - 4 * eps * np.abs(hi_sum)).any()
        or (lo > hi).any()
    ):
        raise ValueError("empty set: need lower <= upper and sum(lower) <= z <= sum(upper)")


def simplex_box_threshold(
    v: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    z: float = 1.0,
    theta0: float | None = None,
    *,
    check: bool = True,
) -> float:
    """The threshold ``theta`` of the projection of one vector onto the simplex with a box:
    ``clip(v - theta, lower, upper)`` sums to ``z`` (to a relative ``1e-12``).

    The scalar path for solvers that project one vector at a time (the rank-one cyclic updates of
    :class:`~sparsewatch.models.dynamic_nmf.DynamicNMF` project every topic once a sweep): the
    same safeguarded Newton iteration as :func:`project_simplex_box` on the piecewise-linear
    decreasing ``s(theta) = sum clip(v - theta, lower, upper)``, in scalars and preallocated
    vectors (a 4,000-term topic: 0.07 ms against 0.33 ms through the batched rows). A Newton step
    from inside the right linear piece lands on the root, so a ``theta0`` near it (the same topic's
    threshold one sweep earlier) needs one or two steps; a ``theta0`` outside the bracket is
    ignored; a root the 64 steps do not reach (a box ``1e-11`` wide among entries of ``1e30``)
    is found by a search over the breakpoints (:func:`_piece_thresholds`). A ``theta`` cannot
    place ``v - theta`` finer than ``theta``'s rounding: where free entries lie far below the
    largest, :func:`project_simplex_box` solves relative to one of them instead.
    ``lower``/``upper`` are arrays of ``v``'s shape; the set must be non-empty
    (``ValueError`` otherwise; ``check=False`` skips that test, for a caller that projects onto
    the same box again and again and has had it tested once: the test was a fifth of a call).
    """
    v = _as_float(v)
    if check:
        _check_simplex_box(lower, upper, z)
    if not v.size:  # z = 0 (checked): every threshold gives the empty vector
        return 0.0 if theta0 is None else float(theta0)
    a, b = float((v - upper).min()), float((v - lower).max())  # all at upper / all at lower
    if not (math.isfinite(a) and math.isfinite(b)):  # an infinite bound: searched for
        brackets = _bracket(v[None, :], np.asarray(lower)[None, :], np.asarray(upper)[None, :], z)
        a, b = (float(x[0]) for x in brackets)
    theta = 0.5 * (a + b)
    if theta0 is not None and a < theta0 < b:
        theta = float(theta0)
    tol = 1e-12 * max(abs(z), 1.0)
    w, c = np.empty_like(v), np.empty_like(v)
    for _ in range(64):  # bisection halves the bracket: 64 steps unless the spread is extreme
        np.subtract(v, theta, out=w)
        np.maximum(w, lower, out=c)
        np.minimum(c, upper, out=c)
        s = float(c.sum(dtype=np.float64))
        if abs(s - z) <= tol:
            break
        if s > z:
            a = theta
        else:
            b = theta
        n_free = int(np.count_nonzero(c == w))  # a tie at a bound counts: only a step longer
        step = theta + (s - z) / max(n_free, 1)
        if n_free and step == theta:  # without free coordinates: s - z below theta's rounding
            break  # read as converged, the projection summed to 3 z; bisection goes on
        theta = step if n_free and a < step < b else 0.5 * (a + b)
    else:  # the bisection had not reached the root's piece (a narrow box among 1e30 entries)
        rows, lo_row, hi_row = (np.broadcast_to(x, v.shape)[None, :] for x in (v, lower, upper))
        piece = _piece_thresholds(rows, lo_row, hi_row, z)
        theta = float(_exact_thresholds(rows, piece, lo_row, hi_row, z)[0])
    return theta


def _simplex_box_rows(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float) -> np.ndarray:
    """The projection of each row of floats, in float64 (float64 bounds; the set checked by the
    caller).

    Solved relative to each row's largest entry (:func:`_shift_to_max`), in float64. A row whose
    solution there misses ``z``, or whose free entries the shift rounded by more than ``_FAR``
    ulps (:func:`_rounded_free`), is solved again relative to an entry next to its threshold
    (:func:`_reframed`): ``[1e28, 1e10, 1e10 + 0.5]`` in ``[0, 1]`` with ``z = 1.5`` gave the
    two free entries 0.25 each for 0 and 0.5, ``[1e12, -1e19]`` in ``[0, 0.5]`` came back
    ``[0.5, 0]``. The shift is made in place on the one float64 copy of the batch (a second
    one, kept for those rows, had the batch fault in more memory: 5-15% of its time); ``rows``
    is only read, and widened where rows are looked at again."""
    origin = rows.max(axis=1, initial=-np.inf).astype(np.float64)
    V = rows.astype(np.float64)
    V -= origin[:, None]
    theta, missed, W = _box_thresholds(V, lo, hi, z)
    redo = np.flatnonzero(missed | _rounded_free(rows, origin, V, theta, lo, hi, z))
    if redo.size:
        V[redo], theta[redo] = _reframed(
            rows[redo].astype(np.float64, copy=False), V[redo], theta[redo], lo[redo], hi[redo], z
        )
        W = None
    return _box_solution(V, theta, lo, hi, z, W)


def _rounded_free(
    rows: np.ndarray,
    origin: np.ndarray,
    V: np.ndarray,
    theta: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    z: float,
) -> np.ndarray:
    """Per row of ``V = rows - origin`` (float64; ``rows`` of any float dtype), whether the
    subtraction rounded an entry free at ``theta`` by more than ``_FAR`` ulps of
    ``max(|v - theta|, z, 1)`` (its error by Knuth's two-sum). Only entries ``_FAR * max(z, 1)``
    from the origin can be rounded that much: rows without one are not looked at further, nor
    is a batch without one (one test of its extremes)."""
    scale = max(abs(z), 1.0)
    out = np.zeros(V.shape[0], dtype=bool)
    near = _FAR * scale
    if V.min(initial=np.inf) >= -near and V.max(initial=-np.inf) <= near:
        return out  # a NaN fails the test: then row by row
    far_rows = np.flatnonzero(np.maximum(V.max(axis=1), -V.min(axis=1)) > near)
    if not far_rows.size:
        return out
    V, lo, hi = V[far_rows], lo[far_rows], hi[far_rows]
    rows = rows[far_rows].astype(np.float64, copy=False)
    W = V - theta[far_rows, None]
    b = -origin[far_rows, None]
    bb = V - rows
    error = np.abs((rows - (V - bb)) + (b - bb))
    ulps = _FAR * np.finfo(np.float64).eps * np.maximum(np.abs(W), scale)
    out[far_rows] = ((lo < W) & (hi > W) & (error > ulps)).any(axis=1)
    return out


def _reframed(
    rows: np.ndarray, V: np.ndarray, theta: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """The rows relative to an entry next to the root, and their thresholds there. The root lies
    between two entries adjacent in value, ``u <= theta* <= u'`` (:func:`_entries_around_root`);
    the free entries are near it, so relative to ``u`` or ``u'`` they are not rounded. A row
    keeps the first of the two frames where its solution neither misses ``z`` nor has rounded
    free entries, else ``V``'s."""
    V, theta = V.copy(), theta.copy()
    todo = np.arange(V.shape[0])
    for anchor in _entries_around_root(rows, lo, hi, z):
        at = todo
        origin = rows[at, anchor[at]]
        Vr = rows[at] - origin[:, None]
        tr, missed, _ = _box_thresholds(Vr, lo[at], hi[at], z)
        ok = ~(missed | _rounded_free(rows[at], origin, Vr, tr, lo[at], hi[at], z))
        V[at[ok]], theta[at[ok]] = Vr[ok], tr[ok]
        todo = at[~ok]
        if not todo.size:
            break
    return V, theta


def _entries_around_root(
    rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the indices of the entries ``u <= u'`` adjacent in value with
    ``s(u) >= z >= s(u')``, ``s(theta) = sum clip(v - theta, lo, hi)`` (the first or last entry
    where the root lies outside them): a binary search over the sorted entries, ``s(u)``
    evaluated relative to ``u`` (``clip(v - u, lo, hi)``), so the entries near ``u`` are exact."""
    order = np.argsort(rows, axis=1)
    u, lo_s, hi_s = (np.take_along_axis(a, order, axis=1) for a in (rows, lo, hi))
    at, m = np.arange(u.shape[0]), u.shape[1]
    left, right = _root_bracket(u, u, lo_s, hi_s, z)
    return order[at, np.maximum(left, 0)], order[at, np.minimum(right, m - 1)]


def _root_bracket(
    points: np.ndarray, V: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of the sorted ``points``, the indices ``left < right`` adjacent with
    ``s(points[left]) >= z > s(points[right])``, ``s(t) = sum clip(v - t, lo, hi)`` over the
    row of ``V`` (``-1`` and ``m`` stand for ``-inf`` and ``+inf``): a binary search, all rows
    at once."""
    n, m = points.shape
    at = np.arange(n)
    left, right = np.full(n, -1), np.full(n, m)
    while (active := right - left > 1).any():
        mid = (left + right) // 2
        t = points[at, np.where(active, mid, 0)]
        high = np.clip(V - t[:, None], lo, hi).sum(axis=1) >= z
        left = np.where(active & high, mid, left)
        right = np.where(active & ~high, mid, right)
    return left, right


def _box_miss(
    V: np.ndarray,
    theta: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    z: float,
    s: np.ndarray | None = None,
) -> np.ndarray:
    """Per row, whether ``w = clip(v - theta, lo, hi)`` (``s``: its sums, if known) misses the
    sum ``z`` by more than ``1e-12`` relative to ``max(z, sum |w|)``: where infinite bounds let
    ``|w|`` be large, the sum of ``w`` rounds by more than ``1e-12 z``; the Newton iteration's
    tolerance, ``1e-12`` absolute below ``z = 1``, had left sums ``1e-10`` relative off at
    ``z = 0.01``."""
    if s is None:
        s = np.clip(V - theta[:, None], lo, hi).sum(axis=1)
    miss = np.abs(s - z) > 1e-12 * abs(z)
    if miss.any():
        at = np.flatnonzero(miss)
        w = np.clip(V[at] - theta[at, None], lo[at], hi[at])
        miss[at] = np.abs(s[at] - z) > 1e-12 * np.abs(w).sum(axis=1)
    return miss


def _box_thresholds(
    V: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per float64 row of ``V``, a threshold ``theta`` in the linear piece of the decreasing
    piecewise-linear ``s(theta) = sum clip(v - theta, lo, hi)`` that holds the root ``s = z``,
    whether it still misses ``z`` (:func:`_box_miss`: ``V``'s frame has rounded the row), and
    ``V - theta`` where the last Newton step computed it for the final ``theta`` (else ``None``).
    """
    a, b = _bracket(V, lo, hi, z)  # every coordinate at its upper / at its lower bound
    theta = 0.5 * (a + b)
    # Safeguarded Newton: the step is exact once the free set is right (a handful of steps in
    # practice); a step that leaves the bracket falls back to bisection.
    for _ in range(60):
        W = V - theta[:, None]
        s = np.clip(W, lo, hi).sum(axis=1)
        big = s > z
        a = np.where(big, theta, a)
        b = np.where(big, b, theta)
        n_free = ((lo < W) & (hi > W)).sum(axis=1)
        step = theta + (s - z) / np.maximum(n_free, 1)
        done = (np.abs(s - z) <= 1e-12 * max(abs(z), 1.0)) | (step == theta)
        if done.all():
            break
        inside = (n_free > 0) & (step > a) & (step < b)
        theta = np.where(done, theta, np.where(inside, step, 0.5 * (a + b)))
    else:
        s = W = None  # theta moved after the last sums
    # Rows still off the root: 60 bisections had not narrowed the bracket (the entries' spread,
    # 1e30) to the root's piece (a box of width 1e-12), or a step without free coordinates fell
    # below theta's rounding and read as converged (the projection summed to 3 z).
    missed = _box_miss(V, theta, lo, hi, z, s)
    off = np.flatnonzero(missed)
    if off.size:
        piece = _piece_thresholds(V[off], lo[off], hi[off], z)
        theta[off] = _exact_thresholds(V[off], piece, lo[off], hi[off], z)
        missed[off] = _box_miss(V[off], theta[off], lo[off], hi[off], z)
        W = None
    return theta, missed, W


def _piece_thresholds(V: np.ndarray, lo: np.ndarray, hi: np.ndarray, z: float) -> np.ndarray:
    """Per row, a threshold inside the linear piece of ``s(theta) = sum clip(v - theta, lo, hi)``
    that holds the root ``s = z``: a binary search over the row's sorted breakpoints ``v - hi``,
    ``v - lo`` (``O(m log m)``, whatever the entries' spread), then the piece's midpoint."""
    bp = np.sort(np.concatenate((V - hi, V - lo), axis=1), axis=1)
    at, m = np.arange(bp.shape[0]), bp.shape[1]
    left, right = _root_bracket(bp, V, lo, hi, z)
    t0 = np.where(left >= 0, bp[at, np.maximum(left, 0)], -np.inf)
    t1 = np.where(right < m, bp[at, np.minimum(right, m - 1)], np.inf)
    with np.errstate(invalid="ignore"):  # inf - inf in the branches not taken
        return np.where(
            np.isfinite(t0) & np.isfinite(t1),
            0.5 * t0 + 0.5 * t1,
            np.where(
                np.isfinite(t1),
                t1 - np.maximum(1.0, np.abs(t1)),
                np.where(np.isfinite(t0), t0 + np.maximum(1.0, np.abs(t0)), 0.0),
            ),
        )


def _box_solution(
    V: np.ndarray,
    theta: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    z: float,
    W: np.ndarray | None = None,
) -> np.ndarray:
    """``clip(v - theta*, lo, hi)`` from a ``theta`` in the root's linear piece: the coordinates
    it puts at a bound stay there, the free ones get the exact threshold
    ``theta* = (sum_free v - (z - fixed)) / n_free``. ``W``: ``V - theta`` if known."""
    return np.clip(V - _exact_thresholds(V, theta, lo, hi, z, W)[:, None], lo, hi)


def _exact_thresholds(
    V: np.ndarray,
    theta: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    z: float,
    W: np.ndarray | None = None,
) -> np.ndarray:
    """The threshold of :func:`_box_solution` (``theta`` itself where no coordinate is free);
    ``W``: ``V - theta`` if known (the Newton loop's last one: an array of the batch's size less
    to make and fill)."""
    if W is None:
        W = V - theta[:, None]
    at_lo, at_hi = np.less_equal(W, lo), np.greater_equal(W, hi)
    free = ~(at_lo | at_hi)
    n_free = free.sum(axis=1)
    fixed = np.where(at_lo, lo, np.where(at_hi, hi, 0)).sum(axis=1)
    vfree = np.where(free, V, 0).sum(axis=1)
    return np.where(n_free > 0, (vfree - (z - fixed)) / np.maximum(n_free, 1), theta)


def _sorted_thresholds(v: np.ndarray, c: np.ndarray, theta: np.ndarray, radius: float) -> None:
    """Exact thresholds of the columns ``c`` (entries ``v``) by the segmented sort of Duchi et al.
    (Fig. 1), ``O(n log n)``, written into ``theta``."""
    order = np.lexsort((-v, c))
    u, cu = v[order], c[order]
    starts = np.r_[0, np.flatnonzero(np.diff(cu)) + 1]
    seg_start = np.repeat(starts, np.diff(np.r_[starts, u.size]))
    cums = np.cumsum(u)
    css = cums - np.r_[0.0, cums][seg_start] - radius
    j = np.arange(u.size) - seg_start + 1.0
    rho = np.add.reduceat((u - css / j > 0).astype(np.int64), starts)  # prefix length
    theta[cu[starts]] = css[starts + rho - 1] / rho


def project_l1_ball_nonneg_csc(
    A: sp.spmatrix, radius: float = 1.0, max_passes: int = 50
) -> sp.csc_matrix:
    """:func:`project_l1_ball_nonneg` on the columns of a sparse matrix (returns CSC).

    Implicit zeros stay zero (the projection is ``max(v - theta, 0)`` with ``theta >= 0``), so only
    the stored entries are touched. ``theta`` comes from Michelot's pivoting (no sort,
    :func:`_pivot_thresholds`): all columns advance together, each pass over the entries still
    active (a few passes in practice; the worst case stays ``O(nnz log nnz)``). The columns over
    the radius are shifted to a largest entry of 0 first (exact at any magnitude,
    :func:`_shift_to_max`); the others are only clipped at 0.
    Memory is a few arrays of the stored entries (the sort alone needed ~130 bytes per entry).
    """
    _check_mass(radius, "radius")
    # integers are projected in float64 (in place they were truncated: [3, 2] -> [1, 0])
    dtype = A.dtype if np.issubdtype(A.dtype, np.floating) else np.float64
    C = sp.csc_matrix(A, dtype=dtype, copy=True)
    C.sum_duplicates()
    np.maximum(C.data, 0, out=C.data)
    k = C.shape[1]
    counts = np.diff(C.indptr)
    col = np.repeat(np.arange(k, dtype=np.int32), counts)
    over = np.bincount(col, weights=C.data, minlength=k) > radius
    if over.any():
        top = np.zeros(k, dtype=C.data.dtype)
        stored = counts > 0
        top[stored] = np.maximum.reduceat(C.data, C.indptr[:-1][stored])
        shifted = C.data - np.repeat(np.where(over, top, 0), counts)
        active = over[col]
        theta = _pivot_thresholds(
            shifted[active].astype(np.float64), col[active], k, radius, max_passes
        )
        del active
        C.data = np.maximum(shifted - np.repeat(theta.astype(C.data.dtype), counts), 0)
    C.eliminate_zeros()
    return C
