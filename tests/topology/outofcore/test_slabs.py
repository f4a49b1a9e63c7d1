"""The analyses of an out-of-core grid that run slab by slab (critical points
and the D0 / D(d-1) / D1 pairs of ooc_critical_points and ooc_diagram): the
same answers as the in-memory grid, ties included, for several numbers of
slabs per rank."""

import numpy as np
import pytest
from mpi4py import MPI

import topology as tp
from topology_cases import raw_field, virtual_slabs

comm = MPI.COMM_WORLD


@pytest.mark.parametrize("shape,v,ties", [((12, 11, 13), 1, True), ((12, 11, 13), 2, True),
                                          ((9, 8, 16), 4, False), ((30, 20), 3, True),
                                          ((7, 9), 1, False), ((9, 8, 16), "planes", False),
                                          ((30, 20), "planes", True)])
def test_same_answers_as_in_memory(tmp_path, shape, v, ties):
    """Critical points and every raw pair of the diagram, read slab by slab
    from a raw file, are those of the in-memory grid, for several slab counts."""
    v = virtual_slabs(shape, v)
    raw, f = raw_field(tmp_path, shape, 3, ties)
    g = tp.Grid(shape, comm)
    go = tp.Grid(shape, comm, virtual=v)
    assert go.out_of_core and len(go.virtual_slabs) == v
    c1 = tp.critical_points(g, f).gather()
    c2 = tp.critical_points(go, raw).gather()
    assert np.array_equal(c1[0], c2[0]) and np.array_equal(c1[1], c2[1])
    assert tp.critical_points(g, f).counts() == tp.critical_points(go, raw).counts()
    d1 = tp.persistence_diagram(g, f).gather()
    d2 = tp.persistence_diagram(go, raw).gather()
    assert d2.missing == []
    for k in d1.raw_pairs:
        assert np.array_equal(d1.raw_pairs[k], d2.raw_pairs[k]), k
    assert d1.report == d2.report and d1.report[0]["pairs"] > 0
