"""Out-of-core grids (Grid(..., virtual=v)) and RawField: the same critical
points and D0/D(d-1)/D1 pairs as the in-memory run, ties included, for
several v; clear errors for bad raw files and budgets."""

import os

import numpy as np
import pytest
from mpi4py import MPI

import topology as tp
from mpitest import assert_raises_collective

comm = MPI.COMM_WORLD


def _virtual(shape, v):
    """``v`` slabs per rank, ``"planes"`` for one-plane slabs (the last rank's
    may hold more), and 1 where the ranks' slabs are too thin for ``v``."""
    if v == "planes":
        v = shape[-1] // comm.size
    return v if shape[-1] // comm.size >= v else 1


def _raw(tmp_path, shape, seed, ties):
    rng = np.random.default_rng(seed)
    f = rng.integers(0, 5, size=shape[::-1]) if ties else rng.random(shape[::-1])
    path = os.path.join(str(comm.bcast(str(tmp_path) if comm.rank == 0 else None)),
                        "f%d.raw" % seed)
    if comm.rank == 0:
        f.astype(np.float32).tofile(path)
    comm.Barrier()
    return tp.RawField(path, shape), f.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("shape,v,ties", [((12, 11, 13), 1, True), ((12, 11, 13), 2, True),
                                          ((9, 8, 16), 4, False), ((30, 20), 3, True),
                                          ((7, 9), 1, False), ((9, 8, 16), "planes", False),
                                          ((30, 20), "planes", True)])
def test_same_answers_as_in_memory(tmp_path, shape, v, ties):
    v = _virtual(shape, v)
    raw, f = _raw(tmp_path, shape, 3, ties)
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


def test_raw_field_in_memory_grid(tmp_path):
    raw, f = _raw(tmp_path, (6, 5, 7), 4, False)
    g = tp.Grid((6, 5, 7), comm)
    assert np.array_equal(g.vertex_values(raw).gather(), f.ravel())


def test_bad_input(tmp_path):
    raw, _ = _raw(tmp_path, (6, 5, 7), 5, False)
    g = tp.Grid((6, 5, 7), comm, virtual=1)
    short = tp.RawField(raw.path, (6, 5, 8))
    assert_raises_collective(comm, ValueError, tp.critical_points, tp.Grid((6, 5, 8), comm,
                                                                   virtual=1), short)
    missing = tp.RawField(raw.path + ".nope", (6, 5, 7))
    assert_raises_collective(comm, ValueError, tp.persistence_diagram, g, missing)
    assert_raises_collective(comm, ValueError, tp.Grid, (64, 64, 64), comm, memory_budget="1KiB")
    assert_raises_collective(comm, ValueError, tp.Grid, (6, 5, 7), comm, virtual=1,
                             spill_dir=raw.path + ".nodir")
    assert_raises_collective(comm, ValueError, tp.Grid, (6, 5, 7), comm, virtual=99)
    # the out-of-core merge trees and components check their field at the door too
    assert_raises_collective(comm, ValueError, tp.merge_tree, g, missing)
    assert_raises_collective(comm, ValueError, tp.connected_components, g, missing, 0.5)
    assert_raises_collective(comm, ValueError, tp.merge_tree, tp.Grid((6, 5, 8), comm,
                                                                     virtual=1), short)
    left = [n for n in os.listdir(os.path.dirname(raw.path)) if n.startswith("dmsolve-bsp")]
    assert left == []


@pytest.mark.parametrize("shape,v,threshold,sublevel", [((9, 8, 16), "planes", 0.3, True),
                                                        ((12, 11, 13), 2, 0.55, False),
                                                        ((40, 33), 3, 0.5, True),
                                                        ((7, 9), 1, 0.4, False)])
def test_components_as_in_memory(tmp_path, shape, v, threshold, sublevel):
    v = _virtual(shape, v)
    raw, f = _raw(tmp_path, shape, 6, False)
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
    raw, f = _raw(tmp_path, (6, 5, 7), 7, False)
    g = tp.Grid((6, 5, 7), comm)
    assert_raises_collective(comm, ValueError, tp.connected_components, g, f, 0.5,
                             out=os.path.join(os.path.dirname(raw.path), "x.raw"))
    go = tp.Grid((6, 5, 7), comm, virtual=1)
    assert_raises_collective(comm, ValueError, tp.connected_components, go, raw, 0.5,
                             out=os.path.join(raw.path + ".nodir", "x.raw"))


def _trees_equal(a, b):
    return all(np.array_equal(x, y) for x, y in ((a.node_ids, b.node_ids),
                                                 (a.node_values, b.node_values),
                                                 (a.node_types, b.node_types), (a.arcs, b.arcs)))


@pytest.mark.parametrize("shape,v,ties", [((9, 8, 16), "planes", False), ((12, 11, 13), 2, True),
                                          ((40, 33), 3, True), ((7, 9), 1, False)])
@pytest.mark.parametrize("kind", ["join", "split"])
def test_merge_trees_as_in_memory(tmp_path, shape, v, ties, kind):
    v = _virtual(shape, v)
    raw, f = _raw(tmp_path, shape, 8, ties)
    ref = tp.merge_tree(tp.Grid(shape, comm), f, kind).gather()
    got = tp.merge_tree(tp.Grid(shape, comm, virtual=v), raw, kind)
    assert got.counts == ref.counts and ref.counts["saddles"] > 5
    assert _trees_equal(ref, got.gather())


def test_merge_trees_many_fields():
    """Small random fields, many cuts: every merge at an interface plane
    (where the two sides' branches meet) lands where it does in memory."""
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
            assert _trees_equal(ref, got), (seed, shape, v, kind)
        d1 = tp.persistence_diagram(tp.Grid(shape, comm), f).gather()
        d2 = tp.persistence_diagram(tp.Grid(shape, comm, virtual=v), f).gather()
        for k in d1.raw_pairs:
            assert np.array_equal(d1.raw_pairs[k], d2.raw_pairs[k]), (seed, k)
