"""Problems and small pipelines the AMG tests share: gallery problems by
name, a CG + AMG solve, the serial iteration count, the first stages of a
hierarchy, and a saddle-point matrix AMG must refuse."""

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR
from dmsolve.krylov import cg
from mpitest import on_rank0
from preconditioners.amg.aggregate import standard_aggregation
from preconditioners.amg.coarse import coarse_layout
from preconditioners.amg.strength import symmetric_strength
from preconditioners.amg.tentative import tentative_prolongator

COMM = MPI.COMM_WORLD


def amg_problem(name, comm):
    kind, n = name.rsplit("-", 1)
    return getattr(gallery, kind)(int(n), comm)


def amg_solve(A, **options):
    M = preconditioners.make("amg", A, **options)
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-8, M=M, maxiter=100)
    return M, info


def serial_iterations(name, **options):
    """CG + amg iterations on COMM_SELF (computed on rank 0, broadcast)."""
    def serial():
        _, info = amg_solve(amg_problem(name, MPI.COMM_SELF), **options)
        return info.iterations

    return on_rank0(COMM, serial)


def hierarchy_pieces(A, theta=0.0, B=None):
    S = symmetric_strength(A, theta)
    agg, count = standard_aggregation(S)
    Bl = np.ones((A.row_layout.local_size, 1)) if B is None else B
    clay, first = coarse_layout(count * Bl.shape[1], COMM, 1)
    T, Bc = tentative_prolongator(A.row_layout, agg, count, Bl, clay, first)
    return S, agg, count, T, Bc


def saddle_point(comm):
    """``[[L, B^T], [B, 0]]``: L the 2D Laplacian of 400 rows, B random sparse
    30 x 400 (the same on every rank), 30 zero-diagonal rows 400..429."""
    n = 20
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    L = sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))
    B = sp.random(30, 400, density=0.05, random_state=1)
    K = sp.bmat([[L, B.T], [B, None]]).tocsr()
    return DistCSR.from_global(K, comm)
