"""Our preconditioners inside PETSc's KSP as a PC of type python, and the
layout check of that PC."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla
from mpi4py import MPI

petsc4py = pytest.importorskip("petsc4py", reason="petsc4py not installed: run `make petsc`")

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import petsc as dp
from dmsolve.krylov import solve
from mpitest import assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


@pytest.fixture(scope="module")
def PETSc():
    from petsc4py import PETSc      # here: the optional extra, imported once it is known present
    return PETSc


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
    """Our preconditioners inside PETSc's KSP give the iteration counts of our own methods."""
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
    """The python PC refuses a vector of the wrong layout."""
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
