"""Test matrices built in parallel: every rank builds only the rows it owns.

Stencil problems number the grid points lexicographically with x fastest,
``i = x + y*nx + z*nx*ny``, and eliminate Dirichlet boundary points (no
stored entries for neighbours outside the grid), as ``pyamg.gallery`` does.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._layout import Layout
from ._matrix import DistCSR
from ._registry import Registry
from ._vector import DistVector
from .bsp import sorted_unique
from .validate import agreed, check_int, check_real

__all__ = [
    "poisson1d", "poisson2d", "poisson3d", "anisotropic_diffusion",
    "convection_diffusion", "shifted_laplacian", "random_spd",
    "graph_laplacian", "rhs", "PROBLEMS", "ProblemSize", "problem_size", "problem_options",
]


# -- argument checks: through dmsolve.validate, agreed across ranks ---------

def _checks(comm):
    """``agreed(comm)``, once ``comm`` is known to be a communicator."""
    # Not agreed: a rank without a communicator cannot take part anyway.
    if not isinstance(comm, MPI.Comm):
        raise TypeError("comm must be an mpi4py MPI.Comm, got %s" % type(comm).__name__)
    return agreed(comm)


#: The most rows a gallery matrix may have: global indices are int64, and a
#: row count near 2**63 would overflow in ``x + y*nx + z*nx*ny``.
MAX_ROWS = 2 ** 62


def _grid(n, ny, nz, dim: int) -> tuple[int, ...]:
    nx = check_int("n", n, low=1)
    ny = nx if ny is None else check_int("ny", ny, low=1)
    nz = nx if nz is None else check_int("nz", nz, low=1)
    grid = (nx, ny, nz)[:dim]
    # Python integers: np.prod would wrap around silently for n = 10**8 in 3D
    if math.prod(grid) > MAX_ROWS:
        raise ValueError("a %s grid has %.3g points, more than the 2**62 rows that "
                         "64-bit indices can number" % ("x".join(map(str, grid)),
                                                         math.prod(grid)))
    return grid


def _doc(func):
    """Put the shared parameter descriptions (:data:`_PARAMS`) into ``func``'s
    docstring, at its ``%(name)s`` fields, as scipy's ``doccer`` does."""
    if func.__doc__:              # None under python -OO
        func.__doc__ = func.__doc__ % _PARAMS
    return func


#: Descriptions that several generators' docstrings share, by field name.
_PARAMS = {
    "comm": "comm : MPI.Comm\n        Communicator; rows are distributed in contiguous blocks.",
    "n_x": "n : int\n        Grid points in x (the fastest index), positive.",
    "ny": "ny : int, optional\n        Grid points in y; default ``n``.",
    "ny_nz": "ny, nz : int, optional\n        Grid points in y and z; default ``n``.",
    "bad_size": "TypeError, ValueError\n        On every rank, if a size is not a positive integer.",
}


def _real_vector(name: str, value, length: int) -> np.ndarray:
    """``length`` finite reals, each checked by :func:`check_real`."""
    if np.ndim(value) != 1 or len(value) != length:
        raise ValueError("%s must have %d entries, got shape %s"
                         % (name, length, np.shape(value)))
    return np.array([check_real("%s[%d]" % (name, i), v) for i, v in enumerate(value)])


# -- the stencil engine --------------------------------------------------------

