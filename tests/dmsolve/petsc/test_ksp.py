"""``solve(..., backend="petsc")``: PETSc's KSP and PC under our names agree
with scipy and with our own methods, map options and reasons, and refuse what
our methods refuse, on every rank."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

petsc4py = pytest.importorskip("petsc4py", reason="petsc4py not installed: run `make petsc`")

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import ConvergedReason, ConvergenceError, DistCSR, DistVector, petsc as dp
from dmsolve.krylov import solve
from mpitest import (assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective)

COMM = MPI.COMM_WORLD


@pytest.fixture(scope="module")
def PETSc():
    from petsc4py import PETSc      # here: the optional extra, imported once it is known present
    return PETSc


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
    """backend="petsc" solves each case to scipy's answer."""
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
    """backend="petsc" takes our methods' iteration counts."""
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
    """backend="petsc" honours x0, callback, monitor and null space."""
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
    """backend="petsc" reports PETSc's reasons under our names, and failure as failure."""
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
    """convert_reason maps every KSPConvergedReason PETSc has."""
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
    """Options PETSc cannot take are refused on every rank, with a message naming them."""
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
    """backend="petsc" refuses bad inputs as our methods do."""
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
    """PETSc's method and preconditioner names follow the registry's naming rule."""
    A = gallery.poisson2d(9, COMM)
    b = gallery.rhs(A)
    _, info = solve(A, b, "BiCGStab", pc="Jacobi", rtol=1e-8, backend="PETSc")
    assert_collective(COMM, info.converged and info.method == "bicgstab"
                      and info.extra["ksp_type"] == "bcgs" and info.extra["pc"] == "jacobi",
                      str(info.extra))
    assert_collective(COMM, dp.KSP_TYPES["PipeCG"] == "pipecg"
                      and dp.PC_TYPES["AMG"] == "gamg"
                      and sorted(dp.PC_TYPES) == ["amg", "asm", "bjacobi", "jacobi", "none"])


def test_complex_system_is_refused_by_the_real_petsc_build():
    """The real PETSc build refuses a complex system with a TypeError naming the dmsolve backend."""
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
