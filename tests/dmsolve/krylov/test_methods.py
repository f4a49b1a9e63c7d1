"""What every Krylov method shares, against scipy on the gathered system at any
rank count: the problem x method x preconditioner case matrix, real and complex
(Hermitian and general) systems, rank-count independent iteration counts, the
reductions per iteration, and the invariants every method keeps (x0
untouched, b = 0, exact x0, maxiter=1, keyword-only tolerances, an indefinite
preconditioner reported)."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
import preconditioners
from dmsolve import ConvergedReason, ConvergenceError, DistCSR, DistVector, gallery, krylov, solve
from krylov_cases import (METHODS, RTOL, check_solution, complex_rhs, constants, distribute,
                          empty_last_layout, general, hermitian, laplacian, problem, reference)
from mpitest import (assert_allclose_collective, assert_collective, assert_raises_collective,
                     same_on_all_ranks)

COMM = MPI.COMM_WORLD


# -- problems, built serially with scipy (the reference is the gathered system) ------


# -- the case matrix ----------------------------------------------------------------

CASES = [
    ("poisson2d", "cg", None, {}),
    ("varpoisson", "cg", "jacobi", {}),
    ("varpoisson", "cg", "jacobi", {"norm_type": "preconditioned"}),
    ("varpoisson", "cg", "jacobi", {"norm_type": "natural"}),
    ("poisson2d", "pipecg", None, {}),
    ("varpoisson", "pipecg", "jacobi", {}),
    ("poisson2d", "gmres", None, {}),
    ("varpoisson", "gmres", "jacobi", {}),
    ("varpoisson", "fgmres", "jacobi", {}),
    ("poisson2d", "bicgstab", None, {}),
    ("varpoisson", "bicgstab", "jacobi", {}),
    ("poisson2d", "minres", None, {}),
    ("varpoisson", "minres", "jacobi", {}),
    ("path101", "cg", None, {}),
    ("convdiff", "gmres", None, {}),
    ("convdiff", "gmres", "jacobi", {"side": "right"}),
    ("varpoisson", "gmres", "jacobi", {"orthog": "mgs", "restart": 10}),
    ("convdiff", "gmres", None, {"orthog": "cgs2"}),
    ("convdiff", "gmres", None, {"orthog": "cgs", "restart": 20}),
    ("convdiff", "fgmres", "jacobi", {"restart": 15}),
    ("convdiff", "bicgstab", None, {}),
    ("convdiff", "bicgstab", "jacobi", {}),
    ("indefinite", "minres", None, {}),
    ("indefinite", "gmres", None, {"restart": 100}),
    ("neumann", "cg", None, {"nullspace": True}),
    ("neumann", "cg", "jacobi", {"nullspace": True}),
    ("neumann", "pipecg", None, {"nullspace": True}),
    ("neumann", "minres", None, {"nullspace": True}),
    ("neumann", "gmres", None, {"nullspace": True}),
]


def case_id(case):
    prob, method, pc, opts = case
    parts = [prob, method] + ([pc] if pc else [])
    parts += ["%s=%s" % kv for kv in opts.items() if kv[0] != "nullspace"]
    return "-".join(parts)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_case_matrix_against_scipy(case):
    """Each problem x method x preconditioner case converges to scipy's solution of the
    gathered system."""
    prob, method, pc, opts = case
    opts = dict(opts)
    A, b = distribute(prob)
    if opts.pop("nullspace", False):
        opts["nullspace"] = constants(A)
    x, info = dmsolve.solve(A, b, method=method, pc=pc, rtol=1e-10, maxiter=2000, **opts)
    assert_collective(COMM, info.converged, "%s: %s" % (case_id(case), info))
    assert_collective(COMM, len(info.residual_norms) == info.iterations + 1)
    assert_collective(COMM, same_on_all_ranks(COMM, (info.iterations, info.reason.name)))
    assert_collective(COMM, info.residual_norms[-1] <= 1e-10 * info.bnorm)
    Ag, bg = problem(prob)
    xg = x.gather()
    assert_allclose_collective(xg, reference(prob), rtol=1e-6, atol=1e-8 * np.abs(xg).max(),
                               err_msg=case_id(case))
    # the true residual agrees with the monitored norm's verdict
    true = np.linalg.norm(bg - Ag @ xg)
    assert_collective(COMM, true <= 1e-7 * np.linalg.norm(bg), "true residual %g" % true)


@pytest.mark.parametrize("method", METHODS)
def test_rank_without_rows(method):
    """Every method converges when the last rank owns no rows."""
    prob = "convdiff" if method in ("gmres", "fgmres", "bicgstab") else "poisson2d"
    Ag, _ = problem(prob)
    A, b = distribute(prob, layout=empty_last_layout(Ag.shape[0], COMM))
    x, info = getattr(dmsolve, method)(A, b, rtol=1e-10, maxiter=1000)
    assert_collective(COMM, info.converged, str(info))
    assert_allclose_collective(x.gather(), reference(prob), rtol=1e-6, atol=1e-12)


def _serial_count(name, method, **kw):
    Ag, bg = problem(name)
    A = DistCSR.from_global(Ag, MPI.COMM_SELF)
    b = DistVector.from_global(bg, A.row_layout)
    return getattr(dmsolve, method)(A, b, **kw)[1]


@pytest.mark.parametrize("name,method", [("poisson2d", "cg"), ("path101", "cg"),
                                         ("convdiff", "gmres"), ("poisson2d", "gmres"),
                                         ("convdiff", "bicgstab"), ("indefinite", "minres")])
def test_iteration_counts_independent_of_rank_count(name, method):
    """Iteration counts at this rank count are within a few of the serial ones."""
    kw = dict(rtol=1e-8, maxiter=3000)
    ser = _serial_count(name, method, **kw)
    A, b = distribute(name)
    _, info = getattr(dmsolve, method)(A, b, **kw)
    assert_collective(COMM, ser.converged and info.converged)
    assert_collective(COMM, abs(info.iterations - ser.iterations) <= 1,
                      "%d ranks: %d iterations, serial %d"
                      % (COMM.Get_size(), info.iterations, ser.iterations))


class CountingComm(MPI.Intracomm):
    """COMM_WORLD, counting the global reductions made through it."""

    def __init__(self, comm):
        super().__init__()
        self.count = 0

    def __new__(cls, comm):
        return super().__new__(cls, comm)

    def Allreduce(self, *args, **kw):
        self.count += 1
        return super().Allreduce(*args, **kw)

    def Iallreduce(self, *args, **kw):
        self.count += 1
        return super().Iallreduce(*args, **kw)

    def allreduce(self, *args, **kw):
        self.count += 1
        return super().allreduce(*args, **kw)


@pytest.mark.parametrize("method,per_iteration", [("pipecg", 1), ("cg", 2),
                                                  ("bicgstab", 3), ("minres", 2)])
def test_reductions_per_iteration(method, per_iteration):
    """Each method makes the global reductions per iteration it documents."""
    Ag, bg = problem("poisson2d")
    cc = CountingComm(COMM)
    A = DistCSR.from_global(Ag, cc)
    b = DistVector.from_global(bg, A.row_layout)
    counted, infos = [], []
    for k in (5, 10):
        before = cc.count
        _, info = getattr(dmsolve, method)(A, b, rtol=1e-14, maxiter=k, M=None)
        counted.append(cc.count - before)
        infos.append(info)
        assert_collective(COMM, info.reason is ConvergedReason.MAXITER and info.iterations == k)
    # the library's count is the truth, and the marginal cost is per_iteration
    assert_collective(COMM, [i.reductions for i in infos] == counted,
                      "reported %s, counted %s" % ([i.reductions for i in infos], counted))
    assert_collective(COMM, counted[1] - counted[0] == 5 * per_iteration,
                      "%s: %s reductions for 5 and 10 iterations" % (method, counted))


def test_pipecg_one_reduction_per_iteration_with_pc():
    """Pipelined CG makes one (non-blocking) reduction per iteration with a preconditioner too."""
    A, b = distribute("poisson2d")
    M = preconditioners.make("jacobi", A)
    infos = [dmsolve.pipecg(A, b, M=M, rtol=1e-14, maxiter=k)[1] for k in (3, 9)]
    assert_collective(COMM, infos[1].reductions - infos[0].reductions == 6)


# -- invariants -----------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_x0_not_mutated_and_used(method):
    """x0 is used as the starting guess and left unchanged."""
    A, b = distribute("poisson2d")
    x0 = DistVector.from_global(np.linspace(-1, 1, A.shape[0]), A.col_layout)
    keep = x0.local.copy()
    x, info = getattr(dmsolve, method)(A, b, x0, rtol=1e-9)
    assert_collective(COMM, info.converged)
    assert_collective(COMM, np.array_equal(x0.local, keep) and x is not x0)
    assert_allclose_collective(x.gather(), reference("poisson2d"), rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_zero_rhs_gives_zero(method):
    """b = 0 gives x = 0 at once, converged."""
    A, b = distribute("poisson2d")
    b.fill(0.0)
    x0 = DistVector.full(A.col_layout, 3.0)
    calls = []
    x, info = getattr(dmsolve, method)(A, b, x0, callback=calls.append)
    assert_collective(COMM, info.converged and info.iterations == 0 and not calls)
    assert_collective(COMM, not np.any(x.local) and np.all(x0.local == 3.0))


@pytest.mark.parametrize("method", METHODS)
def test_exact_x0_takes_no_iterations(method):
    """An exact x0 ends in zero iterations."""
    A, b = distribute("poisson2d")
    x0 = DistVector.from_global(reference("poisson2d"), A.col_layout)
    x, info = getattr(dmsolve, method)(A, b, x0, rtol=1e-8)
    assert_collective(COMM, info.converged and info.iterations == 0, str(info))
    assert_allclose_collective(x.local, x0.local, rtol=0, atol=0)


@pytest.mark.parametrize("method", METHODS)
def test_maxiter_one_gives_one_callback(method):
    """maxiter=1 calls the callback once."""
    A, b = distribute("convdiff" if method in ("gmres", "fgmres", "bicgstab") else "poisson2d")
    seen = []
    x, info = getattr(dmsolve, method)(A, b, maxiter=1, callback=lambda xk: seen.append(
        xk.local.copy()))
    assert_collective(COMM, len(seen) == 1 and info.iterations == 1, str(info))
    assert_collective(COMM, info.reason is ConvergedReason.MAXITER and not info.converged)
    assert_collective(COMM, np.array_equal(seen[0], x.local))
    assert_raises_collective(COMM, ConvergenceError, info.check)


@pytest.mark.parametrize("method", METHODS)
def test_callbacks_equal_iterations(method):
    """The callback is called once per iteration."""
    A, b = distribute("poisson2d")
    n = [0]

    def cb(xk):
        n[0] += 1
    _, info = getattr(dmsolve, method)(A, b, rtol=1e-6, callback=cb)
    assert_collective(COMM, info.converged and n[0] == info.iterations)


@pytest.mark.parametrize("method", METHODS)
def test_positional_tolerance_is_a_type_error(method):
    """A tolerance given by position is a TypeError."""
    A, b = distribute("poisson2d")
    assert_raises_collective(COMM, TypeError, getattr(dmsolve, method), A, b, None, 1e-5)


@pytest.mark.parametrize("method", ["cg", "pipecg", "minres"])
def test_indefinite_preconditioner(method):
    """An indefinite preconditioner is reported as INDEFINITE_PC by the methods that need a
    definite one."""
    A, b = distribute("poisson2d")
    _, info = getattr(dmsolve, method)(A, b, M=lambda r: -r)
    assert_collective(COMM, info.reason is ConvergedReason.INDEFINITE_PC, str(info))


HERMITIAN_METHODS = ["cg", "pipecg", "minres", "gmres", "fgmres", "bicgstab"]
GENERAL_METHODS = ["gmres", "fgmres", "bicgstab"]
PCS = [None, "jacobi", "bjacobi", "asm"]


def make_pc(pc, A, method):
    if pc is None:
        return None
    if pc == "asm" and method in ("cg", "pipecg", "minres"):
        return preconditioners.make("asm", A, restricted=False)   # symmetric variant
    return preconditioners.make(pc, A)


@pytest.mark.parametrize("pc", PCS, ids=str)
@pytest.mark.parametrize("method", HERMITIAN_METHODS)
def test_hermitian_system_matches_spsolve(comm, method, pc):
    """Every method solves a Hermitian positive definite system to spsolve's answer, with each
    preconditioner."""
    Ag = hermitian()
    b = complex_rhs(Ag.shape[0])
    A = DistCSR.from_global(Ag, comm)
    assert_collective(comm, A.dtype == np.complex128)
    x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout),
                                      rtol=RTOL, M=make_pc(pc, A, method), maxiter=2000)
    check_solution(comm, Ag, b, x, info, "%s+%s" % (method, pc))


@pytest.mark.parametrize("pc", PCS, ids=str)
@pytest.mark.parametrize("method", GENERAL_METHODS)
def test_general_complex_system_matches_spsolve(comm, method, pc):
    """GMRES, FGMRES and BiCGStab solve a general complex system to spsolve's answer, with each
    preconditioner."""
    Ag = general()
    b = complex_rhs(Ag.shape[0], seed=5)
    A = DistCSR.from_global(Ag, comm)
    x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout),
                                      rtol=RTOL, M=make_pc(pc, A, method), maxiter=2000)
    check_solution(comm, Ag, b, x, info, "%s+%s" % (method, pc))


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab"])
def test_iteration_counts_follow_scipy(comm, method):
    """Complex solves take scipy's iteration counts, within one."""
    # the same Krylov space and the same stopping test: scipy's complex
    # solvers take the same number of iterations, up to rounding (+-1)
    Ag = hermitian(12)
    b = complex_rhs(Ag.shape[0], seed=7)
    count = [0]

    def cb(*_):
        count[0] += 1

    kw = {"restart": 1000} if method == "gmres" else {}
    if method == "gmres":
        kw["callback_type"] = "pr_norm"
    getattr(spla, method)(Ag, b, rtol=1e-8, atol=0.0, maxiter=1000, callback=cb, **kw)
    A = DistCSR.from_global(Ag, comm)
    _, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout), rtol=1e-8,
                                      **({"restart": 1000} if method == "gmres" else {}))
    assert_collective(comm, info.converged and abs(info.iterations - count[0]) <= 1,
                      "%s: %d iterations, scipy %d" % (method, info.iterations, count[0]))


