"""What dmsolve takes from scipy, numpy and mpi4py: scipy sparse and numpy
inputs to ``dmsolve.solve`` (global matrices, x0 and null spaces, linear
operators, mixed inputs), MPI datatypes of numpy buffers, and a clear error at
import when scipy lacks the kernels dmsolve uses."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
from bad_inputs import check_bad_input
from dmsolve import DistCSR, DistVector, solve
from krylov_cases import RTOL, complex_rhs, hermitian
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_raises_collective, child_python)


def test_solve_takes_scipy_complex_inputs(comm):
    """dmsolve.solve takes a global complex scipy matrix and a numpy b, and returns spsolve's
    answer."""
    # the scipy way: the same global matrix and numpy b on every rank
    Ag = hermitian(10)
    b = complex_rhs(Ag.shape[0], seed=2)
    x, info = dmsolve.solve(Ag, b, "cg", "jacobi", rtol=RTOL, comm=comm)
    ref = spla.spsolve(sp.csc_matrix(Ag), b)
    assert_allclose_collective(x, ref, comm, rtol=1e-6)
    assert_collective(comm, info.converged)
    # and a complex scipy LinearOperator
    op = spla.aslinearoperator(Ag)
    assert_collective(comm, op.dtype.kind == "c")
    x, info = dmsolve.solve(op, b, "gmres", rtol=RTOL, comm=comm)
    assert_allclose_collective(x, ref, comm, rtol=1e-6)


# -- scipy and numpy input to solve() ----------------------------------------------------

def _system(n=101):
    """A nonsymmetric, diagonally dominant tridiagonal system, the same on every rank."""
    A = sp.diags([-1.3, 3.0, -0.7], [-1, 0, 1], shape=(n, n), format="csr")
    b = np.sin(np.arange(n) + 1.0)
    return A, b, spla.spsolve(A.tocsc(), b)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("form", ["csr", "coo", "dense", "linear-operator"])
def test_solve_takes_scipy_and_numpy_inputs(comm, form):
    """dmsolve.solve takes global scipy, numpy and LinearOperator inputs and returns scipy's
    answer."""
    A, b, ref = _system()
    given = {"csr": A, "coo": A.tocoo(), "dense": A.toarray(),
             "linear-operator": spla.aslinearoperator(A)}[form]
    b_before = b.copy()
    x, info = dmsolve.solve(given, b, method="gmres", rtol=1e-12, restart=50)
    with Checks(comm) as checks:
        checks.add(isinstance(x, np.ndarray) and x.shape == b.shape,
                   "x is a numpy array shaped like b, on every rank", type(x).__name__)
        checks.add(info.converged, "converged", info.reason)
        checks.add(np.array_equal(b, b_before), "b not modified")
    assert_allclose_collective(x, ref, comm, rtol=1e-9, err_msg=form)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("form", ["sparse", "linear-operator", "callable"])
def test_solve_takes_scipy_preconditioners(comm, form):
    """solve() takes a scipy matrix, LinearOperator or a callable on numpy vectors as pc,
    as the methods take M: the iterations of the same Jacobi as a DistCSR."""
    A, b, ref = _system()
    D = sp.diags(1.0 / A.diagonal(), format="csr")
    pc = {"sparse": D, "linear-operator": spla.aslinearoperator(D),
          "callable": lambda r: D @ r}[form]
    x, info = dmsolve.solve(A, b, "gmres", pc=pc, rtol=1e-12)
    Ad = DistCSR.from_global(A, comm)
    _, expected = dmsolve.solve(Ad, DistVector.from_global(b, Ad.row_layout), "gmres",
                                pc=DistCSR.from_global(D, comm), rtol=1e-12)
    assert_collective(comm, info.converged and info.iterations == expected.iterations,
                      "%s against %s" % (info, expected))
    assert_allclose_collective(x, ref, comm, rtol=1e-9)


@pytest.mark.timeout(600)
def test_solve_numpy_x0_and_nullspace_with_a_global_matrix(comm):
    """A global matrix takes a numpy x0 and a numpy null space."""
    # a singular consistent system: the 1D Neumann Laplacian, constant null space
    n = 37
    L = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="lil")
    L[0, 0] = L[n - 1, n - 1] = 1.0
    L = L.tocsr()
    b = np.cos(np.arange(n) * 0.3)
    b -= b.mean()
    x0 = np.full(n, 0.5)
    x0_before = x0.copy()
    x, info = dmsolve.solve(L, b, method="cg", rtol=1e-12, x0=x0, nullspace=np.ones(n))
    with Checks(comm) as checks:
        checks.add(isinstance(x, np.ndarray), "x is a numpy array", type(x).__name__)
        checks.add(info.converged, "converged", info.reason)
        checks.add(np.array_equal(x0, x0_before), "x0 not modified")
        checks.add(np.linalg.norm(L @ x - b) <= 1e-10 * np.linalg.norm(b),
                   "L x = b", np.linalg.norm(L @ x - b))


@pytest.mark.timeout(600)
def test_linear_operator_failing_on_one_rank_raises_on_every_rank(comm):
    """A scipy LinearOperator failing on one rank raises on every rank."""
    A, b, _ = _system(40)
    calls = [0]

    def matvec(v):
        calls[0] += 1
        if comm.rank == comm.size - 1 and calls[0] == 3:
            raise ValueError("the operator gave up")
        return A @ v

    op = spla.LinearOperator(A.shape, matvec=matvec, dtype=float)
    assert_raises_collective(comm, ValueError, dmsolve.solve, op, b, method="gmres",
                             match="the operator gave up")


@pytest.mark.timeout(600)
def test_mixed_inputs_name_the_one_line_conversion(comm):
    """Mixed global and distributed inputs are refused with the one-line conversion to use."""
    A, b, _ = _system(23)
    dA = DistCSR.from_global(A, comm)
    assert_raises_collective(comm, TypeError, dmsolve.solve, dA, b,
                             match=r"DistVector\.from_global\(b, A\.row_layout\)")
    assert_raises_collective(comm, TypeError, dmsolve.solve, dA, dA.create_vectors()[1],
                             x0=np.zeros(23),
                             match=r"DistVector\.from_global\(x0, A\.row_layout\)")
    db = DistVector.from_global(b, dA.row_layout)
    assert_raises_collective(comm, TypeError, dmsolve.solve, A, db,
                             match=r"DistCSR\.from_global\(A, b\.comm\).*b\.gather\(\)")


@pytest.mark.timeout(600)
@pytest.mark.mpi(min_size=2)
def test_ranks_passing_different_kinds_of_input_are_refused_everywhere(comm):
    """Ranks passing different kinds of input are refused on every rank."""
    A, b, _ = _system(23)
    dA = DistCSR.from_global(A, comm)
    db = DistVector.from_global(b, dA.row_layout)       # collective: on every rank
    mine = b if comm.rank == 0 else db
    assert_raises_collective(comm, ValueError, dmsolve.solve, A, mine,
                             match="different kinds of input")


def test_scipy_without_sparsetools_fails_at_import_with_a_clear_message(comm):
    """Without scipy's sparsetools, import dmsolve fails with a message naming them and scipy's
    version."""
    code = (
        "import sys\n"
        "sys.modules['scipy.sparse._sparsetools'] = None   # a scipy without it\n"
        "import scipy\n"
        "try:\n"
        "    import dmsolve\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
        "    print('version', scipy.__version__)\n"
        "else:\n"
        "    print('imported')\n"
    )
    code_, out = child_python(comm, code)
    lines = out.splitlines()
    version = lines[-1].split()[-1] if lines else "?"
    ok = (code_ == 0 and "ImportError:" in out and "scipy.sparse._sparsetools" in out
          and "csr_matvec" in out and "scipy %s" % version in out)
    assert_collective(comm, ok, out)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.int32, np.int64,
                                   np.bool_, ">f8"], ids=str)
def test_mpi_datatype_matches_the_buffer(comm, dtype):
    """mpi_datatype gives an MPI datatype of the buffer's item size, cached."""
    from dmsolve._interop import mpi_datatype
    t = mpi_datatype(dtype)
    assert_collective(comm, t.Get_size() == np.dtype(dtype).itemsize,
                      "%s: %d bytes" % (dtype, t.Get_size()))
    assert_collective(comm, mpi_datatype(dtype) is t, "not cached")
    assert_collective(comm, t != MPI.DATATYPE_NULL)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    # a global A with a distributed b: the message names the one-line conversion
    ("solve-scipy-matrix", TypeError, r"global matrix but b is a DistVector; give A as "
     r"DistCSR.from_global", lambda e: solve(sp.eye(e.n, format="csr"), e.b)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
