"""The star tables of the discrete gradient: owned vertices named by layout
index (for messages) and by global id (for results)."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import assert_equal_collective
from topology import SimplicialComplex, discrete_gradient
from topology.core import owned_global_ids
from topology_cases import HOLED_GRID_MESHES

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("part", ["block", "rcb"])
def test_star_tables_name_vertices_by_layout_index_and_global_id(part):
    """``Stars.layout_index`` holds the owned vertices' layout indices (what
    messages between ranks use) and ``Stars.global_id`` their global ids
    (what results report), which differ under RCB."""
    tops, pts = HOLED_GRID_MESHES["tet"]()
    cx = SimplicialComplex(tops[COMM.rank::COMM.size], COMM, pts, partition=part)
    S = discrete_gradient(cx, np.arange(pts.shape[0], dtype=np.float64)).stars
    lay = cx.vertex_layout
    own = np.arange(lay.start, lay.stop)
    ids = owned_global_ids(cx)          # None: the global ids are the layout indices
    assert_equal_collective(S.layout_index[S.P], own)
    assert_equal_collective(S.global_id[S.P], own if ids is None else ids)
