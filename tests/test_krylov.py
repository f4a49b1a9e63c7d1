"""Krylov solvers against scipy on the gathered system, at any rank count,
and the invariants every method keeps (x0 untouched, b = 0, exact x0,
maxiter=1, keyword-only tolerances, indefinite detection, errors on one rank
only)."""

import io
import re
import time

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
import preconditioners
from dmsolve import (ConvergedReason, ConvergenceError, DistCSR, DistLinearOperator,
                     DistVector, KSPMonitor, Layout, SolveInfo)
from dmsolve.krylov import (BACKENDS, CheckedSystem, KSPMonitor, available_methods,
                            check_gmres_options, check_system)
from mpitest import (assert_allclose_collective, assert_collective,
                     assert_raises_collective, same_on_all_ranks)

COMM = MPI.COMM_WORLD
METHODS = ["cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres"]


# -- problems, built serially with scipy (the reference is the gathered system) ------

def _path(n, neumann=False):
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1],
                 format="csr")
    if neumann:
        T = T.tolil()
        T[0, 0] = T[n - 1, n - 1] = 1.0
    return sp.csr_matrix(T)


def poisson2d(nx, ny):
    return sp.csr_matrix(sp.kron(sp.eye(ny), _path(nx)) + sp.kron(_path(ny), sp.eye(nx)))


def convdiff(n, wind=0.4):
    # upwind convection in x plus diffusion: nonsymmetric M-matrix
    D = sp.diags([-np.ones(n - 1), np.ones(n)], [-1, 0], format="csr")
    return sp.csr_matrix(poisson2d(n, n) + wind * sp.kron(sp.eye(n), D))


def neumann2d(nx, ny):
    # singular, null space = constants (graph Laplacian of the grid)
    return sp.csr_matrix(sp.kron(sp.eye(ny), _path(nx, True))
                         + sp.kron(_path(ny, True), sp.eye(nx)))


PROBLEMS = {
    "poisson2d": lambda: poisson2d(12, 11),                    # 132 rows
    # SPD with a varying diagonal, so that Jacobi is more than a scaling
    "varpoisson": lambda: sp.csr_matrix(poisson2d(12, 11)
                                        + sp.diags(np.linspace(0.0, 20.0, 132) ** 2 / 10)),
    "convdiff": lambda: convdiff(13),                          # 169 rows
    "indefinite": lambda: sp.csr_matrix(poisson2d(11, 9) - 1.5 * sp.eye(99)),
    "neumann": lambda: neumann2d(9, 11),                       # 99 rows, singular
    "path101": lambda: _path(101),
}
_CACHE = {}


def problem(name):
    if name not in _CACHE:
        Ag = PROBLEMS[name]()
        n = Ag.shape[0]
        rng = np.random.default_rng(1234)
        if name == "neumann":
            bg = Ag @ rng.standard_normal(n)          # consistent
        else:
            bg = rng.standard_normal(n)
        _CACHE[name] = (Ag, bg)
    return _CACHE[name]


def reference(name):
    Ag, bg = problem(name)
    if name == "neumann":
        return np.linalg.lstsq(Ag.toarray(), bg, rcond=None)[0]   # minimum norm
    return spla.spsolve(Ag.tocsc(), bg)


def empty_last_layout(n, comm):
    """Block layout over all ranks but the last, which owns nothing."""
    p = comm.Get_size()
    if p == 1:
        return Layout.block(n, comm)
    inner = dmsolve.block_ranges(n, p - 1)
    return Layout(np.concatenate([inner, [n]]), comm)


def distribute(name, comm=COMM, layout=None):
    Ag, bg = problem(name)
    A = DistCSR.from_global(Ag, comm, layout=layout)
    b = DistVector.from_global(bg, A.row_layout)
    return A, b


def constants(A):
    return DistVector.full(A.col_layout, 1.0)


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
    prob = "convdiff" if method in ("gmres", "fgmres", "bicgstab") else "poisson2d"
    Ag, _ = problem(prob)
    A, b = distribute(prob, layout=empty_last_layout(Ag.shape[0], COMM))
    x, info = getattr(dmsolve, method)(A, b, rtol=1e-10, maxiter=1000)
    assert_collective(COMM, info.converged, str(info))
    assert_allclose_collective(x.gather(), reference(prob), rtol=1e-6, atol=1e-12)