def _stencil_matrix(grid: tuple[int, ...], stencil: dict, comm):
    """Assemble a constant-coefficient stencil on a Dirichlet grid.

    ``stencil`` maps offsets ``(dx[, dy[, dz]])`` to coefficients; zero
    coefficients are not stored. Each rank builds its own block of rows with
    array operations over all its rows at once. Collective on ``comm``.
    """
    grid = tuple(int(g) for g in grid)
    nglobal = math.prod(grid)
    layout = Layout.block(nglobal, comm)
    start, stop = layout.owned_range
    rows = np.arange(start, stop, dtype=np.int64)
    # coordinates of the owned points, x fastest
    coords, rest = [], rows
    for g in grid:
        coords.append(rest % g)
        rest = rest // g
    strides = np.cumprod((1,) + grid[:-1])

    r_parts, c_parts, v_parts = [], [], []
    for offset, value in sorted(stencil.items()):
        if value == 0:
            continue
        keep = np.ones(rows.size, dtype=bool)
        shift = 0
        for d, o in enumerate(offset):
            if o:
                keep &= (coords[d] + o >= 0) & (coords[d] + o < grid[d])
                shift += o * int(strides[d])
        r = rows[keep]
        r_parts.append(r - start)
        c_parts.append(r + shift)
        v_parts.append(np.full(r.size, value, dtype=np.float64))
    local = _local_csr(r_parts, c_parts, v_parts, (stop - start, nglobal))
    return DistCSR.from_local_rows(local, layout)


def _local_csr(r_parts, c_parts, v_parts, shape) -> sp.csr_matrix:
    cat = (lambda parts, dt: np.concatenate(parts).astype(dt, copy=False)
           if parts else np.zeros(0, dtype=dt))
    local = sp.csr_matrix((cat(v_parts, np.float64),
                           (cat(r_parts, np.int64), cat(c_parts, np.int64))),
                          shape=shape)
    local.sum_duplicates()  # also sorts the column indices of each row
    return local


def _laplacian_stencil(dim: int) -> dict:
    stencil = {(0,) * dim: 2.0 * dim}
    for d in range(dim):
        for o in (-1, 1):
            off = [0] * dim
            off[d] = o
            stencil[tuple(off)] = -1.0
    return stencil


# -- Poisson ---------------------------------------------------------------------

@_doc
def poisson1d(n: int, comm: MPI.Comm):
    """1D Poisson matrix ``tridiag(-1, 2, -1)`` of order ``n`` (Dirichlet).

    Collective on ``comm``.

    Parameters
    ----------
    n : int
        Number of interior grid points, positive.
    %(comm)s

    Returns
    -------
    DistCSR
        Equal to ``pyamg.gallery.poisson((n,))``.

    Raises
    ------
    TypeError, ValueError
        On every rank, if ``n`` is not a positive integer.
    """
    with _checks(comm):
        grid = _grid(n, None, None, 1)
    return _stencil_matrix(grid, _laplacian_stencil(1), comm)


@_doc
def poisson2d(n: int, comm: MPI.Comm, ny: int | None = None):
    """2D 5-point Poisson matrix on an ``n x ny`` grid (Dirichlet, unscaled).

    Collective on ``comm``.

    Parameters
    ----------
    %(n_x)s
    %(comm)s
    %(ny)s

    Returns
    -------
    DistCSR
        Diagonal 4, off-diagonals -1; row ``x + y*n``. Equal to
        ``pyamg.gallery.poisson((ny, n))`` (pyamg's last grid axis is fastest).

    Raises
    ------
    %(bad_size)s
    """
    with _checks(comm):
        grid = _grid(n, ny, None, 2)
    return _stencil_matrix(grid, _laplacian_stencil(2), comm)


@_doc
def poisson3d(n: int, comm: MPI.Comm, ny: int | None = None, nz: int | None = None):
    """3D 7-point Poisson matrix on an ``n x ny x nz`` grid (Dirichlet, unscaled).

    Collective on ``comm``.

    Parameters
    ----------
    %(n_x)s
    %(comm)s
    %(ny_nz)s

    Returns
    -------
    DistCSR
        Diagonal 6, off-diagonals -1; row ``x + y*n + z*n*ny``. Equal to
        ``pyamg.gallery.poisson((nz, ny, n))``.

    Raises
    ------
    %(bad_size)s
    """
    with _checks(comm):
        grid = _grid(n, ny, nz, 3)
    return _stencil_matrix(grid, _laplacian_stencil(3), comm)


# -- anisotropic diffusion ------------------------------------------------------

