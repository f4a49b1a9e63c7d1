"""petsc4py conversions (dmsolve.petsc): matrices and vectors both ways, exact
and without mallocs, on uneven layouts; errors on every rank; and dmsolve
imports without petsc4py."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

petsc4py = pytest.importorskip("petsc4py", reason="petsc4py not installed: run `make petsc`")

import dmsolve
import dmsolve.gallery as gallery
from dmsolve import DistCSR, DistVector, Layout, petsc as dp
from dmsolve.krylov import solve
from mpitest import (ROOT, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, wait_idle)

COMM = MPI.COMM_WORLD


@pytest.fixture(scope="module")
def PETSc():
    from petsc4py import PETSc      # here: the optional extra, imported once it is known present
    return PETSc


def _uneven_layout(n, comm):
    """Rank 0 owns nothing (when there are several ranks), the others unequal blocks."""
    size = comm.Get_size()
    if size == 1:
        return Layout.block(n, comm)
    w = np.arange(size, dtype=float)          # weights 0, 1, 2, ...
    cuts = np.floor(np.cumsum(w) / w.sum() * n).astype(np.int64)
    return Layout(np.concatenate(([0], cuts)), comm)


def _rect(comm):
    rng = np.random.default_rng(5)
    S = sp.random(37, 23, density=0.15, random_state=rng, format="csr")
    return DistCSR.from_global(S, comm), S


MATRICES = {
    "poisson3d-7": lambda c: gallery.poisson3d(7, c),
    "convdiff2d-13": lambda c: gallery.convection_diffusion(13, c),
    "rect-37x23": lambda c: _rect(c)[0],
    "uneven-poisson2d-11": lambda c: DistCSR.from_global(
        gallery.poisson2d(11, MPI.COMM_SELF).to_scipy(), c, layout=_uneven_layout(121, c)),
}


# -- matrices ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(MATRICES))
def test_matrix_round_trip_exact_without_malloc(PETSc, name):
    """A matrix converted to PETSc and back is the same bit for bit, with no malloc during
    assembly."""
    A = MATRICES[name](COMM)
    M = dp.to_petsc(A)
    (lr, gr), (lc, gc) = M.getSizes()
    assert_equal_collective([lr, gr, lc, gc], [A.row_layout.local_size, A.shape[0],
                                               A.col_layout.local_size, A.shape[1]])
    assert_equal_collective(M.getOwnershipRanges(), A.row_layout.ranges)
    assert_equal_collective(M.getOwnershipRangesColumn(), A.col_layout.ranges)
    assert_collective(COMM, M.getType() == ("seqaij" if COMM.size == 1 else "mpiaij"),
                      "type %s" % M.getType())
    # exact preallocation: no malloc during assembly, nothing allocated in vain
    info = M.getInfo(PETSc.Mat.InfoType.GLOBAL_SUM)
    assert_equal_collective([info["mallocs"], info["nz_unneeded"], info["nz_used"]],
                            [0, 0, A.global_nnz()])
    ip, ix, v = M.getValuesCSR()
    loc = A.local_rows()
    loc.sort_indices()
    assert_equal_collective(ip, loc.indptr)
    assert_equal_collective(ix, loc.indices)
    assert_equal_collective(v, loc.data)
    B = dp.from_petsc(M)
    assert_collective(COMM, B.row_layout == A.row_layout and B.col_layout == A.col_layout,
                      "layouts differ after the round trip")
    assert_equal_collective(B.ghosts, A.ghosts)
    d = (B.diag != A.diag).nnz + (B.offd != A.offd).nnz
    assert_equal_collective(d, 0)
    assert_equal_collective(B.to_scipy().toarray(), A.to_scipy().toarray())
    M.destroy()


def test_new_nonzero_outside_the_pattern_is_an_error(PETSc):
    """A new nonzero outside the converted pattern is an error in PETSc."""
    A = gallery.poisson1d(40, COMM)
    M = dp.to_petsc(A)
    start, stop = A.row_layout.owned_range
    raised = True
    if stop > start:       # every rank owns rows at 40 rows and <= 4 ranks
        far = (start + 20) % 40
        try:
            M.setValue(start, far, 1.0, addv=PETSc.InsertMode.ADD_VALUES)
            raised = False
        except PETSc.Error:
            raised = True
    assert_collective(COMM, raised, "inserting a new nonzero did not raise")
    M.destroy()


def test_matmult_equals_our_matvec(PETSc):
    """PETSc's MatMult of a converted matrix equals our matvec."""
    A = gallery.convection_diffusion(12, COMM, dim=3)
    x = gallery.rhs(A, "random", seed=3)
    y = A.matvec(x)
    M = dp.to_petsc(A)
    xv, yv = M.createVecs()
    xv.getArray()[:] = x.local
    M.mult(xv, yv)
    assert_allclose_collective(yv.getArray(readonly=True), y.local, rtol=1e-14, atol=1e-15)
    M.destroy()


