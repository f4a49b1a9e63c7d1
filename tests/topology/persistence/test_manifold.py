"""The manifold check of persistence (check_manifold): pinched complexes are
a ValueError naming the pinched vertex or edge, before any work and the same
at every rank count, while critical points do not need a manifold."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import assert_equal_collective, assert_raises_collective
from topology import SimplicialComplex, critical_points, persistence_diagram
from topology_cases import my_share, octahedron
from topology_reference import reference_critical

COMM = MPI.COMM_WORLD


def _torus(nx=5, ny=4):
    cells = []
    for y in range(ny):
        for x in range(nx):
            a, b = x + y * nx, (x + 1) % nx + y * nx
            c, d = x + ((y + 1) % ny) * nx, (x + 1) % nx + ((y + 1) % ny) * nx
            cells += [[a, b, c], [b, c, d]]
    return np.array(cells, dtype=np.int64)


PINCHED = {
    # two spheres sharing vertex 0: refused before the computation, not after it
    "two-spheres": (np.concatenate([octahedron(), octahedron(shift=5)]),
                    r"vertex 0 is pinched \(its link is not connected\)"),
    # two triangles sharing vertex 3 only
    "bowtie": (np.array([[0, 1, 3], [2, 3, 4]]), r"vertex 3 is pinched"),
    "tets-at-a-vertex": (np.array([[0, 1, 2, 3], [3, 4, 5, 6]]), r"vertex 3 is pinched"),
    "tets-at-an-edge": (np.array([[0, 1, 2, 3], [0, 1, 4, 5]]),
                        r"edge \(0, 1\) is pinched"),
    # a cone over a torus: the apex's link is a connected closed surface, not a sphere
    "cone-over-a-torus": (np.column_stack((np.full(40, 20), _torus())),
                          r"the link of vertex 20 is neither a sphere nor a disk"),
}


@pytest.mark.parametrize("name", sorted(PINCHED))
@pytest.mark.parametrize("partition", ["block", "metis"])
def test_pinched_complex_is_a_value_error(name, partition):
    """Persistence of a pinched complex is a ValueError naming where it is
    pinched, on every rank; its critical points are the reference's."""
    cells, match = PINCHED[name]
    cx = SimplicialComplex([my_share(cells)], COMM, partition=partition)
    f = np.random.default_rng(0).random(cx.num_vertices)
    assert_raises_collective(COMM, ValueError, persistence_diagram, cx, f,
                             match="not a manifold: " + match)
    # critical points do not need a manifold
    got = critical_points(cx, f).gather()
    assert_equal_collective(got[1], reference_critical(cells, f, cx.num_vertices)[1])
