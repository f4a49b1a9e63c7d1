"""The tentative prolongator: the near null space cut into aggregates and
orthonormalised per aggregate (a thin QR of each aggregate's block)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistCSR, Layout

from ._tentative_kernels import aggregate_slots

__all__ = ["fit_candidates", "tentative_prolongator"]


def fit_candidates(agg: np.ndarray, count: int, B: np.ndarray):
    """``T`` (local, ``n x count*k``) and coarse candidates ``R`` (``count*k x k``)
    with ``T R = B`` on aggregated rows and orthonormal columns of ``T``.

    The QRs of all aggregates run as one stacked ``numpy.linalg.qr`` on
    zero-padded blocks, each aggregate's rows in row order. Signs are fixed
    so that ``diag(R) >= 0``. Not collective.

    References
    ----------
    PyAMG ``fit_candidates``; Vanek, Mandel & Brezina 1996.
    """
    n, k = B.shape
    rows = np.flatnonzero(agg >= 0)
    a = agg[rows]
    if count == 0 or rows.size == 0:
        return sp.csr_matrix((n, count * k)), np.zeros((count * k, k))
    slot, sizes = aggregate_slots(a, count)
    m = max(int(sizes.max()), k)
    blocks = np.zeros((count, m, k))
    blocks[a, slot] = B[rows]
    if k == 1:
        norms = np.sqrt(np.einsum("ijk,ijk->i", blocks, blocks))
        R = norms.reshape(count, 1, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            Q = np.where(norms[:, None, None] > 0, blocks / np.where(norms == 0, 1, norms)[:, None, None], 0.0)
    else:
        Q, R = np.linalg.qr(blocks)
        s = np.sign(np.diagonal(R, axis1=1, axis2=2))
        s[s == 0] = 1
        Q = Q * s[:, None, :]
        R = R * s[:, :, None]
    # row by row (rows ascending, k columns each, ascending): CSR directly
    vals = Q[a, slot].reshape(-1)
    cols = (a[:, None] * k + np.arange(k)).reshape(-1)
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[rows + 1] = k
    np.cumsum(indptr, out=indptr)
    T = sp.csr_matrix((vals, cols, indptr), shape=(n, count * k))
    return T, R.reshape(count * k, k)


def tentative_prolongator(layout: Layout, agg: np.ndarray, count: int, B: np.ndarray,
                          coarse_layout: Layout, first_coarse: int):
    """The distributed tentative prolongator and this rank's coarse candidates.

    ``first_coarse`` is the global id of this rank's first coarse unknown
    (coarse unknowns are numbered rank by rank). Collective on
    ``layout.comm`` (DistCSR construction).
    """
    T, R = fit_candidates(agg, count, B)
    Tg = sp.csr_matrix((T.data, T.indices.astype(np.int64) + first_coarse, T.indptr),
                       shape=(layout.local_size, coarse_layout.global_size))
    return DistCSR.from_local_rows(Tg, layout, coarse_layout, check_finite=False), R
