"""No silent wrong answers from the Krylov methods: a claimed
convergence is confirmed with the true residual, the null space is tested,
breakdowns are not convergence, pipelined CG replaces its residual, symmetry
is checked on request and a nonsymmetric preconditioner is refused under
CG/MINRES, and GMRES writes checkpoints in the middle of a cycle.

Every figure is compared with numpy/scipy on the gathered system."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import preconditioners
from dmsolve import (ConvergedReason, ConvergenceError, DistCSR, DistVector, Layout,
                     Preconditioner, gallery, solve)
from dmsolve import checkpoint as ck
from dmsolve.cli import main
from dmsolve.krylov import _truth
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective)

COMM = MPI.COMM_WORLD
METHODS = ["cg", "pipecg", "gmres", "fgmres", "bicgstab", "minres"]


def true_residual(A, b, x, shift=0.0):
    """``||b - (A - shift I) x||_2`` from the gathered system (numpy)."""
    S = A.to_scipy()
    xg = x.gather()
    return float(np.linalg.norm(b.gather() - S @ xg + shift * xg))


class ZeroRows(Preconditioner):
    """Jacobi that maps the rows with global index ``% every == 0`` to zero: a
    singular (symmetric positive semidefinite) preconditioner."""

    name = "zero-rows"

    def __init__(self, A, every=5):
        super().__init__(A)
        lay = A.row_layout
        gi = np.arange(lay.start, lay.stop)
        self.scale = np.where(gi % every == 0, 0.0, 1.0 / A.diagonal().local)
        self._done()

    def _apply(self, r, out):
        np.multiply(r, self.scale, out=out)


class Unsymmetric(Preconditioner):
    """A stand-in for a preconditioner that says it is not symmetric (as
    restricted additive Schwarz does); applies a scaling."""

    name = "stand-in"
    symmetric = False

    def __init__(self, A, restricted=None):
        super().__init__(A)
        if restricted is not None:
            self.name = "asm"
            self.restricted = restricted
        self._done()

    def _apply(self, r, out):
        np.multiply(r, 0.25, out=out)


# -- 1. the true residual at a claimed convergence ---------------------------------

SINGULAR_PC_CASES = [("gmres", {}), ("cg", {"norm_type": "preconditioned"}),
                     ("cg", {"norm_type": "natural"}),
                     ("pipecg", {"norm_type": "preconditioned"}), ("minres", {})]


@pytest.mark.parametrize("method, kw", SINGULAR_PC_CASES,
                         ids=["-".join([m] + list(k.values())) for m, k in SINGULAR_PC_CASES])
def test_singular_preconditioner_is_false_convergence(method, kw):
    # the method's norm (||M r|| or r^T M r) cannot see the rows M zeroes:
    # it meets the test while ||b - A x|| / ||b|| is about 0.5
    A = gallery.poisson2d(20, COMM)
    b = gallery.rhs(A, "random", seed=2)
    x, info = getattr(dmsolve, method)(A, b, M=ZeroRows(A), rtol=1e-8, maxiter=2000, **kw)
    true = true_residual(A, b, x)
    bnorm = np.linalg.norm(b.gather())
    with Checks(COMM) as checks:
        checks.add(info.reason is ConvergedReason.FALSE_CONVERGENCE, "reason", str(info))
        checks.add(not info.converged, "not converged")
        checks.add(info.reason.petsc_name == "DIVERGED_FALSE_CONVERGENCE", "PETSc name")
        checks.add(true > 0.1 * bnorm, "the answer is wrong", true / bnorm)
        checks.add(info.final_residual_norm <= 1e-8 * info.bnorm, "the method's norm met it")
        checks.add(len(info.residual_norms) == info.iterations + 1, "one norm per iteration")
    assert_allclose_collective(info.true_residual_norm, true, rtol=1e-10)
    assert_raises_collective(COMM, ConvergenceError, getattr(dmsolve, method), A, b,
                             M=ZeroRows(A), rtol=1e-8, maxiter=2000, raise_on_failure=True,
                             match="DIVERGED_FALSE_CONVERGENCE", **kw)


def _saddle_point(comm):
    # [[L, B^T], [B, 0]]: L the 2D Laplacian (400 rows), B random sparse 30 x 400
    n = 20
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    L = sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))
    B = sp.random(30, n * n, density=0.02, random_state=1, format="csr")
    K = sp.bmat([[L, B.T], [B, None]], format="csr")
    return DistCSR.from_global(K, comm)


def test_cli_exits_nonzero_on_the_saddle_point_system(comm, shared_tmp_path, capsys):
    # the case: GMRES + amg on a saddle-point matrix said CONVERGED_RTOL
    # (true residual 0.12) and the CLI exited 0
    path = str(shared_tmp_path / "saddle.mtx")
    dmsolve.io.write_matrix(path, _saddle_point(comm))
    code = main(["solve", "--matrix", path, "--method", "gmres", "--pc", "amg",
                 "--rtol", "1e-8", "--maxiter", "500"], comm)
    out = capsys.readouterr()
    with Checks(comm) as checks:
        checks.add(code == 1, "exit code 1", code)
        checks.add("CONVERGED_RTOL" not in out.out, "no false claim", out.out)


def test_true_residual_norm_is_reported_at_every_exit():
    A = gallery.convection_diffusion(14, COMM)
    b = gallery.rhs(A, "random", seed=3)
    S = gallery.poisson2d(14, COMM)
    for method in METHODS:
        op = S if method in ("cg", "pipecg", "minres") else A
        for kw in ({"rtol": 1e-9, "maxiter": 2000}, {"maxiter": 3}):
            x, info = getattr(dmsolve, method)(op, b, **kw)
            assert_collective(COMM, info.converged == ("rtol" in kw), "%s %s" % (method, info))
            assert_allclose_collective(info.true_residual_norm, true_residual(op, b, x),
                                       rtol=1e-4, err_msg="%s %s" % (method, kw))
    # b = 0: exactly zero; a NaN from the preconditioner: not measured
    z = DistVector.zeros(A.row_layout)
    _, info = dmsolve.gmres(A, z)
    assert_collective(COMM, info.true_residual_norm == 0.0, str(info))
    _, info = dmsolve.gmres(A, b, M=lambda r: DistVector.full(r.layout, np.nan))
    assert_collective(COMM, info.reason is ConvergedReason.NANORINF
                      and np.isnan(info.true_residual_norm), str(info))


def test_minres_drift_is_restarted_not_claimed():
    # the case: shifted3d n=16 (slightly nonsymmetric) at rtol 1e-8 said
    # RTOL with a true relative residual of 3.8e-8
    A = gallery.shifted_laplacian(16, COMM, shift=0.2)
    b = gallery.rhs(A, "random", seed=0)
    x, info = dmsolve.minres(A, b, rtol=1e-8, maxiter=3000)
    true = true_residual(A, b, x)
    bnorm = np.linalg.norm(b.gather())
    with Checks(COMM) as checks:
        checks.add(info.converged, "converged", str(info))
        checks.add(true <= 1e-8 * bnorm, "true residual meets the test", true / bnorm)
        checks.add(info.extra["truth_restarts"] >= 1, "restarted", info.extra)
        checks.add(len(info.residual_norms) == info.iterations + 1, "one norm per iteration")
    assert_allclose_collective(info.true_residual_norm, true, rtol=1e-4)


def test_minres_shifted_truth_uses_the_shift():
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=4)
    x, info = dmsolve.minres(A, b, shift=1.5, rtol=1e-10, maxiter=1000)
    assert_collective(COMM, info.converged and info.extra["truth_restarts"] == 0, str(info))
    # a small residual from cancellation: its relative rounding is ~eps ||A x|| / ||r||
    assert_allclose_collective(info.true_residual_norm, true_residual(A, b, x, 1.5),
                               rtol=1e-4)


@pytest.mark.parametrize("rtol", [1e-12, 1e-13])
def test_pipecg_drift_is_restarted_not_claimed(rtol):
    # pipelined CG's recurrence residual drifts from the true one: at 1e-12 it
    # said RTOL with a true relative residual of 4.7e-12
    A = gallery.poisson2d(64, COMM)
    b = gallery.rhs(A, "random", seed=0)
    x, info = dmsolve.pipecg(A, b, rtol=rtol)
    true = true_residual(A, b, x)
    bnorm = np.linalg.norm(b.gather())
    assert_collective(COMM, info.converged and true <= rtol * bnorm,
                      "%s, true %.3g" % (info, true / bnorm))
    assert_collective(COMM, len(info.residual_norms) == info.iterations + 1)


@pytest.mark.parametrize("pc", [None, "jacobi"])
@pytest.mark.parametrize("rtol", [1e-12, 1e-13])
def test_pipecg_on_spd_is_never_indefinite(pc, rtol):
    # the case: DIVERGED_INDEFINITE_MAT on an SPD problem at 1e-12,
    # the recurrence's p^T A p turning negative; now the residual is replaced
    A = gallery.anisotropic_diffusion(40, COMM)
    b = gallery.rhs(A, "random", seed=0)
    x, info = solve(A, b, "pipecg", pc, rtol=rtol)
    true = true_residual(A, b, x)
    bnorm = np.linalg.norm(b.gather())
    assert_collective(COMM, info.converged and true <= rtol * bnorm,
                      "%s, true %.3g, %s" % (info, true / bnorm, info.extra))
    # CG converges there too, and pipecg's answer agrees with it
    xc, ic = solve(A, b, "cg", pc, rtol=rtol)
    assert_collective(COMM, ic.converged, str(ic))
    xr = xc.gather()
    assert_allclose_collective(x.gather(), xr, rtol=0, atol=1e-8 * np.abs(xr).max())


def test_pipecg_indefinite_matrix_is_still_reported():
    # the direct measurement of p^T A p keeps the honest verdict on an
    # indefinite matrix (and the recurrence restarts only on an SPD one)
    S = gallery.poisson2d(11, COMM, ny=9).to_scipy()
    A = DistCSR.from_global(sp.csr_matrix(S - 1.5 * sp.eye(99)), COMM)
    b = DistVector.full(A.row_layout, 1.0)
    _, info = dmsolve.pipecg(A, b, rtol=1e-8)
    assert_collective(COMM, info.reason is ConvergedReason.INDEFINITE_MAT, str(info))
    assert_collective(COMM, info.extra["residual_replacements"] == 0, str(info.extra))


def test_truth_check_leaves_good_solves_alone():
    # no restart, no extra iteration on the ordinary gallery solves, and one
    # product + one reduction more than the iterations need
    A = gallery.poisson2d(16, COMM)
    b = gallery.rhs(A, "random", seed=1)
    for method, pc in [("cg", None), ("cg", "jacobi"), ("pipecg", "jacobi"), ("gmres", "amg"),
                       ("minres", "jacobi"), ("bicgstab", "bjacobi"), ("fgmres", "cheby")]:
        x, info = solve(A, b, method, pc, rtol=1e-8)
        true = true_residual(A, b, x)
        with Checks(COMM) as checks:
            checks.add(info.converged and info.extra["truth_restarts"] == 0, method, str(info))
            checks.add(true <= _truth.TRUTH_SLACK * 1e-8 * np.linalg.norm(b.gather()),
                       "true residual within the slack", true)


# -- 2. the null space is tested -------------------------------------------------------

def _neumann(comm, nx=9, ny=11):
    def path(n):
        T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
        T[0, 0] = T[n - 1, n - 1] = 1.0
        return sp.csr_matrix(T)
    S = sp.csr_matrix(sp.kron(sp.eye(ny), path(nx)) + sp.kron(path(ny), sp.eye(nx)))
    return DistCSR.from_global(S, comm), S


@pytest.mark.parametrize("method", METHODS)
def test_vector_not_in_the_null_space_is_refused(method):
    # the constants are not in the null space of the Dirichlet Laplacian: it
    # said CONVERGED_RTOL with a true residual of 1.0, depending on the ranks
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    ones = DistVector.full(A.col_layout, 1.0)
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b,
                             nullspace=ones, match=r"nullspace vector 0 is not in the null "
                             r"space of A: \|\|A q\|\| / \(\|\|A v\|\| / \|\|v\|\|\) = \d")
    # the second vector of a basis is named
    An, _ = _neumann(COMM)
    bn = gallery.rhs(An, "random", seed=1)
    lay = An.col_layout
    ramp = DistVector(lay, np.arange(lay.start, lay.stop, dtype=float))
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), An, bn,
                             nullspace=[DistVector.full(lay, 1.0), ramp],
                             match="nullspace vector 1 is not")


def test_nullspace_ratio_is_rank_independent_and_correct():
    # the ratio in the message is ||A q|| / (||A v|| / ||v||), computed here serially
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    e = assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b,
                                 nullspace=DistVector.full(A.col_layout, 1.0))
    got = float(str(e).split(" = ")[1].split()[0])
    S = A.to_scipy()
    n = S.shape[0]
    q = np.ones(n) / np.sqrt(n)
    gi = np.arange(n, dtype=float)
    v = np.sin(0.6180339887 * gi + 0.5)
    want = np.linalg.norm(S @ q) / (np.linalg.norm(S @ v) / np.linalg.norm(v))
    assert_allclose_collective(got, want, rtol=1e-3)


def test_nullspace_removed_part_of_b_is_reported():
    A, S = _neumann(COMM)
    n = S.shape[0]
    rng = np.random.default_rng(5)
    bg = S @ rng.standard_normal(n) + 0.5          # inconsistent: a constant added
    b = DistVector.from_global(bg, A.row_layout)
    ones = DistVector.full(A.col_layout, 1.0)
    want = np.linalg.norm(np.full(n, bg.mean())) / np.linalg.norm(bg)
    for method in ("cg", "pipecg", "minres"):
        x, info = getattr(dmsolve, method)(A, b, rtol=1e-10, nullspace=ones, maxiter=500)
        assert_collective(COMM, info.converged, "%s %s" % (method, info))
        assert_allclose_collective(info.extra["nullspace_removed"], want, rtol=1e-10,
                                   err_msg=method)
        # what was solved is the projected system
        xg = x.gather()
        assert_allclose_collective(np.linalg.norm(bg - bg.mean() - S @ xg)
                                   / np.linalg.norm(bg), 0.0, atol=1e-9, err_msg=method)
    # a consistent b loses (almost) nothing
    bc = DistVector.from_global(bg - bg.mean(), A.row_layout)
    _, info = dmsolve.cg(A, bc, rtol=1e-10, nullspace=ones)
    assert_collective(COMM, info.extra["nullspace_removed"] < 1e-12, str(info.extra))


# -- 3. a breakdown that is not a happy one ----------------------------------------------

@pytest.mark.parametrize("method", METHODS)
def test_rhs_in_the_null_space_is_not_convergence(method):
    # MINRES said RTOL with x = 0 for b in the null space (Lanczos beta = 0 at
    # iteration 1, phibar zeroed by the eps-clamped rotation)
    A, _ = _neumann(COMM)
    b = DistVector.full(A.row_layout, 1.0)
    x, info = getattr(dmsolve, method)(A, b, rtol=1e-8)
    with Checks(COMM) as checks:
        checks.add(not info.converged, "not converged", str(info))
        checks.add(info.reason in (ConvergedReason.BREAKDOWN, ConvergedReason.INDEFINITE_MAT),
                   "breakdown", str(info))
        checks.add(info.iterations <= 1, "stops at once", info.iterations)
    assert_allclose_collective(info.true_residual_norm, np.sqrt(A.shape[0]), rtol=1e-12)


# -- 5. symmetry check on request ----------------------------------------------------------

@pytest.mark.parametrize("method", ["minres", "cg", "pipecg"])
def test_symmetry_check(method):
    f = getattr(dmsolve, method)
    A = gallery.convection_diffusion(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    assert_raises_collective(COMM, ValueError, f, A, b, check=True,
                             match=r"needs a symmetric matrix A \(check=True\)")
    S = gallery.poisson2d(12, COMM)
    x, info = f(S, b, check=True, rtol=1e-8)
    assert_collective(COMM, info.converged, str(info))
    # a nonsymmetric M: out = r + 0.5 * (r shifted by one row, on each rank)
    def skew(r):
        out = r.copy()
        out.local[1:] += 0.5 * r.local[:-1]
        return out
    assert_raises_collective(COMM, ValueError, f, S, b, M=skew, check=True,
                             match="needs a symmetric preconditioner M")
    # a symmetric one passes
    _, info = f(S, b, M=preconditioners.make("jacobi", S), check=True, rtol=1e-8)
    assert_collective(COMM, info.converged, str(info))
    assert_raises_collective(COMM, TypeError, f, S, b, check="yes", match="check")


@pytest.mark.mpi(min_size=2)
def test_symmetry_check_same_verdict_on_any_layout():
    # the test vectors are functions of the global index: a rank without rows
    # and uneven blocks give the verdict of the serial check
    Ag = gallery.shifted_laplacian(7, MPI.COMM_SELF).to_scipy()
    n = Ag.shape[0]
    inner = dmsolve.block_ranges(n, COMM.size - 1)
    lay = Layout(np.concatenate([inner, [n]]), COMM)
    A = DistCSR.from_global(Ag, COMM, layout=lay)
    b = DistVector.full(A.row_layout, 1.0)
    e = assert_raises_collective(COMM, ValueError, dmsolve.minres, A, b, check=True)
    A1 = DistCSR.from_global(Ag, MPI.COMM_SELF)
    try:
        dmsolve.minres(A1, DistVector.full(A1.row_layout, 1.0), check=True)
    except ValueError as e1:
        serial = str(e1)
    gap = float(str(e).split(" = ")[1].split()[0])
    gap1 = float(serial.split(" = ")[1].split()[0])
    assert_allclose_collective(gap, gap1, rtol=1e-3)


# -- 6. a nonsymmetric preconditioner under CG/MINRES ---------------------------------------

@pytest.mark.parametrize("method", ["cg", "pipecg", "minres"])
def test_nonsymmetric_preconditioner_is_refused(method):
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=1)
    assert_raises_collective(COMM, ValueError, getattr(dmsolve, method), A, b,
                             M=Unsymmetric(A), match=r"^%s needs a symmetric preconditioner; "
                             r"stand-in is not .*method='gmres', 'fgmres' or 'bicgstab'"
                             % method)
    assert_raises_collective(COMM, ValueError, solve, A, b, method, Unsymmetric(A, True),
                             match=r"asm with restricted=True is not: use "
                             r"pc=\('asm', \{'restricted': False\}\)")
    # the methods for nonsymmetric preconditioners take it
    for other in ("gmres", "fgmres", "bicgstab"):
        _, info = solve(A, b, other, Unsymmetric(A), rtol=1e-8, maxiter=2000)
        assert_collective(COMM, info.converged, "%s %s" % (other, info))


# -- 7. GMRES checkpoints inside a cycle --------------------------------------------------------

@pytest.mark.parametrize("method, pc, kw", [
    ("gmres", None, {}), ("gmres", "jacobi", {"side": "right"}), ("gmres", "jacobi", {}),
    ("fgmres", "jacobi", {})], ids=["gmres", "gmres-right-jacobi", "gmres-left-jacobi",
                                    "fgmres-jacobi"])
def test_gmres_checkpoints_inside_a_cycle(comm, shared_tmp_path, method, pc, kw):
    A = gallery.convection_diffusion(14, comm)
    b = gallery.rhs(A, "random", seed=3)
    path = str(shared_tmp_path / "ck")
    x0, i0 = solve(A, b, method, pc, rtol=1e-10, restart=30, **kw)
    assert_collective(comm, i0.converged and i0.iterations > 20, str(i0))
    seen = {}
    _, i1 = solve(A, b, method, pc, rtol=1e-10, restart=30, maxiter=12, checkpoint=path,
                  checkpoint_every=5, callback=lambda xk: seen.setdefault(len(seen) + 1,
                                                                          xk.gather()), **kw)
    rep = i1.extra["checkpoint"]
    man = ck.read_manifest(path)
    assert_collective(comm, rep["writes"] == 2 and man["iteration"] == 10, str(rep))
    # the checkpoint's x is the current iterate of iteration 10 (not the cycle's start)
    _, vecs = ck.load(path, comm)
    assert_allclose_collective(vecs["x"].gather(), seen[10], comm, rtol=0,
                               atol=1e-12 * np.abs(seen[10]).max())
    # resuming continues the cycle: the uninterrupted run, exactly
    x2, i2 = solve(A, b, method, pc, rtol=1e-10, restart=30, resume=path, **kw)
    assert_collective(comm, i2.extra["checkpoint"]["resumed_from"] == 10
                      and not i2.extra["checkpoint"]["restarted"], str(i2.extra))
    assert_equal_collective(i2.iterations, i0.iterations, comm)
    assert_equal_collective(i2.residual_norms, i0.residual_norms, comm)
    assert_allclose_collective(x2.local, x0.local, comm, rtol=0, atol=0)
    # with another restart length the cycle cannot continue: it restarts from x
    x3, i3 = solve(A, b, method, pc, rtol=1e-10, restart=8, resume=path, **kw)
    assert_collective(comm, i3.converged, str(i3))
    assert_allclose_collective(i3.true_residual_norm, true_residual(A, b, x3), comm,
                               rtol=1e-4)


@pytest.mark.mpi(min_size=2)
def test_gmres_mid_cycle_checkpoint_resumed_on_another_layout(comm, shared_tmp_path):
    # a partition-dependent preconditioner on another layout: GMRES restarts
    # from the saved iterate and converges
    A = gallery.convection_diffusion(14, comm)
    b = gallery.rhs(A, "random", seed=3)
    path = str(shared_tmp_path / "ck")
    solve(A, b, "gmres", "bjacobi", rtol=1e-10, maxiter=12, checkpoint=path,
          checkpoint_every=5)
    n = A.shape[0]
    w = np.ones(n)
    w[: n // 3] = 5.0
    A2 = DistCSR.from_global(A.to_scipy(), comm, layout=Layout.from_weights(w, comm))
    b2 = DistVector.from_global(b.gather(), A2.row_layout)
    x, info = solve(A2, b2, "gmres", "bjacobi", rtol=1e-10, resume=path)
    rep = info.extra["checkpoint"]
    assert_collective(comm, info.converged and rep["restarted"]
                      and rep["resumed_from"] == 10, "%s %s" % (info, rep))
    xr = np.linalg.solve(A.to_scipy().toarray(), b.gather())
    assert_allclose_collective(x.gather(), xr, comm, rtol=0, atol=1e-7 * np.abs(xr).max())


def test_truth_constants_are_documented():
    # the stopping-test notes every method shares name what happens at a claim
    for method in METHODS:
        doc = getattr(dmsolve, method).__doc__ or ""
        assert_collective(COMM, ("TRUTH_SLACK" in doc and "FALSE_CONVERGENCE" in doc)
                          or doc == "", method)
    assert_collective(COMM, _truth.TRUTH_RESTARTS >= 1 and _truth.TRUTH_SLACK >= 1)