@pytest.mark.parametrize("method", ["cg", "gmres", "bicgstab", "minres"])
def test_real_matrix_with_complex_rhs(comm, method):
    """A real A with a complex b is a complex solve with spsolve's answer."""
    # a real A and a complex b: a complex solve, x = A^{-1} Re b + i A^{-1} Im b
    Ag = sp.csr_matrix(laplacian(12) + 0.5 * sp.eye(144))
    b = complex_rhs(144, seed=11)
    A = DistCSR.from_global(Ag, comm)
    assert_collective(comm, A.dtype == np.float64)
    x, info = getattr(krylov, method)(A, DistVector.from_global(b, A.row_layout), rtol=RTOL,
                                      M=preconditioners.make("jacobi", A))
    check_solution(comm, Ag, b, x, info, method)


@pytest.mark.parametrize("method", ["gmres", "bicgstab"])
def test_complex_matrix_with_real_rhs_and_complex_x0(comm, method):
    """A complex A with a real b, and a complex x0, give a complex solve with spsolve's answer."""
    Ag = general(10)
    N = Ag.shape[0]
    b = np.random.default_rng(4).standard_normal(N)
    A = DistCSR.from_global(Ag, comm)
    bv = DistVector.from_global(b, A.row_layout)
    assert_collective(comm, bv.dtype == np.float64)
    x0 = DistVector.from_global(1j * np.ones(N), A.row_layout)
    x, info = getattr(krylov, method)(A, bv, x0, rtol=RTOL)
    check_solution(comm, Ag, b, x, info, method)
    assert_collective(comm, np.all(x0.local == 1j), "x0 modified")
    # a real A and b with a complex x0 is a complex solve too
    Ar = DistCSR.from_global(sp.csr_matrix(laplacian(10)), comm)
    x, info = getattr(krylov, method)(Ar, bv, x0, rtol=RTOL)
    check_solution(comm, laplacian(10), b, x, info, method + "/complex-x0")