# -- agreement with scipy and between rank counts -------------------------------------

def _scipy_count(solver, Ag, bg, **kw):
    count = [0]

    def cb(*_):
        count[0] += 1
    solver(Ag, bg, callback=cb, **kw)
    return count[0]


def test_cg_iterations_match_scipy():
    Ag, bg = problem("poisson2d")
    A, b = distribute("poisson2d")
    _, info = dmsolve.cg(A, b, rtol=1e-8)
    ref = _scipy_count(spla.cg, Ag, bg, rtol=1e-8, atol=0.0)
    assert_collective(COMM, abs(info.iterations - ref) <= 1,
                      "cg %d vs scipy %d" % (info.iterations, ref))


def _serial_count(name, method, **kw):
    Ag, bg = problem(name)
    A = DistCSR.from_global(Ag, MPI.COMM_SELF)
    b = DistVector.from_global(bg, A.row_layout)
    return getattr(dmsolve, method)(A, b, **kw)[1]


@pytest.mark.parametrize("name,method", [("poisson2d", "cg"), ("path101", "cg"),
                                         ("convdiff", "gmres"), ("poisson2d", "gmres"),
                                         ("convdiff", "bicgstab"), ("indefinite", "minres")])
def test_iteration_counts_independent_of_rank_count(name, method):
    kw = dict(rtol=1e-8, maxiter=3000)
    ser = _serial_count(name, method, **kw)
    A, b = distribute(name)
    _, info = getattr(dmsolve, method)(A, b, **kw)
    assert_collective(COMM, ser.converged and info.converged)
    assert_collective(COMM, abs(info.iterations - ser.iterations) <= 1,
                      "%d ranks: %d iterations, serial %d"
                      % (COMM.Get_size(), info.iterations, ser.iterations))


@pytest.mark.parametrize("name", ["varpoisson", "path101"])
def test_pipecg_matches_cg(name):
    A, b = distribute(name)
    for pc in (None, "jacobi"):
        _, i1 = dmsolve.solve(A, b, method="cg", pc=pc, rtol=1e-8)
        _, i2 = dmsolve.solve(A, b, method="pipecg", pc=pc, rtol=1e-8)
        assert_collective(COMM, i1.converged and i2.converged)
        assert_collective(COMM, abs(i1.iterations - i2.iterations) <= 2,
                          "cg %d, pipecg %d" % (i1.iterations, i2.iterations))


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
    A, b = distribute("poisson2d")
    M = preconditioners.make("jacobi", A)
    infos = [dmsolve.pipecg(A, b, M=M, rtol=1e-14, maxiter=k)[1] for k in (3, 9)]
    assert_collective(COMM, infos[1].reductions - infos[0].reductions == 6)