def test_from_petsc_native_matrix_uneven_ranks_and_dense(PETSc):
    """A native PETSc matrix (uneven ranks, and dense) converts to the same DistCSR."""
    n = 29
    lay = _uneven_layout(n, COMM)
    start, stop = lay.owned_range
    M = PETSc.Mat().createAIJ(((lay.local_size, n), (lay.local_size, n)), nnz=(3, 2),
                              comm=COMM)
    for i in range(start, stop):
        cols = [j for j in (i - 1, i, i + 1) if 0 <= j < n]
        M.setValues([i], cols, [2.0 if j == i else -1.0 - 0.01 * i for j in cols])
    M.assemble()
    A = dp.from_petsc(M)
    ref = sp.diags([-1.0 - 0.01 * np.arange(1, n), 2.0 * np.ones(n),
                    -1.0 - 0.01 * np.arange(n - 1)], [-1, 0, 1]).toarray()
    assert_collective(COMM, A.row_layout == lay, "row layout %s" % A.row_layout)
    assert_equal_collective(A.to_scipy().toarray(), ref)
    D = PETSc.Mat().createDense(((lay.local_size, n), (lay.local_size, n)), comm=COMM)
    D.setUp()
    for i in range(start, stop):
        D.setValues([i], [0, i], [1.0, 5.0]) if i else D.setValues([i], [i], [5.0])
    D.assemble()
    ref_d = 5.0 * np.eye(n)
    ref_d[1:, 0] = 1.0
    assert_equal_collective(dp.from_petsc(D).to_scipy().toarray(), ref_d)
    M.destroy()
    D.destroy()


# -- vectors -----------------------------------------------------------------------------

def test_vector_round_trips_copy_and_share(PETSc):
    """Vectors convert both ways, by copy or sharing memory as asked."""
    lay = _uneven_layout(31, COMM)
    x = DistVector(lay, np.arange(lay.start, lay.stop) * 0.5 - 3.0)
    v = dp.to_petsc(x)
    assert_equal_collective(v.getOwnershipRanges(), lay.ranges)
    assert_equal_collective(v.getSizes(), (lay.local_size, 31))
    assert_equal_collective(v.getArray(readonly=True), x.local)
    assert_allclose_collective(v.norm(), x.norm(), rtol=1e-15)
    v.getArray()[:] = 7.0                      # a copy: x unchanged
    assert_equal_collective(x.local, np.arange(lay.start, lay.stop) * 0.5 - 3.0)
    y = dp.from_petsc(v)
    assert_collective(COMM, y.layout == lay, "layout changed")
    assert_equal_collective(y.local, np.full(lay.local_size, 7.0))
    w = dp.vec_to_petsc(x, copy=False)         # shares x.local
    w.scale(2.0)
    assert_equal_collective(x.local, 2 * (np.arange(lay.start, lay.stop) * 0.5 - 3.0))
    z = dp.vec_from_petsc(w, copy=False)
    z.local[:] = 1.0
    assert_allclose_collective(w.sum(), 31.0)
    assert_raises_collective(COMM, TypeError, dp.vec_to_petsc,
                             DistVector(lay, np.zeros(lay.local_size, dtype=np.float32)),
                             copy=False, match="scalar type")
    assert_raises_collective(COMM, TypeError, dp.to_petsc, np.zeros(3), match="DistCSR")
    assert_raises_collective(COMM, TypeError, dp.from_petsc, np.zeros(3), match="PETSc Mat")
    for o in (v, w):
        o.destroy()


def _last_rank_nan(b):
    b = b.copy()
    if COMM.rank == COMM.size - 1:
        b.local[-1] = np.nan
    return b


def test_import_dmsolve_leaves_petsc4py_unimported(comm):
    """import dmsolve registers the petsc backend without importing petsc4py."""
    # the "petsc" backend is registered by `import dmsolve`, petsc4py is not imported
    ok, why = True, ""
    if comm.rank == 0:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}
        code = ("import sys, dmsolve; "
                "assert 'petsc' in dmsolve.krylov.BACKENDS, 'petsc not registered'; "
                "assert 'petsc4py' not in sys.modules, 'petsc4py imported'")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=env, cwd=str(ROOT))
        ok, why = proc.returncode == 0, proc.stderr
    wait_idle(comm)
    assert_collective(comm, ok, "child: " + why)


def test_layout_and_value_errors_on_every_rank():
    """Layout and value errors of the conversions are raised on every rank."""
    A = gallery.poisson2d(7, COMM)
    b = gallery.rhs(gallery.poisson2d(6, COMM))
    assert_raises_collective(COMM, ValueError, solve, A, b, backend="petsc",
                             match="global size 36")
    b = _last_rank_nan(gallery.rhs(A))
    assert_raises_collective(COMM, ValueError, solve, A, b, backend="petsc", match="NaN")
    op = dmsolve.DistLinearOperator(A.row_layout, A.col_layout, A.matvec)
    x, info = solve(op, gallery.rhs(A), "cg", rtol=1e-8, backend="petsc")  # shell matrix
    assert_collective(COMM, info.converged, str(info))
    assert_raises_collective(COMM, TypeError, solve, op, gallery.rhs(A), "cg", pc="jacobi",
                             backend="petsc", match="matrix entries")


def test_missing_petsc4py_names_make_petsc(monkeypatch):
    """Without petsc4py the conversions say to run ``make petsc``."""
    monkeypatch.setitem(sys.modules, "petsc4py", None)
    monkeypatch.setitem(sys.modules, "petsc4py.PETSc", None)
    A = gallery.poisson1d(9, COMM)
    assert_raises_collective(COMM, ImportError, solve, A, gallery.rhs(A), backend="petsc",
                             match="make petsc")
    assert_raises_collective(COMM, ImportError, dp.to_petsc, A, match="make petsc")
    assert_collective(COMM, dp.petsc4py_available() is False, "reported available")
