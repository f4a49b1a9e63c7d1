"""Monitors of a Krylov solve: PETSc-style lines printed on rank 0 only,
``monitor=k`` every k iterations and the last, and a library that prints
nothing unless asked."""

import io
import re

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
from dmsolve import KSPMonitor, gallery
from krylov_cases import METHODS, distribute
from mpitest import Checks, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def test_monitor_prints_petsc_lines_on_rank_zero():
    """KSPMonitor prints PETSc-style residual lines on rank 0 only."""
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
    """A solve prints nothing unless asked."""
    A, b = distribute("poisson2d")
    for method in METHODS:
        getattr(dmsolve, method)(A, b, maxiter=5)
    captured = capsys.readouterr()
    assert_collective(COMM, captured.out == "" and captured.err == "")


def small_poisson(n=12):
    A = gallery.poisson2d(n, COMM)
    return A, gallery.rhs(A, "random")


# -- monitor=k ------------------------------------------------------------------------------

def _printed(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"^\s*(\d+) KSP Residual norm", text, re.M)]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1, 3, 7])
def test_monitor_every_k_iterations(method, k):
    """A monitor every k iterations prints every k-th norm and the last."""
    A, b = small_poisson()
    out = io.StringIO()
    mon = KSPMonitor(stream=out, every=k, record=True)
    _, info = getattr(dmsolve, method)(A, b, rtol=1e-8, monitor=mon)
    called = [it for it, _ in mon.history]
    expected = [it for it in called if it % k == 0]
    if called[-1] % k:
        expected.append(called[-1])            # the last one, always
    with Checks(COMM) as checks:
        checks.add(info.converged and called[-1] >= info.iterations - 1 and called[0] == 0,
                   "solved and monitored", (info.reason, called))
        if COMM.rank == 0:
            checks.add(_printed(out.getvalue()) == expected, "printed iterations",
                       (_printed(out.getvalue()), expected))
            checks.add(out.getvalue().rstrip().endswith("iterations %d" % info.iterations),
                       "the reason comes last")
        else:
            checks.add(out.getvalue() == "", "only rank 0 prints")


def test_monitor_int_in_a_solve(capsys):
    """monitor=k in dmsolve.solve prints every k-th norm."""
    A, b = small_poisson()
    _, info = dmsolve.solve(A, b, "cg", rtol=1e-8, monitor=4)
    printed = _printed(capsys.readouterr().out)
    expected = sorted(set(range(0, info.iterations + 1, 4)) | {info.iterations})
    assert_collective(COMM, printed == (expected if COMM.rank == 0 else []),
                      "%s vs %s" % (printed, expected))
    _, info = dmsolve.cg(A, b, rtol=1e-8, monitor=np.int64(1))
    assert_collective(COMM, len(_printed(capsys.readouterr().out))
                      == (info.iterations + 1 if COMM.rank == 0 else 0))
    _, info = dmsolve.cg(A, b, rtol=1e-8, monitor=True)      # True is every iteration
    assert_collective(COMM, len(_printed(capsys.readouterr().out))
                      == (info.iterations + 1 if COMM.rank == 0 else 0))


def test_monitor_count_is_validated():
    """A bad monitor count is refused on every rank."""
    A, b = small_poisson()
    for bad, cls, match in [(0, ValueError, "monitor must be a positive integer, got 0"),
                            (-2, ValueError, "monitor must be a positive integer"),
                            (2.5, TypeError, "an int k >= 1")]:
        assert_raises_collective(COMM, cls, dmsolve.cg, A, b, monitor=bad, match=match)
    for bad, cls in [(0, ValueError), (True, TypeError), (1.0, TypeError), (None, TypeError)]:
        assert_raises_collective(COMM, cls, KSPMonitor, every=bad, match="every must be")