# -- invariants -----------------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_x0_not_mutated_and_used(method):
    A, b = distribute("poisson2d")
    x0 = DistVector.from_global(np.linspace(-1, 1, A.shape[0]), A.col_layout)
    keep = x0.local.copy()
    x, info = getattr(dmsolve, method)(A, b, x0, rtol=1e-9)
    assert_collective(COMM, info.converged)
    assert_collective(COMM, np.array_equal(x0.local, keep) and x is not x0)
    assert_allclose_collective(x.gather(), reference("poisson2d"), rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("method", METHODS)
def test_zero_rhs_gives_zero(method):
    A, b = distribute("poisson2d")
    b.fill(0.0)
    x0 = DistVector.full(A.col_layout, 3.0)
    calls = []
    x, info = getattr(dmsolve, method)(A, b, x0, callback=calls.append)
    assert_collective(COMM, info.converged and info.iterations == 0 and not calls)
    assert_collective(COMM, not np.any(x.local) and np.all(x0.local == 3.0))


@pytest.mark.parametrize("method", METHODS)
def test_exact_x0_takes_no_iterations(method):
    A, b = distribute("poisson2d")
    x0 = DistVector.from_global(reference("poisson2d"), A.col_layout)
    x, info = getattr(dmsolve, method)(A, b, x0, rtol=1e-8)
    assert_collective(COMM, info.converged and info.iterations == 0, str(info))
    assert_allclose_collective(x.local, x0.local, rtol=0, atol=0)


@pytest.mark.parametrize("method", METHODS)
def test_maxiter_one_gives_one_callback(method):
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
    A, b = distribute("poisson2d")
    n = [0]

    def cb(xk):
        n[0] += 1
    _, info = getattr(dmsolve, method)(A, b, rtol=1e-6, callback=cb)
    assert_collective(COMM, info.converged and n[0] == info.iterations)


@pytest.mark.parametrize("method", METHODS)
def test_positional_tolerance_is_a_type_error(method):
    A, b = distribute("poisson2d")
    assert_raises_collective(COMM, TypeError, getattr(dmsolve, method), A, b, None, 1e-5)


@pytest.mark.parametrize("method", ["cg", "pipecg"])
def test_cg_on_indefinite_matrix_reports_indefinite_mat(method):
    A, b = distribute("indefinite")
    b.fill(1.0)
    x, info = getattr(dmsolve, method)(A, b, rtol=1e-8)
    assert_collective(COMM, info.reason is ConvergedReason.INDEFINITE_MAT, str(info))
    assert_collective(COMM, not info.converged)
    assert_raises_collective(COMM, ConvergenceError, getattr(dmsolve, method), A, b,
                             raise_on_failure=True)


@pytest.mark.parametrize("method", ["cg", "pipecg", "minres"])
def test_indefinite_preconditioner(method):
    A, b = distribute("poisson2d")
    _, info = getattr(dmsolve, method)(A, b, M=lambda r: -r)
    assert_collective(COMM, info.reason is ConvergedReason.INDEFINITE_PC, str(info))


def test_nan_from_preconditioner_is_reported():
    A, b = distribute("poisson2d")

    def bad(r):
        return DistVector.full(r.layout, np.nan)
    for method in ("cg", "gmres", "bicgstab", "minres", "pipecg"):
        _, info = getattr(dmsolve, method)(A, b, M=bad)
        assert_collective(COMM, info.reason in (ConvergedReason.NANORINF,
                                                ConvergedReason.INDEFINITE_PC), str(info))
        assert_collective(COMM, not info.converged)


def test_divergence_tolerance():
    A, b = distribute("poisson2d")
    _, info = dmsolve.cg(A, b, divtol=0.0)
    assert_collective(COMM, info.reason is ConvergedReason.DIVTOL and info.iterations == 1)
    _, info = dmsolve.cg(A, b, divtol=None, maxiter=3)
    assert_collective(COMM, info.reason is ConvergedReason.MAXITER)


def test_atol_reason():
    A, b = distribute("poisson2d")
    _, info = dmsolve.cg(A, b, rtol=0.0, atol=1e-6 * np.sqrt(A.shape[0]))
    assert_collective(COMM, info.reason is ConvergedReason.ATOL and info.converged)
    _, info = dmsolve.cg(A, b, rtol=1e-6)
    assert_collective(COMM, info.reason is ConvergedReason.RTOL)


def test_nullspace_keeps_iterates_orthogonal():
    A, b = distribute("neumann")
    ones = constants(A)
    for method in ("cg", "pipecg", "minres", "gmres", "fgmres", "bicgstab"):
        x, info = getattr(dmsolve, method)(A, b, rtol=1e-8, nullspace=[ones], maxiter=500)
        assert_collective(COMM, info.converged, "%s %s" % (method, info))
        assert_collective(COMM, abs(x.sum()) <= 1e-8 * x.norm() * A.shape[0],
                          "%s: sum %g" % (method, x.sum()))
    # an inconsistent b (constant shift) is made consistent for symmetric methods
    b2 = b.copy()
    b2.local += 0.5
    x, info = dmsolve.cg(A, b2, rtol=1e-10, nullspace=ones)
    assert_collective(COMM, info.converged)
    assert_allclose_collective(x.gather(), reference("neumann"), rtol=1e-6, atol=1e-9)


def test_nullspace_checks():
    A, b = distribute("neumann")
    ones = constants(A)
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b,
                             nullspace=[ones, ones.copy()], match="dependent")
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b, nullspace=[])


