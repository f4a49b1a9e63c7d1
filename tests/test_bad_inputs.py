"""Bad inputs across the public API: every case raises the same exception type on
every rank (checked with assert_raises_collective) and none hangs (pytest-timeout
turns a deadlock into a failure). Cases cover shapes, layouts, dtypes, non-finite
values, zero pivots and zero diagonals, wrong communicators, unreadable files,
bad options, user code failing on one rank only, and, as valid inputs that must
not break, partitions where some ranks own nothing."""

import os
import types

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import preconditioners
import topology
from dmsolve import (DistCSR, DistLinearOperator, DistVector, Layout, cg, gallery, io,
                     partition, solve)
from dmsolve import checkpoint as ck
from mpitest import assert_allclose_collective, assert_collective, assert_raises_collective
from topology import io as tio

WORLD = MPI.COMM_WORLD


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Small operands and files shared by the cases (paths from rank 0)."""
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


# -- helpers building bad operands ---------------------------------------------------

def _on_last_rank(e, local, bad):
    """``local`` with ``bad`` written into its last entry on the last rank that
    owns anything (so exactly one rank holds the bad value)."""
    owners = np.flatnonzero(e.A.row_layout.local_sizes)
    out = local.copy()
    if e.rank == owners[-1]:
        out[-1] = bad
    return out


def _zero_diagonal_matrix(e, row):
    S = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], (9, 9), format="lil")
    S[row, row] = 0.0
    return DistCSR.from_global(S.tocsr(), e.comm)


def _zero_pivot_matrix(e):
    # a permutation matrix: nonsingular, but every ILU(0) pivot is zero
    S = sp.block_diag([sp.csr_matrix([[0.0, 1.0], [1.0, 0.0]])] * 4, format="csr")
    return DistCSR.from_global(S, e.comm)


def _self_vector(e):
    return DistVector.zeros(Layout.block(e.n, MPI.COMM_SELF))


def _other_size(e, extra=1):
    return DistVector.zeros(Layout.block(e.n + extra, e.comm))


def _wrong_output_operator(e):
    # computes A x on every rank (so the halo exchange completes), then
    # returns a vector of the wrong size on the last rank only
    def mv(x):
        y = e.A.matvec(x)
        return _other_size(e) if e.rank == e.size - 1 else y
    return DistLinearOperator(e.A.row_layout, e.A.col_layout, mv)


def _raise_on(rank, exc):
    def f(*args):
        if WORLD.rank == rank:
            raise exc
    return f


def _pc_failing_on_last_rank(r):
    if WORLD.rank == WORLD.size - 1:
        raise FloatingPointError("preconditioner overflow")
    return r.copy()


def _make(name, **options):
    """A case's call: build the preconditioner ``name`` for the shared matrix."""
    return lambda e: preconditioners.make(name, e.A, **options)


# -- the cases: (id, exception type, message pattern, call) ---------------------------

