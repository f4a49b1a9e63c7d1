"""Spectra of Hodge Laplacians (hodge_eigenpairs) against numpy.linalg.eigh of
the dense serial Laplacians, and the harmonic dimension against the Betti
numbers.
Every reference is built from ``cx.simplices(1)`` and ``cx.simplices(2)``
alone (tests/topology_reference.py), not from the library's own assembly,
under the block and the METIS vertex partitions."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import Checks, assert_raises_collective
from topology import Grid, betti_numbers, hodge_eigenpairs
from topology_cases import open_surface
from topology_reference import serial_boundaries, serial_parts

COMM = MPI.COMM_WORLD
PARTITIONS = ["block", "metis"]


# -- spectra ----------------------------------------------------------------------------------
@pytest.mark.parametrize("partition", PARTITIONS)
def test_hodge_eigenpairs_equal_eigvalsh_and_betti(partition):
    """The smallest and largest eigenpairs of L1, of its up part and of L0
    are eigvalsh's, orthonormal with the reported residuals, and the
    harmonic dimension is the Betti number."""
    cx, opened = open_surface(partition)
    Ld, Lu = serial_parts(cx)
    L1 = Ld + Lu
    lam = np.linalg.eigvalsh(L1)
    beta = betti_numbers(cx)
    nev = beta[1] + 3
    with Checks(COMM) as checks:
        for which, want in [("smallest", lam[:nev]), ("largest", lam[::-1][:3])]:
            ep = hodge_eigenpairs(cx, 1, nev if which == "smallest" else 3, which=which,
                                  tol=1e-9)
            checks.add(ep.converged, "%s converged" % which)
            checks.add(np.allclose(ep.eigenvalues, want, rtol=1e-8, atol=1e-8),
                       "%s eigenvalues" % which, (ep.eigenvalues, want))
            V = np.column_stack([cx.gather_global(v, 1) for v in ep.eigenvectors])
            checks.add(np.allclose(V.T @ V, np.eye(V.shape[1]), atol=1e-10), "orthonormal")
            res = np.linalg.norm(L1 @ V - V * ep.eigenvalues, axis=0)
            checks.add(np.all(res <= 1e-8 * lam[-1]), "%s residuals" % which, res)
            checks.add(np.allclose(res, ep.residual_norms, rtol=1e-3, atol=1e-12),
                       "reported residuals")
        ep = hodge_eigenpairs(cx, 1, nev, tol=1e-9)
        checks.add(ep.harmonic_dimension == beta[1] == len(opened), "harmonic dimension",
                   (ep.harmonic_dimension, beta))
        # the up part's smallest nonzero frequencies, and L_0 (beta_0 = 1)
        up = hodge_eigenpairs(cx, 1, 2, which="largest", part="up", tol=1e-9)
        checks.add(np.allclose(up.eigenvalues, np.linalg.eigvalsh(Lu)[::-1][:2], rtol=1e-8),
                   "up part", up.eigenvalues)
        B1 = serial_boundaries(cx)[0]
        e0 = hodge_eigenpairs(cx, 0, 3, tol=1e-9)
        checks.add(np.allclose(e0.eigenvalues, np.linalg.eigvalsh(B1 @ B1.T)[:3],
                               rtol=1e-8, atol=1e-8), "L_0", e0.eigenvalues)
        checks.add(e0.harmonic_dimension == beta[0] == 1, "beta_0")


def test_bad_eigenpair_inputs_are_errors_on_every_rank():
    """No eigenpairs asked for, an unknown ``which`` and a grid in place of a
    complex raise on every rank."""
    cx, _ = open_surface("block")
    cases = [
        (ValueError, "nev", hodge_eigenpairs, (cx, 1, 0), {}),
        (ValueError, "which", hodge_eigenpairs, (cx, 1, 2), {"which": "middle"}),
    ]
    for exc, match, func, args, kwargs in cases:
        assert_raises_collective(COMM, exc, func, *args, match=match, **kwargs)
    grid = Grid((4, 4), COMM)
    assert_raises_collective(COMM, TypeError, hodge_eigenpairs, grid, 1, 2, match="to_complex")