# -- checks at the door -------------------------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_door_checks(method):
    f = getattr(dmsolve, method)
    A, b = distribute("poisson2d")
    n = A.shape[0]
    other = DistVector(Layout.block(n + 1, COMM))
    assert_raises_collective(COMM, ValueError, f, A, other, match="b has global size")
    assert_raises_collective(COMM, ValueError, f, A, b, other, match="x0 has global size")
    assert_raises_collective(COMM, TypeError, f, A, b.local)
    assert_raises_collective(COMM, TypeError, f, b, b)
    assert_raises_collective(COMM, ValueError, f, A, b, rtol=-1.0)
    assert_raises_collective(COMM, TypeError, f, A, b, rtol="1e-5")
    assert_raises_collective(COMM, TypeError, f, A, b, maxiter=2.5)
    assert_raises_collective(COMM, TypeError, f, A, b, M=42)
    # a NaN on one rank only is seen by every rank
    bad = b.copy()
    if COMM.Get_rank() == COMM.Get_size() - 1 and bad.local.size:
        bad.local[0] = np.nan
    assert_raises_collective(COMM, ValueError, f, A, bad, match="NaN")
    # a layout with the same size but other ownership ranges
    if COMM.Get_size() > 1:
        lay = empty_last_layout(n, COMM)
        assert_raises_collective(COMM, ValueError, f, A, DistVector(lay), match="ranges")


def test_check_system_is_the_door_of_every_method():
    A, b = distribute("poisson2d")
    n = A.shape[0]
    s = check_system("cg", A, b, rtol=0.5, atol=0, maxiter=None, divtol=None, monitor=True,
                     nullspace=b)
    assert_collective(COMM, isinstance(s, CheckedSystem) and s.A is A and s.maxiter == 10 * n
                      and s.rtol == 0.5 and isinstance(s.atol, float) and s.divtol is None
                      and isinstance(s.monitor, KSPMonitor) and s.nullspace == [b], str(s))
    s = check_system("cg", A, b, rtol=1e-5, atol=0.0, maxiter=7, divtol=1e4, monitor=False)
    assert_collective(COMM, s.monitor is None and s.nullspace is None and s.maxiter == 7)
    # each refusal is the same exception and message as the method's own (which
    # agrees it across ranks, and then says where it was raised)
    bad = [{"rtol": float("nan")}, {"atol": -1.0}, {"divtol": "big"}, {"maxiter": -3},
           {"callback": 3}, {"monitor": "loud"}, {"nullspace": []}]
    base = {"rtol": 1e-5, "atol": 0.0, "maxiter": None, "divtol": 1e4}
    for kw in bad:
        try:
            check_system("cg", A, b, **{**base, **kw})
        except (TypeError, ValueError) as e:
            door = e
        else:
            door = None
        mine = assert_raises_collective(COMM, type(door), dmsolve.cg, A, b, **kw)
        text = re.sub(r" \[raised on ranks? [\d,]+\]$", "", str(mine))
        assert_collective(COMM, text == str(door), "%s: %r vs %r" % (kw, mine, door))


def test_check_gmres_options_is_public():
    check_gmres_options(5, "mgs", "left")
    for args in [(0, "cgs"), (5, "householder"), (5, "cgs", "middle")]:
        assert_raises_collective(COMM, ValueError, check_gmres_options, *args)


def test_backends_registry():
    A, b = distribute("poisson2d")
    assert_collective(COMM, BACKENDS.names() == ["dmsolve", "petsc"], str(BACKENDS))
    # one rule for names, one error wording (the Registry's)
    _, info = dmsolve.solve(A, b, "cg", rtol=1e-8, backend="DMSolve")
    assert_collective(COMM, info.converged and "backend" not in info.extra)
    assert_raises_collective(COMM, ValueError, dmsolve.solve, A, b, backend="trilinos",
                             match=r"^unknown backend 'trilinos'; available: dmsolve, petsc$")
    assert_raises_collective(COMM, TypeError, dmsolve.solve, A, b, backend=None,
                             match="backend name must be a string")