CASES = [
    # shapes and layouts
    ("solve-b-wrong-global-size", ValueError, "global size", lambda e: solve(e.A, _other_size(e))),
    ("solve-x0-wrong-global-size", ValueError, "x0", lambda e: solve(e.A, e.b, x0=_other_size(e))),
    ("solve-b-not-a-distvector", TypeError, "DistVector", lambda e: solve(e.A, np.ones(e.n))),
    ("solve-rectangular-matrix", ValueError, "square",
     lambda e: solve(DistCSR.from_global(sp.random(e.n, e.n + 2, 0.3, format="csr",
                                                   random_state=0), e.comm), e.b)),
    # a global A with a distributed b: the message names the one-line conversion
    ("solve-scipy-matrix", TypeError, r"global matrix but b is a DistVector; give A as "
     r"DistCSR.from_global", lambda e: solve(sp.eye(e.n, format="csr"), e.b)),
    ("matvec-wrong-size", ValueError, "global size", lambda e: e.A.matvec(_other_size(e))),
    ("vector-local-part-too-long", ValueError, "local part",
     lambda e: DistVector(e.A.row_layout, np.ones(e.A.row_layout.local_size + 1))),
    ("vector-from-global-wrong-length", ValueError, "expected",
     lambda e: DistVector.from_global(np.ones(e.n + 1), e.A.row_layout)),
    ("vector-from-global-length-differs-by-rank", ValueError, "global array",
     lambda e: DistVector.from_global(np.ones(5 + e.rank), e.comm) if e.size > 1
     else DistVector.from_global(np.ones((2, 2)), e.comm)),
    ("layout-ranges-wrong-count", ValueError, "comm.size \\+ 1",
     lambda e: Layout([0, 5] if e.size > 1 else [0, 5, 6], e.comm)),
    ("layout-negative-local-size-on-rank-0", ValueError, "non-negative",
     lambda e: Layout.from_local_size(-1 if e.rank == 0 else 3, e.comm)),
    ("matrix-local-rows-wrong-count-on-last-rank", ValueError, "rows",
     lambda e: DistCSR.from_local_rows(
         sp.csr_matrix((e.A.row_layout.local_size + (e.rank == e.size - 1), e.n)),
         e.A.row_layout)),
    ("matrix-coo-index-out-of-range", ValueError, "out of range",
     lambda e: DistCSR.from_coo(np.array([0, e.n]), np.array([0, 0]), np.array([1.0, 1.0]),
                                (e.n, e.n), e.comm)),
    ("matrix-from-3d-array", ValueError, "2-D",
     lambda e: DistCSR.from_global(np.ones((2, 2, 2)), e.comm)),
    ("nullspace-wrong-size", ValueError, "nullspace",
     lambda e: solve(e.A, e.b, nullspace=_other_size(e))),
    ("nullspace-zero-vector", ValueError, "linearly dependent",
     lambda e: solve(e.A, e.b, nullspace=DistVector.zeros(e.A.row_layout))),
    ("partition-local-parts-wrong-length", ValueError, "local_parts",
     lambda e: partition.Partition(e.A.row_layout,
                                   np.zeros(e.A.row_layout.local_size + 1, dtype=int))),
    ("partition-part-out-of-range", ValueError, "nparts",
     lambda e: partition.Partition(e.A.row_layout,
                                   np.full(e.A.row_layout.local_size, e.size))),
    ("redistribute-vector-wrong-layout", ValueError, "layout",
     lambda e: partition.redistribute(_other_size(e), partition.block_partition(e.A))),
    ("critical-points-values-wrong-length", ValueError, "shape",
     lambda e: topology.critical_points(e.grid, np.ones(15))),
    # dtypes
    ("solve-complex-rhs-with-amg", TypeError, "real systems only",
     lambda e: solve(e.A, DistVector(e.b.layout, e.b.local.astype(complex)), pc="amg")),
    ("solve-string-rhs", TypeError, "real and complex",
     lambda e: solve(e.A, DistVector(e.b.layout, np.array(["b"] * e.b.layout.local_size)))),
    ("solve-maxiter-float", TypeError, "maxiter", lambda e: solve(e.A, e.b, maxiter=3.5)),
    ("critical-points-complex-values", TypeError, "real",
     lambda e: topology.critical_points(e.grid, np.ones(16, dtype=complex))),
    ("critical-points-string-values", TypeError, "real",
     lambda e: topology.critical_points(e.grid, np.array(["a"] * 16))),
    ("grid-four-dimensions", TypeError, "2 or 3", lambda e: topology.Grid((2, 2, 2, 2), e.comm)),
    ("gallery-size-float", TypeError, "positive integer", lambda e: gallery.poisson2d(3.5, e.comm)),
    # non-finite values
    ("solve-rhs-nan-on-one-rank", ValueError, "NaN",
     lambda e: solve(e.A, DistVector(e.b.layout, _on_last_rank(e, e.b.local, np.nan)))),
    ("solve-x0-inf-on-one-rank", ValueError, "x0",
     lambda e: solve(e.A, e.b, x0=DistVector(e.b.layout, _on_last_rank(e, e.b.local, np.inf)))),
    ("matrix-local-rows-nan-on-rank-0", ValueError, "finite",
     lambda e: DistCSR.from_local_rows(sp.csr_matrix(np.full(
         (e.A.row_layout.local_size, e.n), np.nan if e.rank == 0 else 1.0)), e.A.row_layout)),
    ("matrix-coo-nan", ValueError, "finite",
     lambda e: DistCSR.from_coo(np.array([0]), np.array([0]), np.array([np.nan]),
                                (e.n, e.n), e.comm)),
    ("solve-rtol-nan", ValueError, "rtol", lambda e: solve(e.A, e.b, rtol=float("nan"))),
    ("gallery-epsilon-nan", ValueError, "epsilon",
     lambda e: gallery.anisotropic_diffusion(4, e.comm, epsilon=float("nan"))),
    ("critical-points-nan-values", ValueError, "finite",
     lambda e: topology.critical_points(e.grid, np.full(16, np.nan))),
    ("rcb-nan-coordinates-on-rank-0", ValueError, "finite",
     lambda e: partition.rcb(np.full((e.A.row_layout.local_size, 2),
                                     np.nan if e.rank == 0 else 1.0), e.comm)),
    ("complex-nan-points", ValueError, "finite",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm,
                                          points=np.full((3, 2), np.nan))),
    ("components-threshold-nan", ValueError, "threshold",
     lambda e: topology.connected_components(e.grid, np.ones(16), threshold=float("nan"))),
    # zero pivots and zero diagonals
    ("jacobi-zero-diagonal-in-last-row", ValueError, "diagonal",
     lambda e: preconditioners.make("jacobi", _zero_diagonal_matrix(e, 8))),
    ("solve-pc-jacobi-zero-diagonal-in-first-row", ValueError, "diagonal",
     lambda e: solve(_zero_diagonal_matrix(e, 0), DistVector.full(
         Layout.block(9, e.comm), 1.0), pc="jacobi")),
    ("bjacobi-ilu0-zero-pivot", ValueError, "zero pivot",
     lambda e: solve(_zero_pivot_matrix(e), DistVector.full(Layout.block(8, e.comm), 1.0),
                     "gmres", pc="bjacobi")),
    # wrong communicators (at one rank COMM_SELF and COMM_WORLD are congruent)
    ("solve-rhs-on-comm-self", ValueError, "communicator", lambda e: solve(e.A, _self_vector(e))),
    ("solve-x0-on-comm-self", ValueError, "communicator",
     lambda e: solve(e.A, e.b, x0=_self_vector(e))),
    ("matvec-vector-on-comm-self", ValueError, "communicator",
     lambda e: e.A.matvec(_self_vector(e))),
    ("critical-points-values-on-comm-self", ValueError, "another layout",
     lambda e: topology.critical_points(e.grid, DistVector.zeros(Layout.block(16, MPI.COMM_SELF)))),
    ("gallery-comm-none", TypeError, "MPI.Comm", lambda e: gallery.poisson2d(4, None)),
    ("grid-comm-not-a-comm", TypeError, "MPI.Comm", lambda e: topology.Grid((4, 4), "world")),
    # unreadable and missing files
    ("io-read-matrix-missing-file", OSError, "cannot read",
     lambda e: io.read_matrix(e.missing, e.comm)),
    ("io-read-matrix-directory", OSError, "cannot read", lambda e: io.read_matrix(e.dir, e.comm)),
    ("io-read-matrix-garbage", ValueError, "malformed",
     lambda e: io.read_matrix(e.garbage, e.comm)),
    ("io-read-matrix-truncated", ValueError, "announces",
     lambda e: io.read_matrix(e.truncated, e.comm)),
    ("io-read-vector-from-matrix-file", ValueError, "not a vector",
     lambda e: io.read_vector(e.truncated, e.comm)),
    ("io-read-vector-missing-file", OSError, "cannot read",
     lambda e: io.read_vector(e.missing, e.comm)),
    ("io-read-matrix-layout-of-other-size", ValueError, "layout",
     lambda e: io.read_matrix(e.truncated, e.comm, layout=Layout.block(5, e.comm))),
    ("io-write-into-missing-directory", OSError, "cannot open",
     lambda e: io.write_vector(os.path.join(e.dir, "no", "dir", "x.mtx"), e.b)),
    ("topology-read-mesh-missing-file", OSError, "cannot read",
     lambda e: tio.read_mesh(os.path.join(e.dir, "none.vtu"), e.comm)),
    ("topology-read-mesh-unknown-format", OSError, "cannot read",
     lambda e: tio.read_mesh(e.garbage, e.comm)),
    ("topology-read-image-missing-file", OSError, "No such file",
     lambda e: tio.read_image(os.path.join(e.dir, "none.npy"), e.comm)),
    ("checkpoint-load-missing", ck.CheckpointError, "manifest.json is missing",
     lambda e: ck.load(os.path.join(e.dir, "no-checkpoint"), e.comm)),
    ("solve-resume-from-a-plain-file", ck.CheckpointError, "Not a directory",
     lambda e: solve(e.A, e.b, resume=e.plainfile)),
    ("solve-checkpoint-into-a-plain-file", OSError, "checkpoint directory",
     lambda e: solve(e.A, e.b, checkpoint=e.plainfile, checkpoint_every=2)),
    # bad options to solvers, preconditioners, gallery, partition, topology
    ("solve-unknown-method", ValueError, "unknown Krylov method",
     lambda e: solve(e.A, e.b, "nope")),
    ("solve-unknown-pc", ValueError, "unknown preconditioner",
     lambda e: solve(e.A, e.b, pc="nope")),
    ("solve-pc-options-not-a-dict", TypeError, "dict", lambda e: solve(e.A, e.b, pc=("jacobi", 3))),
    ("solve-pc-unknown-option", TypeError, "omegaa",
     lambda e: solve(e.A, e.b, pc=("jacobi", {"omegaa": 1.0}))),
    ("solve-unknown-keyword", TypeError, "frobnicate", lambda e: solve(e.A, e.b, frobnicate=1)),
    ("cg-positional-tolerance", TypeError, "positional", lambda e: cg(e.A, e.b, None, 1e-5)),
    ("cg-pc-given-as-a-name", TypeError, "pc=", lambda e: cg(e.A, e.b, M="jacobi")),
    ("solve-negative-rtol", ValueError, "rtol", lambda e: solve(e.A, e.b, rtol=-1.0)),
    ("solve-negative-divtol", ValueError, "divtol", lambda e: solve(e.A, e.b, divtol=-1.0)),
    ("solve-bad-norm-type", ValueError, "norm_type", lambda e: solve(e.A, e.b, norm_type="max")),
    ("solve-callback-not-callable", TypeError, "callback", lambda e: solve(e.A, e.b, callback=3)),
    ("solve-monitor-not-callable", TypeError, "monitor", lambda e: solve(e.A, e.b, monitor="loud")),
    ("gmres-restart-zero", ValueError, "restart", lambda e: solve(e.A, e.b, "gmres", restart=0)),
    ("gmres-bad-side", ValueError, "side", lambda e: solve(e.A, e.b, "gmres", side="up")),
    ("gmres-bad-orthogonalisation", ValueError, "orthog",
     lambda e: solve(e.A, e.b, "gmres", orthog="householder")),
    ("solve-checkpoint-every-zero", ValueError, "positive",
     lambda e: solve(e.A, e.b, checkpoint=os.path.join(e.dir, "ck"), checkpoint_every=0)),
    ("asm-negative-overlap", ValueError, "overlap",
     lambda e: preconditioners.make("asm", e.A, overlap=-1)),
    ("asm-unknown-local-solver", ValueError, "local solver",
     lambda e: preconditioners.make("asm", e.A, sub="nope")),
    ("cheby-degree-zero", ValueError, "degree",
     lambda e: preconditioners.make("cheby", e.A, degree=0)),
    ("cheby-bounds-reversed", ValueError, "lower < upper",
     lambda e: preconditioners.make("cheby", e.A, lower=2.0, upper=1.0)),
    ("amg-unknown-option", TypeError, "smoother_name",
     lambda e: preconditioners.make("amg", e.A, smoother_name="x")),
    ("amg-on-a-numpy-array", TypeError, "DistCSR",
     lambda e: preconditioners.make("amg", np.eye(3))),
    # preconditioner options through the one validation door (issue 13): before
    # it, each of these was accepted silently or raised another error
    ("amg-theta-nan", ValueError, "theta", _make("amg", theta=float("nan"))),
    ("amg-theta-above-one", ValueError, "theta", _make("amg", theta=1.5)),
    ("amg-omega-negative", ValueError, "omega", _make("amg", omega=-5)),
    ("amg-max-levels-zero", ValueError, "max_levels", _make("amg", max_levels=0)),
    ("amg-max-coarse-zero", ValueError, "max_coarse", _make("amg", max_coarse=0)),
    ("amg-max-levels-not-an-integer", TypeError, "max_levels", _make("amg", max_levels=2.5)),
    ("amg-min-rows-per-rank-negative", ValueError, "min_rows_per_rank",
     _make("amg", min_rows_per_rank=-1)),
    ("amg-theta-as-keyword-and-in-strength", ValueError, "twice",
     _make("amg", theta=0.1, strength=("symmetric", {"theta": 0.2}))),
    ("amg-omega-as-keyword-and-in-smooth", ValueError, "twice",
     _make("amg", omega=1.0, smooth=("jacobi", {"omega": 1.2}))),
    ("amg-strength-theta-nan", ValueError, "theta",
     _make("amg", strength=("symmetric", {"theta": float("nan")}))),
    ("amg-unknown-strength-measure", ValueError, "unknown strength measure",
     _make("amg", strength="classical")),
    ("amg-unknown-prolongator-smoother", ValueError, "unknown prolongator smoother",
     _make("amg", smooth="energy")),
    ("amg-strength-unknown-option", TypeError, "thta",
     _make("amg", strength=("symmetric", {"thta": 0.1}))),
    ("amg-unsmoothed-with-omega", TypeError, "none", _make("amg", smooth="none", omega=1.0)),
    ("amg-gauss-seidel-unknown-sweep", ValueError, "sweep",
     _make("amg", postsmoother=("gauss-seidel", {"sweep": "sideways"}))),
    ("amg-sor-omega-two", ValueError, "omega", _make("amg", presmoother=("sor", {"omega": 2.0}))),
    ("amg-jacobi-smoother-iterations-zero", ValueError, "iterations",
     _make("amg", presmoother=("jacobi", {"iterations": 0}))),
    ("amg-chebyshev-smoother-ratio-one", ValueError, "ratio",
     _make("amg", presmoother=("chebyshev", {"ratio": 1.0}))),
    ("jacobi-omega-zero", ValueError, "omega", _make("jacobi", omega=0.0)),
    ("jacobi-omega-nan", ValueError, "omega", _make("jacobi", omega=float("nan"))),
    ("bjacobi-sub-options-not-a-dict", TypeError, "dict",
     _make("bjacobi", sub="ilut", sub_options=3)),
    ("bjacobi-ilut-negative-drop-tol", ValueError, "drop_tol",
     _make("bjacobi", sub="ilut", sub_options={"drop_tol": -1.0})),
    ("asm-ilut-fill-factor-below-one", ValueError, "fill_factor",
     _make("asm", sub="ilut", sub_options={"fill_factor": 0.5})),
    ("asm-restricted-not-a-bool", TypeError, "restricted", _make("asm", restricted="no")),
    ("cheby-ratio-below-one", ValueError, "ratio", _make("cheby", ratio=0.5)),
    ("cheby-steps-zero", ValueError, "steps", _make("cheby", steps=0)),
    ("cheby-safety-below-one", ValueError, "safety", _make("cheby", safety=0.5)),
    ("gallery-size-zero", ValueError, "positive", lambda e: gallery.poisson2d(0, e.comm)),
    ("gallery-rhs-unknown-kind", ValueError, "kind", lambda e: gallery.rhs(e.A, "zeros")),
    ("gallery-rhs-negative-seed", ValueError, "seed",
     lambda e: gallery.rhs(e.A, "random", seed=-1)),
    ("gallery-rhs-of-a-numpy-array", TypeError, "row_layout", lambda e: gallery.rhs(np.eye(3))),
    ("partition-unknown-method", ValueError, "unknown partitioner",
     lambda e: partition.partition(e.A, "nope")),
    ("metis-zero-parts", ValueError, "nparts", lambda e: partition.metis_partition(e.A, nparts=0)),
    ("redistribute-a-numpy-array", TypeError, "DistCSR or a DistVector",
     lambda e: partition.redistribute(np.ones(3), partition.block_partition(e.A))),
    ("vector-norm-order-3", ValueError, "ord", lambda e: e.b.norm(ord=3)),
    ("grid-dimension-one", ValueError, "at least 2", lambda e: topology.Grid((1, 4), e.comm)),
    ("complex-degenerate-simplex-on-rank-0", ValueError, "degenerate",
     lambda e: topology.SimplicialComplex(np.array([[0, 0, 1]]) if e.rank == 0
                                          else np.zeros((0, 3), dtype=int), e.comm)),
    ("complex-unknown-partition", ValueError, "partition",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm, partition="nope")),
    ("complex-dimension-four", ValueError, "at most 3",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2, 3, 4]]), e.comm)),
    ("complex-vertex-id-beyond-points", ValueError, "out of range",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm, points=np.zeros((2, 2)))),
    # user code failing on one rank only: raised everywhere at the next reduction
    ("preconditioner-raises-on-last-rank", FloatingPointError, "overflow",
     lambda e: solve(e.A, e.b, M=_pc_failing_on_last_rank)),
    ("operator-returns-wrong-size-on-last-rank", ValueError, "layout",
     lambda e: solve(_wrong_output_operator(e), e.b)),
    ("callback-raises-on-last-rank", KeyError, "gone",
     lambda e: solve(e.A, e.b, callback=_raise_on(WORLD.size - 1, KeyError("gone")))),
    ("monitor-raises-on-rank-0", ZeroDivisionError, "monitor",
     lambda e: solve(e.A, e.b, "gmres", monitor=_raise_on(0, ZeroDivisionError("monitor")))),
    # topology entry points validated through dmsolve.validate
    ("critical-points-on-a-numpy-array", TypeError, "Grid or SimplicialComplex",
     lambda e: topology.critical_points(np.zeros((4, 4)), np.ones(16))),
    ("components-threshold-a-string", TypeError, "threshold",
     lambda e: topology.connected_components(e.grid, np.ones(16), threshold="low")),
    ("components-sublevel-not-a-bool", TypeError, "sublevel",
     lambda e: topology.connected_components(e.grid, np.ones(16), 0.5, sublevel=1)),
    ("components-max-steps-zero", ValueError, "max_steps",
     lambda e: topology.connected_components(e.grid, max_steps=0)),
    ("global-order-of-a-numpy-array", TypeError, "DistVector",
     lambda e: topology.global_order(np.ones(16))),
    ("global-order-oversample-zero", ValueError, "oversample",
     lambda e: topology.global_order(e.grid.vertex_values(np.ones(16)), oversample=0)),
    ("global-order-ids-wrong-length-on-last-rank", ValueError, "ids",
     lambda e: topology.global_order(e.grid.vertex_values(np.ones(16)), ids=np.arange(
         e.grid.local_num_vertices + (e.rank == e.size - 1)))),
    ("global-order-nan-values", ValueError, "finite",
     lambda e: topology.global_order(DistVector(e.grid.vertex_layout, np.full(
         e.grid.local_num_vertices, np.nan)))),
    ("hodge-laplacian-of-a-grid", TypeError, "SimplicialComplex",
     lambda e: topology.hodge_laplacian(e.grid, 0)),
    ("hodge-laplacian-unknown-part", ValueError, "part",
     lambda e: topology.hodge_laplacian(topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm),
                                        0, "sideways")),
    ("hodge-decomposition-rtol-nan", ValueError, "rtol",
     lambda e: topology.hodge_decomposition(
         topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm), np.ones(3), rtol=np.nan)),
    ("hodge-decomposition-orient-not-a-bool", TypeError, "orient",
     lambda e: topology.hodge_decomposition(
         topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm), np.ones(3), orient="yes")),
    ("complex-partition-not-a-string", TypeError, "partition",
     lambda e: topology.SimplicialComplex(np.array([[0, 1, 2]]), e.comm, partition=None)),
    ("topology-read-mesh-unknown-partition", ValueError, "unknown partition",
     lambda e: tio.read_mesh(os.path.join(e.dir, "none.vtu"), e.comm, partition="nope")),
    ("topology-write-vtu-point-data-a-list", TypeError, "point_data",
     lambda e: tio.write_vtu(os.path.join(e.dir, "x.vtu"), e.grid, point_data=[np.ones(16)])),
]

