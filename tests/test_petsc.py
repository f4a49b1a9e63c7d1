"""petsc4py interoperability: matrices and vectors both ways, our preconditioners inside
PETSc's KSP as PC python, and ``solve(..., backend="petsc")``, at any rank count."""

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

petsc4py = pytest.importorskip("petsc4py", reason="petsc4py not installed: run `make petsc`")

import dmsolve  # noqa: E402
import dmsolve.gallery as gallery  # noqa: E402
import preconditioners  # noqa: E402
from dmsolve import ConvergedReason, ConvergenceError, DistCSR, DistVector, Layout  # noqa: E402
from dmsolve import petsc as dp  # noqa: E402
from dmsolve.krylov import solve  # noqa: E402
from mpitest import (assert_allclose_collective, assert_collective,  # noqa: E402
                     assert_equal_collective, assert_raises_collective, wait_idle)

COMM = MPI.COMM_WORLD
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


# -- our preconditioners inside KSP ---------------------------------------------------------

def _ksp(PETSc, M, ksp_type, rtol=1e-8):
    ksp = PETSc.KSP().create(comm=COMM)
    ksp.setOperators(M)
    ksp.setType(ksp_type)
    ksp.setTolerances(rtol=rtol, atol=0.0, max_it=500)
    return ksp


PC_CASES = {
    "poisson3d-cg-amg": (lambda c: gallery.poisson3d(12, c), "cg", "amg", {}),
    "poisson3d-cg-asm-basic": (lambda c: gallery.poisson3d(10, c), "cg", "asm",
                               {"restricted": False, "sub": "lu"}),
    "convdiff2d-gmres-asm": (lambda c: gallery.convection_diffusion(30, c), "gmres", "asm", {}),
    "convdiff2d-gmres-bjacobi": (lambda c: gallery.convection_diffusion(30, c), "gmres",
                                 "bjacobi", {}),
}


@pytest.mark.parametrize("case", sorted(PC_CASES))
def test_our_pc_inside_petsc_ksp(PETSc, case):
    make_A, method, name, opts = PC_CASES[case]
    A = make_A(COMM)
    b = gallery.rhs(A, "random", seed=1)
    ref = spla.spsolve(A.to_scipy().tocsc(), b.gather())
    x_ours, info = solve(A, b, method, pc=(name, opts), rtol=1e-8)
    assert_collective(COMM, info.converged, str(info))
    Mat = dp.to_petsc(A)
    for by_name in (False, True):
        ksp = _ksp(PETSc, Mat, method)
        if method == "cg":       # our CG tests the unpreconditioned norm; GMRES: both left
            ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        if by_name:
            ctx = dp.petsc_pc(ksp, name, **opts)
        else:
            ctx = dp.PythonPC(preconditioners.make(name, A, **opts))
            pc = dp.as_petsc_pc(ctx.M)
            ksp.setPC(pc)
            ksp.setOperators(Mat)     # a KSP hands its operators to the PC it holds then
        bv, xv = dp.to_petsc(b), Mat.createVecs()[0]
        ksp.solve(bv, xv)
        its = ksp.getIterationNumber()
        assert_collective(COMM, ksp.getConvergedReason() > 0,
                          "KSP reason %d" % ksp.getConvergedReason())
        assert_collective(COMM, ksp.getPC().getType() == "python", ksp.getPC().getType())
        # same preconditioner, same test: the same iteration up to rounding
        assert_collective(COMM, abs(its - info.iterations) <= 1,
                          "PETSc %s + our %s: %d iterations, ours %d"
                          % (method, name, its, info.iterations))
        x = dp.from_petsc(xv).gather()
        err = np.linalg.norm(x - ref) / np.linalg.norm(ref)
        assert_collective(COMM, err < 1e-5, "error %.2e" % err)
        if by_name:
            assert_collective(COMM, ctx.M is not None and ctx.M.name == name, "not built")
        ksp.destroy()
    Mat.destroy()


