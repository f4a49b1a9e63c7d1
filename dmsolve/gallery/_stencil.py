"""Constant-coefficient stencils on Dirichlet grids: Poisson in 1-3D,
anisotropic diffusion, convection-diffusion and the shifted Laplacian.

Grid points are numbered lexicographically with x fastest, ``i = x + y*nx +
z*nx*ny``; boundary points are eliminated (no stored entries for neighbours
outside the grid), as ``pyamg.gallery`` does. Every rank builds only the rows
it owns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .._layout import Layout
from .._matrix import DistCSR
from ..validate import check_int, check_real
from ._common import _checks, _doc, _grid, _real_vector

__all__ = ["poisson1d", "poisson2d", "poisson3d", "anisotropic_diffusion",
           "convection_diffusion", "shifted_laplacian"]

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