# -- partitions where ranks own nothing: valid, must give the right answer ---------------

EMPTY = [(m, pc) for m in ("cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres")
         for pc in (None, "jacobi", "bjacobi", "asm", "cheby", "amg")
         if not (m == "minres" and pc in ("bjacobi", "asm"))]


@pytest.mark.parametrize("method, pc", EMPTY, ids=["%s-%s" % (m, p or "none") for m, p in EMPTY])
def test_more_ranks_than_rows(comm, method, pc):
    """Every method with every preconditioner solves a system of 2 rows (at 3
    and 4 ranks some ranks own nothing) to scipy's answer, with finite
    residual norms."""
    # CG takes the symmetric (unrestricted) Schwarz variant: the default
    # restricted one is refused under CG
    if pc == "asm" and method in ("cg", "pipecg"):
        pc = ("asm", {"restricted": False})
    A = gallery.poisson1d(2, comm)
    b = gallery.rhs(A, "random", seed=2)
    x, info = solve(A, b, method, pc, rtol=1e-10)
    ref = np.linalg.solve(A.to_scipy().toarray(), b.gather())
    assert_collective(comm, info.converged, str(info))
    assert_allclose_collective(x.gather(), ref, comm, rtol=1e-8)
    assert_collective(comm, np.all(np.isfinite(info.residual_norms)), str(info))
