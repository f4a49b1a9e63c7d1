"""Connected components of an out-of-core grid (ooc_components), glued up a
tree of slabs: the labels of the in-memory grid, written to a raw file on
request."""

import os

import numpy as np
import pytest
from mpi4py import MPI

import topology as tp
from mpitest import assert_raises_collective
from topology_cases import raw_field, virtual_slabs

comm = MPI.COMM_WORLD


@pytest.mark.parametrize("shape,v,threshold,sublevel", [((9, 8, 16), "planes", 0.3, True),
                                                        ((12, 11, 13), 2, 0.55, False),
                                                        ((40, 33), 3, 0.5, True),
                                                        ((7, 9), 1, 0.4, False)])
def test_components_as_in_memory(tmp_path, shape, v, threshold, sublevel):
    """Components of sublevel and superlevel sets glued across slabs are the
    in-memory ones, also when written to a raw file of labels."""
    v = virtual_slabs(shape, v)
    raw, f = raw_field(tmp_path, shape, 6, False)
    g = tp.Grid(shape, comm)
    go = tp.Grid(shape, comm, virtual=v)
    ref = tp.connected_components(g, f, threshold, sublevel=sublevel)
    got = tp.connected_components(go, raw, threshold, sublevel=sublevel)
    labels = ref.gather()
    assert np.array_equal(got.gather(), labels)         # the same on every rank
    assert np.unique(labels[labels >= 0]).size > 2      # several components to glue
    out = os.path.join(os.path.dirname(raw.path), "labels.raw")
    written = tp.connected_components(go, raw, threshold, sublevel=sublevel, out=out)
    assert written.dtype == np.int64 and written.shape == shape
    assert np.array_equal(np.fromfile(out, dtype=np.int64), labels)
    assert np.array_equal(tp.connected_components(go).gather(),
                          tp.connected_components(g).gather())


def test_components_out_needs_out_of_core(tmp_path):
    """Writing labels to a file needs an out-of-core grid and a directory
    that exists; both are checked on every rank."""
    raw, f = raw_field(tmp_path, (6, 5, 7), 7, False)
    g = tp.Grid((6, 5, 7), comm)
    assert_raises_collective(comm, ValueError, tp.connected_components, g, f, 0.5,
                             out=os.path.join(os.path.dirname(raw.path), "x.raw"))
    go = tp.Grid((6, 5, 7), comm, virtual=1)
    assert_raises_collective(comm, ValueError, tp.connected_components, go, raw, 0.5,
                             out=os.path.join(raw.path + ".nodir", "x.raw"))
