"""The bad-input cases of the unit test files: operands and files they share,
and the one check they run. Each unit's file holds a table ``BAD_INPUTS`` of
``(id, exception type, message pattern, call)``; every case must raise the
same exception type on every rank (checked with assert_raises_collective),
and none may hang (pytest-timeout turns a deadlock into a failure)."""

import os
import types

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

import preconditioners
import topology
from dmsolve import DistCSR, DistLinearOperator, DistVector, Layout, gallery
from mpitest import assert_raises_collective

WORLD = MPI.COMM_WORLD

#: Calls with operands on COMM_SELF: valid at one rank, where COMM_SELF is
#: congruent with COMM_WORLD.
VALID_AT_ONE_RANK = {"solve-rhs-on-comm-self", "solve-x0-on-comm-self",
                     "matvec-vector-on-comm-self", "critical-points-values-on-comm-self"}


def make_env(tmp_path_factory):
    """Small operands and files shared by the cases (paths from rank 0).
    Collective on COMM_WORLD."""
    comm = WORLD
    e = types.SimpleNamespace(comm=comm, rank=comm.rank, size=comm.size)
    e.A = gallery.poisson2d(6, comm)
    e.n = e.A.shape[0]
    e.b = gallery.rhs(e.A, "random", seed=1)
    e.grid = topology.Grid((4, 4), comm)
    root = comm.bcast(str(tmp_path_factory.mktemp("bad")) if comm.rank == 0 else None, root=0)
    e.dir = root
    e.missing = os.path.join(root, "does-not-exist.mtx")
    e.garbage = os.path.join(root, "garbage.mtx")
    e.truncated = os.path.join(root, "truncated.mtx")
    e.notnpy = os.path.join(root, "image.npy")
    e.plainfile = os.path.join(root, "plain")
    if comm.rank == 0:
        with open(e.garbage, "w") as f:
            f.write("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\nxx yy\n")
        with open(e.truncated, "w") as f:
            f.write("%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 1.0\n2 2 1.0\n")
        with open(e.notnpy, "w") as f:
            f.write("not an array")
        with open(e.plainfile, "w") as f:
            f.write("x")
    comm.Barrier()
    return e


def check_bad_input(env, request, exc, match, call):
    """Run one case: ``call(env)`` raises ``exc`` matching ``match`` on every
    rank, or, for a call that is valid at one rank, simply works there.
    Collective on COMM_WORLD."""
    if env.size == 1 and request.node.callspec.id in VALID_AT_ONE_RANK:
        call(env)          # must simply work
        return
    assert_raises_collective(env.comm, exc, call, env, match=match)


# -- operands the cases build -------------------------------------------------------------

def on_last_rank(e, local, bad):
    """``local`` with ``bad`` written into its last entry on the last rank that
    owns anything (so exactly one rank holds the bad value)."""
    owners = np.flatnonzero(e.A.row_layout.local_sizes)
    out = local.copy()
    if e.rank == owners[-1]:
        out[-1] = bad
    return out


def zero_diagonal_matrix(e, row):
    S = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], (9, 9), format="lil")
    S[row, row] = 0.0
    return DistCSR.from_global(S.tocsr(), e.comm)


def zero_pivot_matrix(e):
    # a permutation matrix: nonsingular, but every ILU(0) pivot is zero
    S = sp.block_diag([sp.csr_matrix([[0.0, 1.0], [1.0, 0.0]])] * 4, format="csr")
    return DistCSR.from_global(S, e.comm)


def self_vector(e):
    return DistVector.zeros(Layout.block(e.n, MPI.COMM_SELF))


def other_size(e, extra=1):
    return DistVector.zeros(Layout.block(e.n + extra, e.comm))


def wrong_output_operator(e):
    # computes A x on every rank (so the halo exchange completes), then
    # returns a vector of the wrong size on the last rank only
    def mv(x):
        y = e.A.matvec(x)
        return other_size(e) if e.rank == e.size - 1 else y
    return DistLinearOperator(e.A.row_layout, e.A.col_layout, mv)


def raise_on(rank, exc):
    def f(*args):
        if WORLD.rank == rank:
            raise exc
    return f


def pc_failing_on_last_rank(r):
    if WORLD.rank == WORLD.size - 1:
        raise FloatingPointError("preconditioner overflow")
    return r.copy()


def make_pc(name, **options):
    """A case's call: build the preconditioner ``name`` for the shared matrix."""
    return lambda e: preconditioners.make(name, e.A, **options)
