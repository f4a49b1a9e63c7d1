"""The fused vector kernels of the CG family on the process's threads.

Each function is its kernel of :mod:`._fused_kernels` on one thread, the
same code and bits. On ``k >= 2`` threads (:func:`dmsolve.get_num_threads`)
an update is split into blocks of entries, and a sum is taken in the fixed
lanes of :func:`dmsolve.threads.lane_bounds`, lane by lane, the lane sums
added in lane order: the same bits at any thread count of two or more, on
every run. Not collective.
"""

from __future__ import annotations

import numpy as np

from .._blocks import lane_total, parallel_blocks, row_blocks, run_lanes
from .._vector import local_vdot
from ..threads import resolve
from . import _fused_kernels as _k

__all__ = ["cg_update", "xpay", "dot2", "pipecg_update", "pipecg_dots", "vdot"]


def cg_update(alpha, p, q, x, r):
    """``x += alpha p; r -= alpha q``; returns ``r^H r`` (real) of the new ``r``."""
    k = resolve(None)
    if k == 1:
        return _k.cg_update(alpha, p, q, x, r)
    return lane_total(run_lanes(lambda bounds, l0, l1, part: _k.cg_update_lanes(
        alpha, p, q, x, r, bounds, l0, l1, part), r.shape[0], k))


def xpay(beta, z, p) -> None:
    """``p = z + beta p``, by blocks of entries on two or more threads."""
    k = resolve(None)
    rows = row_blocks(p.shape[0], k) if k > 1 else None
    if rows is None or rows.size <= 2:
        _k.xpay(beta, z, p)
        return
    parallel_blocks(lambda lo, hi: _k.xpay(beta, z[lo:hi], p[lo:hi]), rows, k)


def dot2(a, b, c, d, out) -> None:
    """``out[0] = a^H b``, ``out[1] = c^H d``."""
    k = resolve(None)
    if k == 1:
        _k.dot2(a, b, c, d, out)
        return
    out[:2] = lane_total(run_lanes(lambda bounds, l0, l1, part: _k.dot2_lanes(
        a, b, c, d, bounds, l0, l1, part), a.shape[0], k, width=2, dtype=out.dtype))


def pipecg_update(alpha, beta, norm, vectors: tuple, out) -> None:
    """The pipelined CG pass of :func:`._fused_kernels.pipecg_update` on
    ``vectors``, its arrays ``(n, m, w, u, z, q, s, p, x, r)``."""
    n_, m, w, u, z, q, s, p, x, r = vectors
    k = resolve(None)
    if k == 1:
        _k.pipecg_update(alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r, out)
        return
    out[:3] = lane_total(run_lanes(lambda bounds, l0, l1, part: _k.pipecg_update_lanes(
        alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r, bounds, l0, l1, part),
        r.shape[0], k, width=3, dtype=out.dtype))


def pipecg_dots(norm, w, u, r, out) -> None:
    """The sums :func:`pipecg_update` leaves, of the vectors as they are."""
    k = resolve(None)
    if k == 1:
        _k.pipecg_dots(norm, w, u, r, out)
        return
    out[:3] = lane_total(run_lanes(lambda bounds, l0, l1, part: _k.pipecg_dots_lanes(
        norm, w, u, r, bounds, l0, l1, part), r.shape[0], k, width=3, dtype=out.dtype))


def vdot(a: np.ndarray, b: np.ndarray, dot=np.dot):
    """``a^H b``: ``dot(a, b)`` on one thread, fixed lanes on more
    (:func:`dmsolve._vector.local_vdot`)."""
    k = resolve(None)
    return dot(a, b) if k == 1 else local_vdot(a, b, k)
