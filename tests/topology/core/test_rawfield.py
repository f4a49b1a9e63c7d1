"""RawField: a field read from a raw file, by an in-memory grid and by the
analyses of an out-of-core grid, which refuse a file that is too short or
missing on every rank."""

import os

import numpy as np
from mpi4py import MPI

import topology as tp
from mpitest import assert_raises_collective
from topology_cases import raw_field

comm = MPI.COMM_WORLD


def test_raw_field_in_memory_grid(tmp_path):
    """An in-memory grid reads a RawField into the values of its vertices."""
    raw, f = raw_field(tmp_path, (6, 5, 7), 4, False)
    g = tp.Grid((6, 5, 7), comm)
    assert np.array_equal(g.vertex_values(raw).gather(), f.ravel())


def test_analyses_refuse_a_raw_field_they_cannot_read(tmp_path):
    """Critical points, diagrams, merge trees and components of an
    out-of-core grid refuse a raw file too short for the grid or missing, on
    every rank, and leave no spill directory behind."""
    raw, _ = raw_field(tmp_path, (6, 5, 7), 5, False)
    g = tp.Grid((6, 5, 7), comm, virtual=1)
    short = tp.RawField(raw.path, (6, 5, 8))
    assert_raises_collective(comm, ValueError, tp.critical_points, tp.Grid((6, 5, 8), comm,
                                                                   virtual=1), short)
    missing = tp.RawField(raw.path + ".nope", (6, 5, 7))
    assert_raises_collective(comm, ValueError, tp.persistence_diagram, g, missing)
    # the out-of-core merge trees and components check their field at the door too
    assert_raises_collective(comm, ValueError, tp.merge_tree, g, missing)
    assert_raises_collective(comm, ValueError, tp.connected_components, g, missing, 0.5)
    assert_raises_collective(comm, ValueError, tp.merge_tree, tp.Grid((6, 5, 8), comm,
                                                                     virtual=1), short)
    left = [n for n in os.listdir(os.path.dirname(raw.path)) if n.startswith("dmsolve-bsp")]
    assert left == []