# at one rank COMM_SELF is congruent with COMM_WORLD: those calls are valid there
_VALID_AT_ONE_RANK = {"solve-rhs-on-comm-self", "solve-x0-on-comm-self",
                      "matvec-vector-on-comm-self", "critical-points-values-on-comm-self"}


def test_at_least_thirty_distinct_cases():
    ids = [c[0] for c in CASES]
    assert len(set(ids)) == len(ids) >= 30


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_the_same_exception_on_every_rank(env, request, exc, match, call):
    if env.size == 1 and request.node.callspec.id in _VALID_AT_ONE_RANK:
        call(env)          # must simply work
        return
    assert_raises_collective(env.comm, exc, call, env, match=match)


def test_comm_self_operands_work_at_one_rank_only_when_congruent(env):
    # the counterpart of the wrong-communicator cases: on a congruent
    # communicator the same call succeeds and gives scipy's answer
    if env.size > 1:
        sub = env.comm.Split(0, env.rank)       # congruent with COMM_WORLD
        try:
            A = gallery.poisson2d(6, sub)
            b = gallery.rhs(gallery.poisson2d(6, env.comm), "random", seed=1)
            x = solve(A, b, rtol=1e-12)[0].gather()
        finally:
            sub.Free()
    else:
        x = solve(env.A, DistVector(Layout.block(env.n, MPI.COMM_SELF), env.b.local),
                  rtol=1e-12)[0].gather()
    ref = np.linalg.solve(env.A.to_scipy().toarray(), env.b.gather())
    assert_allclose_collective(x, ref, env.comm, rtol=1e-9)


