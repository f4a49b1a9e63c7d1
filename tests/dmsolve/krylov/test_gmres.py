"""GMRES and FGMRES (dmsolve.krylov.gmres, the shared Arnoldi cycle): options
checked at the door, the true residual at a restart, complex systems with every
orthogonalisation, and checkpoints written and resumed inside a cycle."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
from bad_inputs import check_bad_input
from dmsolve import DistCSR, DistVector, Layout, checkpoint as ck, gallery, krylov, solve
from dmsolve.krylov import check_gmres_options
from krylov_cases import (RTOL, check_solution, complex_rhs, distribute, general, problem,
                          true_residual)
from mpitest import (assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective)

COMM = MPI.COMM_WORLD


def test_check_gmres_options_is_public():
    """check_gmres_options is public: it accepts good options and refuses bad ones on every
    rank."""
    check_gmres_options(5, "mgs", "left")
    for args in [(0, "cgs"), (5, "householder"), (5, "cgs", "middle")]:
        assert_raises_collective(COMM, ValueError, check_gmres_options, *args)


def test_gmres_options_checked():
    """Bad GMRES options (restart, side, orthogonalisation), and a bad norm type, are refused on
    every rank."""
    A, b = distribute("convdiff")
    assert_raises_collective(COMM, ValueError, dmsolve.gmres, A, b, restart=0)
    assert_raises_collective(COMM, ValueError, dmsolve.gmres, A, b, side="middle")
    assert_raises_collective(COMM, ValueError, dmsolve.fgmres, A, b, orthog="householder")
    assert_raises_collective(COMM, ValueError, dmsolve.cg, A, b, norm_type="energy")


def test_gmres_restart_reports_true_residual():
    """At a restart GMRES reports the true residual norm, not the least-squares estimate."""
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


# -- GMRES checkpoints inside a cycle --------------------------------------------------------

@pytest.mark.parametrize("method, pc, kw", [
    ("gmres", None, {}), ("gmres", "jacobi", {"side": "right"}), ("gmres", "jacobi", {}),
    ("fgmres", "jacobi", {})], ids=["gmres", "gmres-right-jacobi", "gmres-left-jacobi",
                                    "fgmres-jacobi"])
def test_gmres_checkpoints_inside_a_cycle(comm, shared_tmp_path, method, pc, kw):
    """GMRES writes checkpoints in the middle of a cycle, and resuming from one ends like the
    uninterrupted run."""
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
    """A mid-cycle checkpoint resumes on another layout and converges."""
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


@pytest.mark.parametrize("orthog", ["cgs", "cgs2", "mgs"])
def test_gmres_complex_with_every_orthogonalisation_and_restarts(comm, orthog):
    """Complex GMRES and FGMRES match scipy with every orthogonalisation, across restarts."""
    Ag = general(12)
    b = complex_rhs(Ag.shape[0], seed=3)
    A = DistCSR.from_global(Ag, comm)
    x, info = krylov.gmres(A, DistVector.from_global(b, A.row_layout), rtol=RTOL,
                           restart=7, orthog=orthog, maxiter=3000)
    check_solution(comm, Ag, b, x, info, "gmres/%s" % orthog)
    assert_collective(comm, info.iterations > 7, "no restart exercised")


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("gmres-restart-zero", ValueError, "restart", lambda e: solve(e.A, e.b, "gmres", restart=0)),
    ("gmres-bad-side", ValueError, "side", lambda e: solve(e.A, e.b, "gmres", side="up")),
    ("gmres-bad-orthogonalisation", ValueError, "orthog",
     lambda e: solve(e.A, e.b, "gmres", orthog="householder")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