def test_python_pc_checks_layout(PETSc):
    A = gallery.poisson2d(9, COMM)
    B = gallery.poisson2d(10, COMM)
    Mat = dp.to_petsc(B)
    ksp = _ksp(PETSc, Mat, "cg")
    dp.petsc_pc(ksp, preconditioners.make("jacobi", A))
    caught = None
    try:
        ksp.setUp()
    except (ValueError, PETSc.Error) as e:
        caught = e
    assert_collective(COMM, caught is not None and "81 rows" in str(caught)
                      + str(getattr(caught, "__cause__", "")),
                      "no layout error: %r" % (caught,))
    assert_raises_collective(COMM, TypeError, dp.PythonPC, object())
    assert_raises_collective(COMM, TypeError, dp.PythonPC,
                             preconditioners.make("jacobi", A), omega=0.5)
    ksp.destroy()
    Mat.destroy()


# -- solve(backend="petsc") ----------------------------------------------------------------

SOLVE_CASES = {
    "poisson3d-cg-none": ("poisson3d", "cg", "none", "cg", "none"),
    "poisson3d-cg-jacobi": ("poisson3d", "cg", "jacobi", "cg", "jacobi"),
    "poisson3d-cg-amg": ("poisson3d", "cg", "amg", "cg", "gamg"),
    "poisson3d-pipecg-jacobi": ("poisson3d", "pipecg", "jacobi", "pipecg", "jacobi"),
    "poisson3d-minres-none": ("poisson3d", "minres", "none", "minres", "none"),
    "poisson3d-cg-ours-amg": ("poisson3d", "cg", "OBJ:amg", "cg", "python"),
    "convdiff2d-gmres-bjacobi": ("convdiff2d", "gmres", "bjacobi", "gmres", "bjacobi"),
    "convdiff2d-gmres-asm": ("convdiff2d", "gmres", ("asm", {"overlap": 2}), "gmres", "asm"),
    "convdiff2d-fgmres-asm": ("convdiff2d", "fgmres", "asm", "fgmres", "asm"),
    "convdiff2d-bicgstab-jacobi": ("convdiff2d", "bicgstab", "jacobi", "bcgs", "jacobi"),
    "convdiff2d-gmres-right-none": ("convdiff2d", "gmres", None, "gmres", "none"),
}
_PROBLEM = {"poisson3d": lambda c: gallery.poisson3d(9, c),
            "convdiff2d": lambda c: gallery.convection_diffusion(25, c)}


@pytest.mark.parametrize("case", sorted(SOLVE_CASES))
def test_backend_petsc_agrees_with_scipy(PETSc, case):
    prob, method, pc, ksp_type, pc_type = SOLVE_CASES[case]
    A = _PROBLEM[prob](COMM)
    b = gallery.rhs(A, "random", seed=2)
    b_copy = b.local.copy()
    ref = spla.spsolve(A.to_scipy().tocsc(), b.gather())
    if isinstance(pc, str) and pc.startswith("OBJ:"):
        pc = preconditioners.make(pc[4:], A)
    kw = {"side": "right"} if "right" in case else {}
    x, info = solve(A, b, method, pc=pc, rtol=1e-10, backend="petsc", **kw)
    assert_collective(COMM, info.converged and info.reason is ConvergedReason.RTOL, str(info))
    assert_collective(COMM, info.extra["ksp_type"] == ksp_type
                      and info.extra["pc_type"] == pc_type, str(info.extra))
    assert_collective(COMM, x.layout == A.col_layout, "x layout")
    err = np.linalg.norm(x.gather() - ref) / np.linalg.norm(ref)
    assert_collective(COMM, err < 1e-7, "error %.2e vs scipy" % err)
    assert_equal_collective(b.local, b_copy)        # b untouched
    n = info.residual_norms
    assert_collective(COMM, len(n) == info.iterations + 1, "history %d, its %d"
                      % (len(n), info.iterations))
    assert_collective(COMM, n[-1] < 1e-10 * info.bnorm and info.bnorm > 0, str(info))
    assert_collective(COMM, info.setup_seconds > 0 and info.solve_seconds > 0, str(info))
    # the norm tested is the one our method of that name tests
    if method in ("cg", "pipecg", "bicgstab", "fgmres") or pc is None:
        assert_collective(COMM, info.norm_type == "unpreconditioned", info.norm_type)
        # ... so ||b|| is the 2-norm of b
        assert_allclose_collective(info.bnorm, b.norm(), rtol=1e-12)