# -- partitions where ranks own nothing: valid, must give the right answer ---------------

EMPTY = [(m, pc) for m in ("cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres")
         for pc in (None, "jacobi", "bjacobi", "asm", "cheby", "amg")
         if not (m == "minres" and pc in ("bjacobi", "asm"))]


@pytest.mark.parametrize("method, pc", EMPTY, ids=["%s-%s" % (m, p or "none") for m, p in EMPTY])
def test_more_ranks_than_rows(comm, method, pc):
    # 2 rows: at 3 and 4 ranks some ranks own nothing. CG takes the symmetric
    # (unrestricted) Schwarz variant: the default restricted one is refused under CG.
    if pc == "asm" and method in ("cg", "pipecg"):
        pc = ("asm", {"restricted": False})
    A = gallery.poisson1d(2, comm)
    b = gallery.rhs(A, "random", seed=2)
    x, info = solve(A, b, method, pc, rtol=1e-10)
    ref = np.linalg.solve(A.to_scipy().toarray(), b.gather())
    assert_collective(comm, info.converged, str(info))
    assert_allclose_collective(x.gather(), ref, comm, rtol=1e-8)
    assert_collective(comm, np.all(np.isfinite(info.residual_norms)), str(info))


def test_empty_local_parts_in_vectors_io_and_topology(comm, shared_tmp_path):
    A = gallery.poisson1d(2, comm)
    x = DistVector.from_global(np.array([3.0, -4.0]), A.row_layout)
    assert_allclose_collective([x.norm(), x.norm(1), x.norm(np.inf)], [5.0, 7.0, 4.0], comm)
    path = str(shared_tmp_path / "A.mtx")
    io.write_matrix(path, A)
    B = io.read_matrix(path, comm)
    assert_allclose_collective(B.to_scipy().toarray(), A.to_scipy().toarray(), comm)
    p = partition.block_partition(A)
    y = partition.redistribute(x, p, inverse=False)
    assert_allclose_collective(partition.redistribute(y, p, inverse=True).gather(),
                               [3.0, -4.0], comm)
    # a 2 x 3 grid has 3 planes: at 4 ranks one rank owns none
    values = np.array([0.0, 5.0, 1.0, 4.0, 2.0, 3.0])
    cp = topology.critical_points(topology.Grid((2, 3), comm), values)
    ref = topology.critical_points(topology.Grid((2, 3), MPI.COMM_SELF), values)
    got, want = cp.gather(), ref.gather()
    assert_allclose_collective(np.concatenate(got), np.concatenate(want), comm)
