"""The truth test: a convergence a Krylov method claims in its own norm is
confirmed with the true residual, so a singular preconditioner or a drifting
recurrence is not reported as convergence, the true residual norm is reported
at every exit, and good solves are left alone.

Every figure is compared with numpy/scipy on the gathered system."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
from dmsolve import ConvergedReason, ConvergenceError, DistVector, Preconditioner, gallery, solve
from dmsolve.krylov import _truth
from krylov_cases import METHODS, true_residual
from mpitest import Checks, assert_allclose_collective, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


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


# -- the true residual at a claimed convergence ---------------------------------

SINGULAR_PC_CASES = [("gmres", {}), ("cg", {"norm_type": "preconditioned"}),
                     ("cg", {"norm_type": "natural"}),
                     ("pipecg", {"norm_type": "preconditioned"}), ("minres", {})]


@pytest.mark.parametrize("method, kw", SINGULAR_PC_CASES,
                         ids=["-".join([m] + list(k.values())) for m, k in SINGULAR_PC_CASES])
def test_singular_preconditioner_is_false_convergence(method, kw):
    """A preconditioner that zeroes rows makes the method's norm meet the test falsely: the
    truth test reports it, not convergence."""
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


def test_true_residual_norm_is_reported_at_every_exit():
    """SolveInfo's true residual norm is ||b - A x|| of the returned x, at every kind of exit."""
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
    """MINRES whose recurrence reaches rtol before the true residual restarts rather than
    claims convergence."""
    # shifted3d n=16 (slightly nonsymmetric) at rtol 1e-8: MINRES's recurrence
    # reaches rtol while the true relative residual is 3.8e-8
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
    """The truth test of a shifted MINRES measures ||b - (A - shift I) x||."""
    A = gallery.poisson2d(12, COMM)
    b = gallery.rhs(A, "random", seed=4)
    x, info = dmsolve.minres(A, b, shift=1.5, rtol=1e-10, maxiter=1000)
    assert_collective(COMM, info.converged and info.extra["truth_restarts"] == 0, str(info))
    # a small residual from cancellation: its relative rounding is ~eps ||A x|| / ||r||
    assert_allclose_collective(info.true_residual_norm, true_residual(A, b, x, 1.5),
                               rtol=1e-4)


def test_truth_check_leaves_good_solves_alone():
    """The truth test adds no restart or iteration to ordinary solves, only one product and one
    reduction."""
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


def test_truth_constants_are_documented():
    """The truth test's constants are named in the stopping-test notes every method shares."""
    # the stopping-test notes every method shares name what happens at a claim
    for method in METHODS:
        doc = getattr(dmsolve, method).__doc__ or ""
        assert_collective(COMM, ("TRUTH_SLACK" in doc and "FALSE_CONVERGENCE" in doc)
                          or doc == "", method)
    assert_collective(COMM, _truth.TRUTH_RESTARTS >= 1 and _truth.TRUTH_SLACK >= 1)