@pytest.mark.parametrize("method,pc", [("cg", None), ("gmres", "jacobi"), ("cg", "jacobi")])
def test_backend_petsc_iterations_match_ours(method, pc):
    # the same algorithm, stopping test and preconditioner: the same iteration count
    A = gallery.poisson3d(10, COMM)
    b = gallery.rhs(A, "random", seed=4)
    _, ours = solve(A, b, method, pc=pc, rtol=1e-8)
    _, theirs = solve(A, b, method, pc=pc, rtol=1e-8, backend="petsc")
    assert_collective(COMM, ours.norm_type == theirs.norm_type,
                      "%s vs %s" % (ours.norm_type, theirs.norm_type))
    assert_collective(COMM, abs(ours.iterations - theirs.iterations) <= 1,
                      "ours %d, PETSc %d" % (ours.iterations, theirs.iterations))
    assert_allclose_collective(theirs.residual_norms[0], ours.residual_norms[0], rtol=1e-10)


def test_backend_petsc_x0_callback_monitor_nullspace():
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=6)
    x, info = solve(A, b, "cg", rtol=1e-10, backend="petsc")
    x0 = x.copy()
    x1, info1 = solve(A, b, "cg", x0=x0, rtol=1e-8, backend="petsc")
    assert_equal_collective(info1.iterations, 0)
    assert_equal_collective(x0.local, x.local)           # x0 not mutated
    seen, norms = [], []
    _, info2 = solve(A, b, "cg", rtol=1e-6, backend="petsc",
                     callback=lambda xk: seen.append(xk.norm()),
                     monitor=lambda it, r: norms.append(r))
    assert_collective(COMM, len(seen) == info2.iterations and len(norms) == len(
        info2.residual_norms), "%d callbacks, %d iterations" % (len(seen), info2.iterations))
    assert_allclose_collective(norms, info2.residual_norms, rtol=0)
    # singular Neumann-type graph Laplacian of a path: the constant null space
    n = 50
    L = sp.diags([-np.ones(n - 1), np.r_[1, 2 * np.ones(n - 2), 1], -np.ones(n - 1)],
                 [-1, 0, 1]).tocsr()
    G = DistCSR.from_global(L, COMM)
    f = gallery.rhs(G, "random", seed=1)
    f.local -= f.sum() / n
    ones = DistVector.full(G.row_layout, 1.0)
    xs, infos = solve(G, f, "cg", rtol=1e-10, backend="petsc", nullspace=ones)
    assert_collective(COMM, infos.converged, str(infos))
    r = f.copy().axpy(-1.0, G.matvec(xs))
    assert_collective(COMM, r.norm() < 1e-8 * f.norm(), "residual %.2e" % r.norm())
    assert_collective(COMM, abs(xs.sum()) < 1e-8, "not orthogonal to the null space")


def test_backend_petsc_reasons_and_failure():
    A = gallery.poisson3d(8, COMM)
    b = gallery.rhs(A, "random")
    _, info = solve(A, b, "cg", rtol=1e-12, maxiter=3, backend="petsc")
    assert_collective(COMM, not info.converged and info.reason is ConvergedReason.MAXITER
                      and info.extra["petsc_reason"] in ("DIVERGED_MAX_IT", "DIVERGED_ITS")
                      and info.iterations == 3, str(info))
    assert_raises_collective(COMM, ConvergenceError, solve, A, b, "cg", maxiter=2,
                             backend="petsc", raise_on_failure=True, match="DIVERGED_ITS")  # our name
    _, info = solve(A, DistVector(A.row_layout), "cg", backend="petsc")   # b = 0
    assert_collective(COMM, info.converged and info.iterations == 0, str(info))


