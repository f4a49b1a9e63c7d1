"""Merge trees of an out-of-core grid (ooc_merge_tree): join and split trees
built slab by slab equal the in-memory trees, merges at the interface planes
included."""

import numpy as np
import pytest
from mpi4py import MPI

import topology as tp
from topology_cases import raw_field, trees_equal, virtual_slabs

comm = MPI.COMM_WORLD


@pytest.mark.parametrize("shape,v,ties", [((9, 8, 16), "planes", False), ((12, 11, 13), 2, True),
                                          ((40, 33), 3, True), ((7, 9), 1, False)])
@pytest.mark.parametrize("kind", ["join", "split"])
def test_merge_trees_as_in_memory(tmp_path, shape, v, ties, kind):
    """Join and split trees of a raw field, slab by slab, are the in-memory trees."""
    v = virtual_slabs(shape, v)
    raw, f = raw_field(tmp_path, shape, 8, ties)
    ref = tp.merge_tree(tp.Grid(shape, comm), f, kind).gather()
    got = tp.merge_tree(tp.Grid(shape, comm, virtual=v), raw, kind)
    assert got.counts == ref.counts and ref.counts["saddles"] > 5
    assert trees_equal(ref, got.gather())


def test_merge_trees_many_fields():
    """Small random fields, many cuts: every merge at an interface plane
    (where the two sides' branches meet) lands where it does in memory, and
    the diagrams' raw pairs are the in-memory ones."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        shape = tuple(int(x) for x in rng.integers(3, 8, 3)) if seed % 2 else \
            tuple(int(x) for x in rng.integers(4, 16, 2))
        shape = shape[:-1] + (max(shape[-1], comm.size),)
        v = int(rng.integers(1, shape[-1] // comm.size + 1))
        f = rng.integers(0, 3, size=int(np.prod(shape))).astype(np.float64) if seed % 3 else \
            rng.random(int(np.prod(shape)))
        for kind in ("join", "split"):
            ref = tp.merge_tree(tp.Grid(shape, comm), f, kind).gather()
            got = tp.merge_tree(tp.Grid(shape, comm, virtual=v), f, kind).gather()
            assert trees_equal(ref, got), (seed, shape, v, kind)
        d1 = tp.persistence_diagram(tp.Grid(shape, comm), f).gather()
        d2 = tp.persistence_diagram(tp.Grid(shape, comm, virtual=v), f).gather()
        for k in d1.raw_pairs:
            assert np.array_equal(d1.raw_pairs[k], d2.raw_pairs[k]), (seed, k)
