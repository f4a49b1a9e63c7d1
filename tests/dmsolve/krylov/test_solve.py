"""``dmsolve.solve``: Krylov methods, preconditioners and backends looked up by
name in their registries."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
import preconditioners
from bad_inputs import check_bad_input
from dmsolve import solve
from dmsolve.krylov import BACKENDS, available_methods
from krylov_cases import METHODS, distribute
from mpitest import assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def test_backends_registry():
    """The backends registry names dmsolve and petsc, looks names up by the registry's rule, and
    refuses unknown or non-string names."""
    A, b = distribute("poisson2d")
    assert_collective(COMM, BACKENDS.names() == ["dmsolve", "petsc"], str(BACKENDS))
    # one rule for names, one error wording (the Registry's)
    _, info = dmsolve.solve(A, b, "cg", rtol=1e-8, backend="DMSolve")
    assert_collective(COMM, info.converged and "backend" not in info.extra)
    assert_raises_collective(COMM, ValueError, dmsolve.solve, A, b, backend="trilinos",
                             match=r"^unknown backend 'trilinos'; available: dmsolve, petsc$")
    assert_raises_collective(COMM, TypeError, dmsolve.solve, A, b, backend=None,
                             match="backend name must be a string")


def test_solve_registry_and_pc_resolution():
    """dmsolve.solve looks methods and preconditioners up by name (and descriptor) and gives
    the same answer as the method called directly."""
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


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("solve-unknown-method", ValueError, "unknown Krylov method",
     lambda e: solve(e.A, e.b, "nope")),
    ("solve-unknown-pc", ValueError, "unknown preconditioner",
     lambda e: solve(e.A, e.b, pc="nope")),
    ("solve-pc-options-not-a-dict", TypeError, "dict", lambda e: solve(e.A, e.b, pc=("jacobi", 3))),
    ("solve-pc-unknown-option", TypeError, "omegaa",
     lambda e: solve(e.A, e.b, pc=("jacobi", {"omegaa": 1.0}))),
    ("solve-unknown-keyword", TypeError, "frobnicate", lambda e: solve(e.A, e.b, frobnicate=1)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


@pytest.mark.parametrize("threads", [2, 4])
def test_threads_solve_as_one_thread_does(comm, threads):
    """solve(threads=k) runs set-up and iterations on k threads: the same
    iterations as one thread, and the default comes back afterwards."""
    A = dmsolve.gallery.poisson3d(24, comm)
    b = dmsolve.gallery.rhs(A, "random")
    x1, info1 = dmsolve.solve(A, b, "cg", pc="amg", rtol=1e-8, threads=1)
    xk, infok = dmsolve.solve(A, b, "cg", pc="amg", rtol=1e-8, threads=threads)
    ok = (dmsolve.get_num_threads() == 1 and infok.converged
          and infok.iterations == info1.iterations
          and np.allclose(xk.gather(), x1.gather(), rtol=1e-10, atol=1e-12))
    assert_collective(comm, ok, "threads=%d: %d iterations against %d"
                      % (threads, infok.iterations, info1.iterations))


@pytest.mark.mpi(min_size=2)
def test_threads_refused_on_one_rank_is_refused_on_every_rank(comm):
    A = dmsolve.gallery.poisson2d(10, comm)
    b = dmsolve.gallery.rhs(A, "ones")
    assert_raises_collective(comm, ValueError, dmsolve.solve, A, b, "cg",
                             match="positive integer", threads=0 if comm.rank == 1 else 2)
    x, info = dmsolve.solve(A, b, "cg", threads=2)      # the communicator is still usable
    assert_collective(comm, info.converged, "solve after the refusal")