def test_gmres_options_checked():
    A, b = distribute("convdiff")
    assert_raises_collective(COMM, ValueError, dmsolve.gmres, A, b, restart=0)
    assert_raises_collective(COMM, ValueError, dmsolve.gmres, A, b, side="middle")
    assert_raises_collective(COMM, ValueError, dmsolve.fgmres, A, b, orthog="householder")
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b, norm_type="energy")


# -- errors on one rank only ----------------------------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", METHODS)
def test_callback_failing_on_one_rank_raises_everywhere(method):
    A, b = distribute("poisson2d")
    last = COMM.Get_size() - 1
    calls = [0]

    def cb(xk):
        calls[0] += 1
        if COMM.Get_rank() == last and calls[0] == 2:
            raise ValueError("boom in callback")
    t0 = time.perf_counter()
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b, rtol=1e-10,
                             callback=cb, match="boom in callback")
    assert_collective(COMM, time.perf_counter() - t0 < 10.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", METHODS)
def test_preconditioner_failing_on_one_rank_raises_everywhere(method):
    A, b = distribute("poisson2d")
    calls = [0]

    class FlakyPC:
        def apply(self, r, out=None):
            calls[0] += 1
            if COMM.Get_rank() == 0 and calls[0] == 3:
                raise RuntimeError("boom in preconditioner")
            out = r.empty_like() if out is None else out
            np.multiply(r.local, 0.25, out=out.local)
            return out
    assert_raises_collective(COMM, RuntimeError, getattr(dmsolve, method), A, b,
                             rtol=1e-10, M=FlakyPC(), match="boom in preconditioner")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["cg", "gmres"])
def test_final_callback_failure_is_agreed(method):
    # the failure happens after the last reduction: the final agreement catches it
    A, b = distribute("poisson2d")

    def cb(xk):
        if COMM.Get_rank() == 0:
            raise KeyError("late")
    assert_raises_collective(COMM, KeyError, getattr(dmsolve, method), A, b, maxiter=1,
                             callback=cb)


@pytest.mark.timeout(60)
def test_operator_failing_on_one_rank_raises_everywhere():
    A, b = distribute("poisson2d")
    calls = [0]

    def mv(x, out=None):
        y = A.matvec(x, out=out)
        calls[0] += 1
        if COMM.Get_rank() == COMM.Get_size() - 1 and calls[0] == 4:
            raise FloatingPointError("boom in matvec")
        return y
    op = DistLinearOperator(A.row_layout, A.col_layout, mv)
    for method in ("cg", "pipecg", "bicgstab"):
        calls[0] = 0
        assert_raises_collective(COMM, FloatingPointError, getattr(dmsolve, method), op, b,
                                 rtol=1e-10, match="boom in matvec")


# -- operators, preconditioners by name, monitors -----------------------------------

def test_generic_operator_without_out():
    A, b = distribute("convdiff")
    op = DistLinearOperator(A.row_layout, A.col_layout, lambda x: A @ x)
    assert_collective(COMM, dmsolve.aslinearoperator(A) is A)
    x, info = dmsolve.gmres(op, b, rtol=1e-10, maxiter=500)
    assert_collective(COMM, info.converged)
    assert_allclose_collective(x.gather(), reference("convdiff"), rtol=1e-6, atol=1e-12)


def test_solve_registry_and_pc_resolution():
    A, b = distribute("poisson2d")
    assert_collective(COMM, set(METHODS) <= set(available_methods()))
    assert_collective(COMM, {"jacobi", "none"} <= set(preconditioners.available()))
    _, i1 = dmsolve.solve(A, b, method="cg", pc=("jacobi", {"omega": 0.5}), rtol=1e-8)
    _, i2 = dmsolve.solve(A, b, method="cg", pc="none", rtol=1e-8)
    _, i3 = dmsolve.solve(A, b, method="CG", pc=preconditioners.Jacobi(A), rtol=1e-8)
    assert_collective(COMM, i1.converged and i2.converged and i3.converged)
    assert_raises_collective(COMM, ValueError, dmsolve.solve, A, b, method="qmr",
                             match="unknown Krylov method")
    assert_raises_collective(COMM, ValueError, dmsolve.solve, A, b, pc="ilu(7)",
                             match="unknown preconditioner")
    assert_raises_collective(COMM, TypeError, dmsolve.solve, A, b, pc="jacobi",
                             M=preconditioners.Jacobi(A))
    assert_raises_collective(COMM, TypeError, dmsolve.cg, A, b, M="jacobi")


