"""The global vertex order (global_order): the rank of every vertex in the
lexicographic order of (value, id), through both distributed sorts, with
ties, permuted ids and unbalanced values."""

import numpy as np
import pytest
from mpi4py import MPI

import topology
from bad_inputs import check_bad_input
from dmsolve import DistVector
from mpitest import assert_equal_collective
from topology import Grid, global_order
from topology_cases import GRID_SHAPES, random_field

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("shape", list(GRID_SHAPES.values()), ids=list(GRID_SHAPES))
def test_global_order_matches_lexsort(shape):
    """The order of a field with ties is numpy's lexsort of (value, id)."""
    g = Grid(shape, COMM)
    fld = random_field(shape, seed=3, levels=3)
    order = global_order(g.vertex_values(fld)).gather()
    ref = np.empty(fld.size, dtype=np.int64)
    ref[np.lexsort((np.arange(fld.size), fld))] = np.arange(fld.size)
    assert_equal_collective(order, ref)


@pytest.mark.parametrize("max_ranks", [0, 8], ids=["psort", "psrs"])
def test_global_order_both_sorts_with_ids_match_lexsort(monkeypatch, max_ranks):
    """Both distributed sorts give the lexsort order, with permuted ids
    breaking the ties, with all values equal and with values descending."""
    # PSRS_MAX_RANKS = 0 sends every communicator through rank_of (the path of
    # more than 8 ranks); permuted ids break the ties, as a METIS complex's do
    import topology.morse._order as order_mod
    monkeypatch.setattr(order_mod, "PSRS_MAX_RANKS", max_ranks)
    g = Grid((6, 5, 4), COMM)
    n = 120
    fld = random_field((6, 5, 4), seed=11, levels=3)
    ids = np.random.default_rng(5).permutation(n)
    vec = g.vertex_values(fld)
    lay = vec.layout
    got = global_order(vec, ids=ids[lay.start:lay.stop]).gather()
    ref = np.empty(n, dtype=np.int64)
    ref[np.lexsort((ids, fld))] = np.arange(n)
    assert_equal_collective(got, ref)
    for f in (np.zeros(n), np.arange(n, 0, -1, dtype=float)):
        got = global_order(g.vertex_values(f)).gather()
        ref = np.empty(n, dtype=np.int64)
        ref[np.lexsort((np.arange(n), f))] = np.arange(n)
        assert_equal_collective(got, ref)


def test_global_order_all_ties_and_unbalanced():
    """All values equal, descending values, and two values of very unequal
    counts are ordered as lexsort orders them."""
    g = Grid((4, 3, 9), COMM)
    n = 4 * 3 * 9
    for fld in (np.zeros(n), np.arange(n, 0, -1, dtype=float),
                np.where(np.arange(n) < 5, -1.0, 7.0)):
        got = global_order(g.vertex_values(fld)).gather()
        ref = np.empty(n, dtype=np.int64)
        ref[np.lexsort((np.arange(n), fld))] = np.arange(n)
        assert_equal_collective(got, ref)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("global-order-of-a-numpy-array", TypeError, "DistVector",
     lambda e: topology.global_order(np.ones(16))),
    ("global-order-oversample-zero", ValueError, "oversample",
     lambda e: topology.global_order(e.grid.vertex_values(np.ones(16)), oversample=0)),
    ("global-order-ids-wrong-length-on-last-rank", ValueError, "ids",
     lambda e: topology.global_order(e.grid.vertex_values(np.ones(16)), ids=np.arange(
         e.grid.local_num_vertices + (e.rank == e.size - 1)))),
    ("global-order-nan-values", ValueError, "finite",
     lambda e: topology.global_order(DistVector(e.grid.vertex_layout, np.full(
         e.grid.local_num_vertices, np.nan)))),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