def _diffusion_stencil_fd(epsilon: float, theta: float) -> dict:
    # The same arithmetic as pyamg.gallery.diffusion_stencil_2d(type='FD'), so
    # the entries agree to the last bit; pyamg's S[i, j] is offset (i-1, j-1)
    # in (x, y).
    eps = float(epsilon)
    C, S = np.cos(theta), np.sin(theta)
    CS, CC, SS = C * S, C ** 2, S ** 2
    a = 0.5 * (eps - 1) * CS
    b = -(eps * SS + CC)
    c = -a
    d = -(eps * CC + SS)
    e = 2.0 * (eps + 1)
    table = np.array([[a, b, c], [d, e, d], [c, b, a]])
    return {(i - 1, j - 1): float(table[i, j]) for i in range(3) for j in range(3)}


@_doc
def anisotropic_diffusion(n: int, comm: MPI.Comm, epsilon: float = 1e-3,
                          theta: float = 0.0, ny: int | None = None):
    """Rotated anisotropic diffusion ``-div(Q diag(1, eps) Q^T grad u)`` in 2D.

    The 9-point second-order finite-difference stencil with ``h = 1`` of
    ``pyamg.gallery.diffusion_stencil_2d(epsilon, theta, type='FD')``, on an
    ``n x ny`` Dirichlet grid. Collective on ``comm``.

    Parameters
    ----------
    %(n_x)s
    %(comm)s
    epsilon : float, optional
        Diffusion coefficient across the rotated axis (1 along it).
    theta : float, optional
        Rotation angle from the x axis, in radians.
    %(ny)s

    Returns
    -------
    DistCSR
        Symmetric; positive definite for ``epsilon > 0``. Row ``x + y*n``.
        Equal to ``pyamg.gallery.stencil_grid(S.T, (ny, n))`` with ``S`` the
        pyamg stencil. Zero stencil coefficients (e.g. the corners at
        ``theta = 0``) are not stored.

    Raises
    ------
    TypeError, ValueError
        On every rank, for a bad size or a non-finite parameter.

    References
    ----------
    .. [1] L. N. Olson, J. B. Schroder, PyAMG: algebraic multigrid solvers in
       Python, ``pyamg.gallery.diffusion``.
    """
    with _checks(comm):
        grid, stencil = _anisotropic_system(n, epsilon, theta, ny)
    return _stencil_matrix(grid, stencil, comm)


def _anisotropic_system(n, epsilon, theta, ny):
    """The grid and stencil of :func:`anisotropic_diffusion`, checked. Pure function."""
    grid = _grid(n, ny, None, 2)
    eps = check_real("epsilon", epsilon)
    th = check_real("theta", theta)
    return grid, _diffusion_stencil_fd(eps, th)


# -- convection-diffusion ----------------------------------------------------

@_doc
def convection_diffusion(n: int, comm: MPI.Comm, dim: int = 2,
                         wind: Sequence[float] | None = None,
                         diffusion: float = 0.01):
    """Upwind convection-diffusion ``-nu lap(u) + w . grad(u)``, nonsymmetric.

    On the unit square (cube) with ``n`` interior points per direction,
    ``h = 1/(n+1)`` and Dirichlet boundaries, the matrix is ``h**2`` times the
    discrete operator: centred diffusion ``nu * (2*dim, -1)`` plus first-order
    upwind convection ``h * w_d * (u_i - u_{i-1})`` for ``w_d > 0`` (and the
    forward difference for ``w_d < 0``). It is an M-matrix for any wind; the
    cell Peclet number is ``h |w_d| / (2 nu)``. Collective on ``comm``.

    Parameters
    ----------
    n : int
        Grid points per direction, positive.
    %(comm)s
    dim : {2, 3}
        Space dimension.
    wind : sequence of ``dim`` floats, optional
        Constant velocity ``w``; default ``(1.0, 0.5)`` or ``(1.0, 0.5, 0.25)``.
    diffusion : float, optional
        Diffusion coefficient ``nu > 0``.

    Returns
    -------
    DistCSR
        Diagonal ``2*dim*nu + h*sum|w_d|``; the neighbour at ``-d`` gets
        ``-nu - h*max(w_d, 0)``, at ``+d`` ``-nu - h*max(-w_d, 0)``.

    Raises
    ------
    TypeError, ValueError
        On every rank, for a bad size, dimension, wind or diffusion.
    """
    with _checks(comm):
        grid, stencil = _convdiff_system(n, dim, wind, diffusion)
    return _stencil_matrix(grid, stencil, comm)