def test_monitor_prints_petsc_lines_on_rank_zero():
    A, b = distribute("poisson2d")
    out = io.StringIO()
    _, info = dmsolve.cg(A, b, rtol=1e-6, monitor=KSPMonitor(stream=out))
    lines = out.getvalue().splitlines()
    if COMM.Get_rank() == 0:
        ok = (len(lines) == info.iterations + 2
              and all(re.fullmatch(r"[ \d]{3,} KSP Residual norm \d\.\d{12}e[+-]\d\d", ln)
                      for ln in lines[:-1])
              and lines[0] == "%3d KSP Residual norm %14.12e" % (0, info.residual_norms[0])
              and lines[-1] == "Linear solve converged due to CONVERGED_RTOL iterations %d"
              % info.iterations)
    else:
        ok = lines == []
    assert_collective(COMM, ok, "monitor output: %r" % lines[-3:])
    out = io.StringIO()
    _, info = dmsolve.gmres(A, b, maxiter=3, monitor=KSPMonitor(stream=out))
    last = out.getvalue().splitlines()[-1:] if COMM.Get_rank() == 0 else None
    assert_collective(COMM, COMM.Get_rank() != 0 or last == [
        "Linear solve did not converge due to DIVERGED_ITS iterations 3"], str(last))


def test_library_is_silent_by_default(capsys):
    A, b = distribute("poisson2d")
    for method in METHODS:
        getattr(dmsolve, method)(A, b, maxiter=5)
    captured = capsys.readouterr()
    assert_collective(COMM, captured.out == "" and captured.err == "")


def test_solve_info_fields():
    A, b = distribute("poisson2d")
    _, info = dmsolve.gmres(A, b, M=preconditioners.make("jacobi", A))
    assert_collective(COMM, isinstance(info, SolveInfo) and info.norm_type == "preconditioned")
    assert_collective(COMM, info.setup_seconds >= 0 and info.solve_seconds > 0)
    assert_collective(COMM, info.check() is info and info.reason.petsc_name == "CONVERGED_RTOL")
    assert_collective(COMM, isinstance(info.residual_norms, np.ndarray))
    _, info = dmsolve.gmres(A, b, M=preconditioners.make("jacobi", A),
                            side="right")
    assert_collective(COMM, info.norm_type == "unpreconditioned")


def test_minres_shift_checked_at_the_door():
    A, b = distribute("poisson2d")
    assert_raises_collective(COMM, ValueError, dmsolve.minres, A, b, shift=float("nan"),
                             match="shift must be a finite real number")
    assert_raises_collective(COMM, TypeError, dmsolve.minres, A, b, shift="0.5",
                             match="shift must be a real number")


def test_minres_shift_matches_scipy():
    Ag, bg = problem("poisson2d")
    A, b = distribute("poisson2d")
    x, info = dmsolve.minres(A, b, shift=1.5, rtol=1e-10, maxiter=1000)
    ref = spla.spsolve((Ag - 1.5 * sp.eye(Ag.shape[0])).tocsc(), bg)
    assert_collective(COMM, info.converged)
    assert_allclose_collective(x.gather(), ref, rtol=1e-6, atol=1e-10)


def test_gmres_restart_reports_true_residual():
    Ag, bg = problem("convdiff")
    A, b = distribute("convdiff")
    x5, info5 = dmsolve.gmres(A, b, restart=5, maxiter=5, rtol=1e-14)
    _, info10 = dmsolve.gmres(A, b, restart=5, maxiter=10, rtol=1e-14)
    true5 = np.linalg.norm(bg - Ag @ x5.gather())
    # the Arnoldi estimate at the end of the cycle, then the recomputed residual
    assert_allclose_collective(info5.residual_norms[5], true5, rtol=1e-8)
    assert_allclose_collective(info10.residual_norms[5], true5, rtol=1e-12)
    assert_allclose_collective(info10.residual_norms[0], np.linalg.norm(bg), rtol=1e-12)
    assert_collective(COMM, info10.residual_norms[10] < info10.residual_norms[5])
