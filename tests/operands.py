"""Operands the core tests share: a layout in which rank 0 owns nothing,
random real and complex matrices and vectors, and a badly ordered Poisson
matrix with a random partition for the partitioners."""

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Layout, gallery
from dmsolve import partition as part

COMM = MPI.COMM_WORLD


def uneven_layout(n, comm):
    """Rank 0 owns nothing (at 2+ ranks), the others uneven blocks."""
    if comm.size == 1:
        return Layout.block(n, comm)
    counts = np.zeros(comm.size, dtype=np.int64)
    counts[1:] = [len(r) for r in np.array_split(np.arange(n), comm.size - 1)]
    return Layout(np.concatenate(([0], np.cumsum(counts))), comm)


def real_matrix(m, n, seed=0, density=0.3):
    return sp.random(m, n, density=density, random_state=seed, format="csr")


def complex_matrix(m, n, seed=0, density=0.3):
    R = real_matrix(m, n, seed, density)
    return sp.csr_matrix(R + 1j * R.multiply(sp.random(m, n, density=1.0,
                                                       random_state=seed + 50)) - 0.5j * R)


def dominant(n, seed=0, kind="complex", density=0.12):
    """Diagonally dominant (nonzero pivots everywhere), structurally symmetric."""
    R = real_matrix(n, n, seed, density)
    R = R + R.T
    if kind == "complex":
        S = sp.csr_matrix(R + 1j * sp.random(n, n, density=1.0, random_state=seed + 9)
                          .multiply(R != 0))
        d = 1.0 + np.asarray(abs(S).sum(axis=1)).ravel()
        return sp.csr_matrix(S + sp.diags(d * (1.0 + 0.5j)))
    d = 1.0 + np.asarray(abs(R).sum(axis=1)).ravel()
    return sp.csr_matrix(R + sp.diags(d))


def vector(n, seed, kind):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n)
    return v + 1j * rng.standard_normal(n) if kind == "complex" else v


def scrambled_poisson2d(n, seed=0):
    """A 2D Poisson matrix in a random order: block rows then cut badly."""
    A = gallery.poisson2d(n, MPI.COMM_SELF).to_scipy()
    p = np.random.default_rng(seed).permutation(n * n)
    return DistCSR.from_global(A[p][:, p], COMM), A[p][:, p].tocsr()


def random_partition(layout, seed=1):
    rng = np.random.default_rng(seed + layout.rank)
    return part.Partition(layout, rng.integers(0, COMM.size, layout.local_size))


def random_matrix(m, n, density=0.3, seed=0, empty_rows=(), empty_cols=()):
    A = sp.random(m, n, density=density, random_state=seed, format="lil")
    for i in empty_rows:
        A[i, :] = 0
    for j in empty_cols:
        A[:, j] = 0
    return sp.csr_matrix(A)