def _convdiff_system(n, dim, wind, diffusion):
    """The grid and stencil of :func:`convection_diffusion`, checked. Pure function."""
    dim = check_int("dim", dim, low=2, high=3)
    grid = _grid(n, None, None, dim)
    w = _real_vector("wind", (1.0, 0.5, 0.25)[:dim] if wind is None else wind, dim)
    nu = check_real("diffusion", diffusion, low=0.0, low_open=True)
    h = 1.0 / (grid[0] + 1)
    stencil = {(0,) * dim: 2 * dim * nu + h * float(np.abs(w).sum())}
    for d in range(dim):
        for o in (-1, 1):
            off = [0] * dim
            off[d] = o
            # upwind: the neighbour the wind comes from carries the convection
            stencil[tuple(off)] = -nu - h * max(-o * float(w[d]), 0.0)
    return grid, stencil


# -- the parGeMSLR shifted operator -------------------------------------------

@_doc
def shifted_laplacian(n: int, comm: MPI.Comm, shift: float = 0.0,
                      alpha: Sequence[float] = (0.01, -0.01, 0.0),
                      ny: int | None = None, nz: int | None = None):
    """The 3D 7-point test operator of parGeMSLR: diagonal ``6 - shift``.

    The neighbour at ``+d`` (the next point along axis ``d``) gets
    ``-1 + alpha[d]``, the neighbour at ``-d`` gets ``-1 - alpha[d]``, so
    ``alpha`` adds a centred convection term and makes the matrix
    nonsymmetric; ``shift > 0`` moves the spectrum left and makes it
    indefinite once ``shift`` exceeds the smallest eigenvalue of the
    Laplacian. Collective on ``comm``.

    Parameters
    ----------
    %(n_x)s
    %(comm)s
    shift : float, optional
        The shift ``s``; parGeMSLR's tests use 0, 0.1 and 0.2.
    alpha : sequence of 3 floats, optional
        Per-axis skew ``(alpha_x, alpha_y, alpha_z)``.
    %(ny_nz)s

    Returns
    -------
    DistCSR

    Raises
    ------
    TypeError, ValueError
        On every rank, for a bad size, shift or alpha.

    References
    ----------
    .. [1] T. Xu, V. Kalantzis, R. Li, Y. Xi, G. Dillon, Y. Saad, parGeMSLR:
       a parallel multilevel Schur complement low-rank preconditioning and
       solution package for general sparse matrices, Parallel Computing 113
       (2022).
    """
    with _checks(comm):
        grid, stencil = _shifted_system(n, shift, alpha, ny, nz)
    return _stencil_matrix(grid, stencil, comm)


def _shifted_system(n, shift, alpha, ny, nz):
    """The grid and stencil of :func:`shifted_laplacian`, checked. Pure function."""
    grid = _grid(n, ny, nz, 3)
    s = check_real("shift", shift)
    a = _real_vector("alpha", alpha, 3)
    stencil = {(0, 0, 0): 6.0 - s}
    for d in range(3):
        for o in (-1, 1):
            off = [0, 0, 0]
            off[d] = o
            stencil[tuple(off)] = -1.0 + o * float(a[d])
    return grid, stencil


# -- counter-based random numbers (rank-count independent) --------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    # splitmix64 finaliser: uint64 arithmetic wraps, which is what we want
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


