"""The default amg against PyAMG's smoothed aggregation on PyAMG's gallery.

Each problem is solved by CG to ``rtol=1e-8`` from the same right-hand side
with PyAMG's ``smoothed_aggregation_solver`` (default options, serial, on
rank 0) and with dmsolve's default ``amg`` at the suite's rank count; ours
may take at most 3 iterations more. The problems: Poisson in 2D and 3D,
grid-aligned and rotated anisotropic diffusion (bilinear finite elements
and finite differences, ``epsilon = 0.001``), the symmetric positive
definite finite-element examples PyAMG ships, and 2D linear elasticity with
its rigid-body modes (``block_size=2``: PyAMG sees a BSR matrix of 2 x 2
blocks).
"""

import numpy as np
import pyamg
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import preconditioners
from dmsolve import DistCSR, DistVector
from dmsolve.krylov import cg
from mpitest import assert_collective, on_rank0

gallery = pyamg.gallery

COMM = MPI.COMM_WORLD
RTOL = 1e-8
#: ours may take this many iterations more than PyAMG
SLACK = 3


def _stencil(epsilon, theta, kind, n):
    S = gallery.diffusion_stencil_2d(epsilon=epsilon, theta=theta, type=kind)
    return gallery.stencil_grid(S, (n, n), format="csr")


def _example(name):
    """A finite-element example of PyAMG's gallery: the matrix (symmetrised:
    some are symmetric only to rounding) and its candidates when there are
    several."""
    ex = gallery.load_example(name)
    A = sp.csr_matrix(ex["A"]).astype(np.float64)
    B = np.asarray(ex["B"], dtype=np.float64)
    return 0.5 * (A + A.T), (B if B.shape[1] > 1 else None)


def _elasticity(n):
    A, B = gallery.linear_elasticity((n, n), format="bsr")
    return A, B


#: name -> (PyAMG's matrix and candidates, amg's options beyond the defaults).
#: The examples 'helmholtz_2D' (complex), 'recirc_flow' (nonsymmetric) and
#: 'unit_square' (singular) are not symmetric positive definite.
PROBLEMS = {
    "poisson2d-100": (lambda: (gallery.poisson((100, 100), format="csr"), None), {}),
    "poisson3d-20": (lambda: (gallery.poisson((20, 20, 20), format="csr"), None), {}),
    "anisotropic-fe-0-100": (lambda: (_stencil(1e-3, 0.0, "FE", 100), None), {}),
    "anisotropic-fd-0-100": (lambda: (_stencil(1e-3, 0.0, "FD", 100), None), {}),
    "anisotropic-fe-pi8-100": (lambda: (_stencil(1e-3, np.pi / 8, "FE", 100), None), {}),
    "anisotropic-fd-pi8-100": (lambda: (_stencil(1e-3, np.pi / 8, "FD", 100), None), {}),
    "anisotropic-fe-pi4-100": (lambda: (_stencil(1e-3, np.pi / 4, "FE", 100), None), {}),
    "airfoil": (lambda: _example("airfoil"), {}),
    "bar": (lambda: _example("bar"), {"block_size": 3}),
    "knot": (lambda: _example("knot"), {}),
    "local-disc-galerkin-diffusion": (lambda: _example("local_disc_galerkin_diffusion"), {}),
    "unit-cube": (lambda: _example("unit_cube"), {}),
    "elasticity2d-60": (lambda: _elasticity(60), {"block_size": 2}),
}


def pyamg_iterations(A, B, b) -> int:
    """CG + PyAMG's default smoothed aggregation to ``RTOL``. Not collective."""
    np.random.seed(0)       # PyAMG's spectral estimates start from random vectors
    ml = pyamg.smoothed_aggregation_solver(A, B=B)
    residuals = []
    ml.solve(b, tol=RTOL, accel="cg", residuals=residuals, maxiter=500)
    assert residuals[-1] <= RTOL * np.linalg.norm(b)
    return len(residuals) - 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_default_amg_within_three_iterations_of_pyamg(name):
    """CG + the default amg takes at most PyAMG's iterations + 3."""
    build, options = PROBLEMS[name]
    A, B = build()
    b = np.random.default_rng(7).standard_normal(A.shape[0])
    reference = on_rank0(COMM, pyamg_iterations, A, B, b)
    Ad = DistCSR.from_global(sp.csr_matrix(A), COMM)
    lay = Ad.row_layout
    Bl = None if B is None else np.ascontiguousarray(B[lay.start:lay.stop])
    M = preconditioners.make("amg", Ad, B=Bl, **options)
    x, info = cg(Ad, DistVector.from_global(b, lay), rtol=RTOL, M=M, maxiter=500)
    assert_collective(COMM, info.converged and info.iterations <= reference + SLACK,
                      "%s at %d ranks: %d iterations (%s), PyAMG %d"
                      % (name, COMM.size, info.iterations, info.reason, reference))