def test_convert_reason_covers_every_petsc_reason(PETSc):
    CR = PETSc.KSP.ConvergedReason
    names = [n for n in dir(CR) if n.startswith(("CONVERGED_", "DIVERGED_"))
             and n != "CONVERGED_ITERATING"]
    assert len(names) >= 12
    for n in names:
        ours, pname = dp.convert_reason(getattr(CR, n))
        assert pname == n
        assert ours.converged == (getattr(CR, n) > 0), n
    maxit = getattr(CR, "DIVERGED_MAX_IT", getattr(CR, "DIVERGED_ITS", None))
    assert dp.convert_reason(maxit)[0] is ConvergedReason.MAXITER
    assert dp.convert_reason(CR.CONVERGED_ATOL)[0] is ConvergedReason.ATOL
    assert dp.convert_reason(CR.DIVERGED_INDEFINITE_PC)[0] is ConvergedReason.INDEFINITE_PC


BAD_OPTIONS = [
    ({"method": "cgs"}, ValueError, r"unknown Krylov method \(backend='petsc'\) 'cgs'"),
    ({"pc": "ilu"}, ValueError, r"unknown preconditioner \(backend='petsc'\) 'ilu'.*PC python"),
    ({"pc": ("jacobi", {"omega": 0.7})}, TypeError, "no PETSc mapping"),
    ({"pc": ("asm", {"overlap": -1})}, ValueError, "overlap"),
    ({"pc": ("asm", {"sub": "ilut"})}, ValueError, "sub='ilut'"),
    ({"pc": ("amg", {"smoother": "x"})}, TypeError, "smoother"),
    ({"pc": ("amg", {"theta": float("nan")})}, ValueError, "amg: theta"),
    ({"pc": ("amg", {"max_levels": 0})}, ValueError, "amg: max_levels must be a positive"),
    ({"pc": ("amg", {"max_coarse": 2.5})}, TypeError, "amg: max_coarse"),
    ({"pc": ("asm", {"overlap": 1.5})}, TypeError, "overlap"),
    ({"restart": 20}, TypeError, "restart= is an option of gmres"),
    ({"side": "right"}, TypeError, "side= is an option of gmres"),
    ({"method": "gmres", "side": "up"}, ValueError, "side"),
    ({"method": "gmres", "restart": 0}, ValueError, "restart"),
    ({"method": "gmres", "orthog": "householder"}, ValueError, "orthog"),
    ({"method": "gmres", "pc": "jacobi", "norm_type": "unpreconditioned"}, ValueError,
     "norm_type"),
    ({"norm_type": "energy"}, ValueError, "norm_type"),
    ({"rtol": -1.0}, ValueError, "rtol"),
    ({"rtol": "1e-8"}, TypeError, "rtol"),
    ({"maxiter": 2.5}, TypeError, "maxiter"),
    ({"minres_shift": 1.0}, TypeError, "minres_shift"),
    ({"method": "minres", "shift": 0.5}, TypeError, "shift"),
    ({"petsc_options": ["ksp_view"]}, TypeError, "petsc_options"),
    ({"backend": "petsc4py"}, ValueError, "unknown backend"),
]


@pytest.mark.parametrize("kw,exc,match", BAD_OPTIONS,
                         ids=["-".join(map(str, k)) for k, _, _ in BAD_OPTIONS])
def test_option_mapping_errors_on_every_rank(kw, exc, match):
    A = gallery.poisson2d(7, COMM)
    b = gallery.rhs(A)
    kw = dict(kw)
    method = kw.pop("method", "cg")
    kw.setdefault("backend", "petsc")
    assert_raises_collective(COMM, exc, solve, A, b, method, match=match, **kw)


def _last_rank_nan(b):
    b = b.copy()
    if COMM.rank == COMM.size - 1:
        b.local[-1] = np.nan
    return b