def _hash(seed: int, *keys: np.ndarray) -> np.ndarray:
    """A 64-bit hash of ``(seed, *keys)``, element-wise. Pure function."""
    h = _mix(np.full(np.broadcast(*keys).shape if keys else (), seed,
                     dtype=np.uint64) * _GOLDEN + _GOLDEN)
    for k in keys:
        h = _mix(h ^ (np.asarray(k).astype(np.uint64) + _GOLDEN + (h << np.uint64(6))))
    return h


def _uniform(seed: int, *keys: np.ndarray) -> np.ndarray:
    """Uniform floats in ``[0, 1)`` from :func:`_hash` (53 random bits)."""
    return (_hash(seed, *keys) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _add_diagonal(offdiag, diag_extra: float, comm):
    """``offdiag + diag(rowsum|offdiag| + diag_extra)`` from this rank's rows.

    The row sums are taken over sorted columns, so they do not depend on the
    order in which the off-diagonal entries arrived. Collective on ``comm``.
    """
    local = sp.csr_matrix(offdiag.local_rows())
    local.sum_duplicates()
    layout = offdiag.row_layout
    start = layout.start
    absrow = sp.csr_matrix((np.abs(local.data), local.indices, local.indptr),
                           shape=local.shape)
    d = absrow @ np.ones(local.shape[1]) + diag_extra
    diag = sp.csr_matrix((d, (np.arange(layout.local_size),
                              np.arange(start, start + layout.local_size))),
                         shape=local.shape)
    out = (local + diag).tocsr()
    out.sort_indices()
    return DistCSR.from_local_rows(out, layout)


@_doc
def random_spd(n: int, comm: MPI.Comm, density: float = 0.01, seed: int = 0,
               shift: float = 1.0):
    """Random sparse symmetric positive definite matrix, the same at any rank count.

    Row ``i`` draws ``ceil(density * (n - 1) / 2)`` upper-triangular columns
    ``j > i`` and values uniform in ``[-1, 1)`` from a counter-based hash of
    ``(seed, i, k)``; the mirrored entries go to their owners through
    ``DistCSR.from_coo``. The diagonal is the absolute row sum of the
    off-diagonal entries plus ``shift``, so the matrix is strictly
    diagonally dominant with a positive diagonal, hence SPD with smallest
    eigenvalue at least ``shift``. About ``density * n`` off-diagonal entries
    per row (fewer near the end, where draws collide). Collective on ``comm``.

    Parameters
    ----------
    n : int
        Order, positive.
    %(comm)s
    density : float, optional
        Target fraction of off-diagonal nonzeros per row, in ``(0, 1]``.
    seed : int, optional
        Non-negative seed; the matrix is a function of ``(n, density, seed)``.
    shift : float, optional
        Diagonal dominance margin, positive.

    Returns
    -------
    DistCSR

    Raises
    ------
    TypeError, ValueError
        On every rank, for a bad ``n``, ``density``, ``seed`` or ``shift``.
    """
    with _checks(comm):
        nn, m, sd, sh = _random_spd_params(n, density, seed, shift)

    layout = Layout.block(nn, comm)
    start, stop = layout.owned_range
    rows = np.repeat(np.arange(start, stop, dtype=np.int64), m)
    k = np.tile(np.arange(m, dtype=np.int64), stop - start)
    span = nn - 1 - rows
    keep = span > 0
    rows, k, span = rows[keep], k[keep], span[keep]
    cols = rows + 1 + (_hash(sd, rows, k) % span.astype(np.uint64)).astype(np.int64)
    # one value per distinct (i, j), independent of which draw produced it
    key = sorted_unique(rows * nn + cols)
    rows, cols = key // nn, key % nn
    vals = 2.0 * _uniform(sd + 1, rows, cols) - 1.0
    nz = vals != 0.0
    rows, cols, vals = rows[nz], cols[nz], vals[nz]
    offdiag = DistCSR.from_coo(np.concatenate((rows, cols)), np.concatenate((cols, rows)),
                               np.concatenate((vals, vals)), (nn, nn), comm,
                               layout=layout)
    return _add_diagonal(offdiag, sh, comm)


def _random_spd_params(n, density, seed, shift):
    """``(n, draws per row, seed, shift)`` of :func:`random_spd`, checked. Pure function."""
    nn = check_int("n", n, low=1)
    dens = check_real("density", density, low=0.0, high=1.0, low_open=True)
    sd = check_int("seed", seed, low=0)
    sh = check_real("shift", shift, low=0.0, low_open=True)
    if nn > MAX_ROWS:
        raise ValueError("n = %d is more than the 2**62 rows that 64-bit indices can "
                         "number" % nn)
    return nn, int(np.ceil(dens * (nn - 1) / 2)), sd, sh


# -- graph Laplacians ----------------------------------------------------------------

@_doc
def graph_laplacian(edges, n: int, comm: MPI.Comm, weights=None):
    """Laplacian ``D - W`` of an undirected graph given as a distributed edge list.

    Each rank passes any subset of the edges (an edge may be given by any
    rank, in either direction); repeated edges add their weights; self-loops
    are ignored (they cancel in ``D - W``). The degree is summed over sorted
    columns after assembly, so every row sums to zero up to rounding and the
    matrix does not depend on the rank count when the weights are.
    Collective on ``comm``.

    Parameters
    ----------
    edges : array_like of int, shape (m, 2)
        This rank's edges ``(u, v)`` with ``0 <= u, v < n``; ``m`` may be 0.
    n : int
        Number of vertices, positive.
    %(comm)s
    weights : array_like of float, shape (m,), optional
        Finite edge weights; default 1.

    Returns
    -------
    DistCSR
        Symmetric; positive semidefinite for non-negative weights.

    Raises
    ------
    TypeError, ValueError
        On every rank, if any rank passes a bad ``n``, malformed or
        out-of-range edges, or weights of the wrong shape or non-finite.
    """
    with _checks(comm):
        nn = check_int("n", n, low=1)
        e = np.asarray(edges)
        if e.size == 0:
            e = np.zeros((0, 2), dtype=np.int64)
        if e.ndim != 2 or e.shape[1] != 2:
            raise ValueError("edges must have shape (m, 2), got %s" % (e.shape,))
        if not np.issubdtype(e.dtype, np.integer):
            raise TypeError("edges must be integers, got dtype %s" % e.dtype)
        e = e.astype(np.int64)
        if e.size and (e.min() < 0 or e.max() >= nn):
            raise ValueError("edges must be vertex ids in [0, n) = [0, %d)" % nn)
        if weights is None:
            w = np.ones(e.shape[0])
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (e.shape[0],):
                raise ValueError("weights must have shape (%d,) like the edges, got %s"
                                 % (e.shape[0], w.shape))
            if not np.all(np.isfinite(w)):
                raise ValueError("weights must be finite")
    keep = e[:, 0] != e[:, 1]
    u, v, w = e[keep, 0], e[keep, 1], w[keep]
    layout = Layout.block(nn, comm)
    adj = DistCSR.from_coo(np.concatenate((u, v)), np.concatenate((v, u)),
                           np.concatenate((-w, -w)), (nn, nn), comm, layout=layout)
    local = sp.csr_matrix(adj.local_rows())
    local.sum_duplicates()
    d = -(local @ np.ones(nn))
    start = layout.start
    diag = sp.csr_matrix((d, (np.arange(layout.local_size),
                              np.arange(start, layout.stop))), shape=local.shape)
    out = (local + diag).tocsr()
    out.sort_indices()
    return DistCSR.from_local_rows(out, layout)


# -- right-hand sides and the registry -----------------------------------------

def rhs(A, kind: str = "ones", seed: int = 0) -> DistVector:
    """A right-hand side for ``A x = b``, the same at any rank count.

    Not collective (the entries come from the global index), but it checks
    ``kind`` identically on every rank.

    Parameters
    ----------
    A : DistCSR
        The matrix; ``b`` takes its row layout.
    kind : {"ones", "random"}
        All ones, or uniform in ``[-1, 1)`` from a hash of ``(seed, i)``.
    seed : int, optional
        Non-negative seed for ``kind="random"``.

    Returns
    -------
    DistVector
    """
    layout = getattr(A, "row_layout", None)
    if not isinstance(layout, Layout):
        raise TypeError("A must be a distributed matrix or operator with a row_layout, "
                        "got %s" % type(A).__name__)
    if kind == "ones":
        return DistVector(layout, np.ones(layout.local_size))
    if kind == "random":
        seed = check_int("seed", seed, low=0)
        idx = np.arange(layout.start, layout.stop, dtype=np.int64)
        return DistVector(layout, 2.0 * _uniform(int(seed) + 7, idx) - 1.0)
    raise ValueError("kind must be 'ones' or 'random', got %r" % (kind,))


# -- the registry, with each problem's size before it is built ---------------------

class ProblemSize(NamedTuple):
    """The size of a gallery problem, known before it is built.

    Not collective: a plain record (see :func:`problem_size`).

    Attributes
    ----------
    rows : int
        Global number of rows (exact).
    nnz : int
        Global number of stored entries: exact when ``exact``, else an upper bound.
    exact : bool
        Whether ``nnz`` is exact (the stencil problems) or a bound (random ones).
    build_bytes_per_nnz : float
        Peak memory of the assembly per stored entry on the rank that builds
        it (measured: the COO triplets, their CSR conversion and the
        diagonal/off-diagonal split are alive at once).
    """

    rows: int
    nnz: int
    exact: bool
    build_bytes_per_nnz: float

    def local_rows(self, ranks: int) -> int:
        """Rows of the largest block of a block layout over ``ranks``. Not collective."""
        return -(-self.rows // max(int(ranks), 1))

    def build_bytes(self, ranks: int) -> int:
        """Peak bytes that building needs on the rank with the most rows, over
        ``ranks`` ranks (entries in proportion to rows). Not collective."""
        local_nnz = self.nnz * self.local_rows(ranks) / max(self.rows, 1)
        return int(math.ceil(local_nnz * self.build_bytes_per_nnz))


# Measured peak resident growth per stored entry while building (1 and 2 ranks,
# poisson2d 1000^2, poisson3d 80^3: 107-108 B; random_spd 20000 at density 0.01:
# 180 B), with a little margin.
_STENCIL_BYTES_PER_NNZ = 112.0
_RANDOM_BYTES_PER_NNZ = 184.0


def _stencil_size(grid: tuple[int, ...], stencil: dict) -> ProblemSize:
    """Rows and entries of :func:`_stencil_matrix` on ``grid``, counted without
    building: an offset ``o`` couples ``prod(g_d - |o_d|)`` pairs of grid
    points. Pure function, in Python integers (no overflow)."""
    nnz = sum(math.prod(max(g - abs(o), 0) for g, o in zip(grid, off))
              for off, value in stencil.items() if value != 0)
    return ProblemSize(math.prod(grid), nnz, True, _STENCIL_BYTES_PER_NNZ)


def _random_spd_size(n, density, seed, shift) -> ProblemSize:
    nn, m, _, _ = _random_spd_params(n, density, seed, shift)
    # row i draws min(m, n-1-i) upper entries (fewer after collisions), mirrored,
    # plus the diagonal: sum_{k<n} min(m, k) in closed form
    upper = nn * (nn - 1) // 2 if m >= nn else m * (m - 1) // 2 + m * (nn - m)
    return ProblemSize(nn, nn + 2 * upper, False, _RANDOM_BYTES_PER_NNZ)


def _fixed(func, name: str, **fixed):
    """``func`` with some keywords fixed, as a problem ``f(n, comm, **options)``
    whose signature is ``func``'s without them (so :func:`problem_options`
    lists what may still be given)."""
    sig = inspect.signature(func)
    kept = sig.replace(parameters=[p for p in sig.parameters.values() if p.name not in fixed])

    def problem(n, comm, **options):
        kept.bind(n, comm, **options)          # a fixed keyword is refused, not overridden
        return func(n, comm, **fixed, **options)

    problem.__signature__ = kept
    problem.__name__ = problem.__qualname__ = name
    problem.__doc__ = "%s with %s. Collective on ``comm``." % (
        func.__name__, ", ".join("%s=%r" % kv for kv in fixed.items()))
    return problem


#: Problems by name; each is called as ``PROBLEMS[name](n, comm, **options)``.
PROBLEMS = Registry("problem")

# Each problem's size, by name (see problem_size), called with the builder's
# arguments after its own defaults are applied. The checked grid and stencil
# come from the builder's own helper, so the count cannot drift from what is built.
_SIZES = {}
for _name, _f, _size in [
        ("poisson1d", poisson1d, lambda n: _stencil_size(_grid(n, None, None, 1),
                                                         _laplacian_stencil(1))),
        ("poisson2d", poisson2d, lambda n, ny: _stencil_size(_grid(n, ny, None, 2),
                                                             _laplacian_stencil(2))),
        ("poisson3d", poisson3d, lambda n, ny, nz: _stencil_size(_grid(n, ny, nz, 3),
                                                                 _laplacian_stencil(3))),
        ("anisotropic2d", anisotropic_diffusion, lambda n, epsilon, theta, ny: _stencil_size(
            *_anisotropic_system(n, epsilon, theta, ny))),
        ("convdiff2d", _fixed(convection_diffusion, "convdiff2d", dim=2),
         lambda n, wind, diffusion: _stencil_size(*_convdiff_system(n, 2, wind, diffusion))),
        ("convdiff3d", _fixed(convection_diffusion, "convdiff3d", dim=3),
         lambda n, wind, diffusion: _stencil_size(*_convdiff_system(n, 3, wind, diffusion))),
        ("shifted3d", shifted_laplacian, lambda n, shift, alpha, ny, nz: _stencil_size(
            *_shifted_system(n, shift, alpha, ny, nz))),
        ("random-spd", random_spd, _random_spd_size)]:
    PROBLEMS.register(_name, _f)
    _SIZES[_name] = _size
del _name, _f, _size


def problem_options(name: str) -> dict:
    """The options of gallery problem ``name`` and their defaults, from its signature.

    ``PROBLEMS[name](n, comm, **options)`` accepts exactly these keywords.
    Not collective.

    Raises
    ------
    ValueError
        If no such problem is registered (the message lists them).
    """
    params = list(inspect.signature(PROBLEMS[name]).parameters.values())[2:]
    return {p.name: (None if p.default is p.empty else p.default) for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def problem_size(name: str, n: int, **options) -> ProblemSize | None:
    """The rows and stored entries of ``PROBLEMS[name](n, comm, **options)``,
    computed without building it (and without a communicator).

    Not collective. The problem's arguments are checked as the builder
    checks them, so a bad option raises here the error building would.

    Returns
    -------
    ProblemSize or None
        None for a problem registered without a size (``PROBLEMS.register``
        of your own).

    Raises
    ------
    TypeError
        An option ``name`` does not take (the message lists its options).
    ValueError
        Unknown ``name``, or a bad size or option.

    Examples
    --------
    >>> size = problem_size("poisson3d", 64)
    >>> size.rows, size.nnz
    (262144, 1810432)
    """
    key = PROBLEMS.canonical(name)
    known = problem_options(key)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError("problem %s has no option %s; its options: %s"
                        % (key, ", ".join(map(repr, unknown)), ", ".join(known) or "none"))
    size = _SIZES.get(key)
    if size is None or PROBLEMS[key] is not _BUILT_IN.get(key):
        return None             # a problem of the user's, or a replaced one
    bound = inspect.signature(PROBLEMS[key]).bind(n, None, **options)
    bound.apply_defaults()
    args = dict(bound.arguments)
    del args[list(args)[1]]     # the communicator: sizes do not depend on it
    return size(**args)


_BUILT_IN = dict(PROBLEMS.items())