# the same refusal, in the same words, from both backends: one door (check_system)
SAME_DOOR = {
    "rtol-nan": ("cg", {"rtol": float("nan")}, ValueError),
    "atol-negative": ("cg", {"atol": -1e-3}, ValueError),
    "divtol-string": ("cg", {"divtol": "1e4"}, TypeError),
    "maxiter-negative": ("cg", {"maxiter": -1}, ValueError),
    "maxiter-float": ("bicgstab", {"maxiter": 2.5}, TypeError),
    "callback-not-callable": ("cg", {"callback": 3}, TypeError),
    "monitor-not-callable": ("minres", {"monitor": "loud"}, TypeError),
    "nullspace-empty": ("cg", {"nullspace": []}, ValueError),
    "x0-wrong-size": ("cg", {"x0": "other"}, ValueError),
    "b-nan-on-last-rank": ("cg", {"b": "nan"}, ValueError),
    "gmres-restart-zero": ("gmres", {"restart": 0}, ValueError),
    "gmres-side": ("gmres", {"side": "middle"}, ValueError),
    "fgmres-orthog": ("fgmres", {"orthog": "householder"}, ValueError),
}


@pytest.mark.parametrize("case", sorted(SAME_DOOR))
def test_petsc_backend_refuses_like_our_methods(case):
    A = gallery.poisson2d(7, COMM)
    b = gallery.rhs(A)
    method, kw, exc = SAME_DOOR[case]
    kw = dict(kw)
    if kw.get("x0") == "other":
        kw["x0"] = gallery.rhs(gallery.poisson2d(6, COMM))
    if kw.pop("b", None) == "nan":
        b = _last_rank_nan(b)
    ours = assert_raises_collective(COMM, exc, solve, A, b, method, **kw)
    theirs = assert_raises_collective(COMM, exc, solve, A, b, method, backend="petsc", **kw)
    assert_collective(COMM, str(ours) == str(theirs), "%r vs %r" % (str(ours), str(theirs)))


def test_petsc_names_follow_the_registry_rule(PETSc):
    A = gallery.poisson2d(9, COMM)
    b = gallery.rhs(A)
    _, info = solve(A, b, "BiCGStab", pc="Jacobi", rtol=1e-8, backend="PETSc")
    assert_collective(COMM, info.converged and info.method == "bicgstab"
                      and info.extra["ksp_type"] == "bcgs" and info.extra["pc"] == "jacobi",
                      str(info.extra))
    assert_collective(COMM, dp.KSP_TYPES["PipeCG"] == "pipecg"
                      and dp.PC_TYPES["AMG"] == "gamg"
                      and sorted(dp.PC_TYPES) == ["amg", "asm", "bjacobi", "jacobi", "none"])


def test_import_dmsolve_leaves_petsc4py_unimported(comm):
    # the "petsc" backend is registered by `import dmsolve`, petsc4py is not imported
    ok, why = True, ""
    if comm.rank == 0:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}
        code = ("import sys, dmsolve; "
                "assert 'petsc' in dmsolve.krylov.BACKENDS, 'petsc not registered'; "
                "assert 'petsc4py' not in sys.modules, 'petsc4py imported'")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120, env=env, cwd=ROOT)
        ok, why = proc.returncode == 0, proc.stderr
    wait_idle(comm)
    assert_collective(comm, ok, "child: " + why)


def test_layout_and_value_errors_on_every_rank():
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
    monkeypatch.setitem(sys.modules, "petsc4py", None)
    monkeypatch.setitem(sys.modules, "petsc4py.PETSc", None)
    A = gallery.poisson1d(9, COMM)
    assert_raises_collective(COMM, ImportError, solve, A, gallery.rhs(A), backend="petsc",
                             match="make petsc")
    assert_raises_collective(COMM, ImportError, dp.to_petsc, A, match="make petsc")
    assert_collective(COMM, dp.petsc4py_available() is False, "reported available")


def test_complex_system_is_refused_by_the_real_petsc_build():
    # the PETSc that `make petsc` builds is real: a complex system is a
    # TypeError naming the dmsolve backend, which solves it
    A = gallery.poisson2d(7, COMM)
    b = gallery.rhs(A)
    bc = DistVector(b.layout, b.local * (1 + 1j))
    assert_raises_collective(COMM, TypeError, solve, A, bc, "gmres", backend="petsc",
                             match="backend='dmsolve'")
    x, info = solve(A, bc, "gmres", rtol=1e-10)
    xr, _ = solve(A, b, "gmres", rtol=1e-10)
    assert_collective(COMM, info.converged and np.allclose(x.local, xr.local * (1 + 1j),
                                                           rtol=1e-7, atol=1e-12))
