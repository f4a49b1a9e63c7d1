"""The cubical gradient (Grid(..., complex="cubical")): a valid acyclic
matching of the cubes of the grid within lower stars, with the Euler
characteristic of a box, and the same critical cells at any number of ranks."""

import itertools

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.threads import using
from mpitest import assert_collective, assert_equal_collective
from topology import Grid, discrete_gradient
from topology_cases import CUBICAL_CASES, cubical_field, image_axes

COMM = MPI.COMM_WORLD


def cubical_cells(shape):
    """Every cell of the cubical complex of a grid as a sorted tuple of vertex ids."""
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    dim = len(shape)
    cells = {k: set() for k in range(dim + 1)}
    for origin in itertools.product(*[range(n) for n in shape]):
        for span in itertools.product((0, 1), repeat=dim):
            if any(o + s >= n for o, s, n in zip(origin, span, shape)):
                continue
            verts = [np.dot(np.array(origin) + np.array(e), strides)
                     for e in itertools.product(*[(0, 1) if s else (0,) for s in span])]
            cells[sum(span)].add(tuple(sorted(int(v) for v in verts)))
    return cells


@pytest.mark.parametrize("case", ["2d-9x7-noise", "3d-6x5x7-noise", "3d-5x5x4-ties"])
def test_gradient_is_a_valid_acyclic_matching(case):
    """V pairs a cell with a facet in the same lower star, every cell is paired
    or critical exactly once, V-paths are acyclic, and sum (-1)^d c_d = 1."""
    shape, kind = CUBICAL_CASES[case]
    f = cubical_field(shape, kind)
    G = discrete_gradient(Grid(shape, COMM, complex="cubical"), f, axes=image_axes(shape))
    order = G.order.gather()
    counts = G.critical_counts()
    assert_collective(COMM, sum((-1) ** k * c for k, c in enumerate(counts)) == 1, str(counts))
    cells = cubical_cells(shape)
    msg = None
    seen = {k: [tuple(r) for r in G.critical_cells(k)] for k in range(len(shape) + 1)}
    pairs = [G.pairs(k) for k in range(len(shape))]
    try:
        for k, (lo, hi) in enumerate(pairs):
            for a, b in zip(map(tuple, lo), map(tuple, hi)):
                assert set(a) < set(b) and len(b) == 2 * len(a), (a, b)
                assert a in cells[k] and b in cells[k + 1], (a, b)
                assert max(a, key=order.__getitem__) == max(b, key=order.__getitem__), (a, b)
                seen[k].append(a)
                seen[k + 1].append(b)
        for k in seen:
            assert len(seen[k]) == len(set(seen[k])), "a %d-cell twice" % k
            assert set(seen[k]) == cells[k], "%d-cells missing" % k
        for k in range(1, len(shape)):
            lo, hi = pairs[k]
            pair_of = dict(zip(map(tuple, lo), map(tuple, hi)))
            facets = {b: [c for c in cells[k] if set(c) < set(b)] for b in pair_of.values()}
            state = {}

            def visit(a):
                state[a] = 1
                for nxt in facets[pair_of[a]]:
                    if nxt == a or nxt not in pair_of:
                        continue
                    assert state.get(nxt) != 1, "closed V-path through %s" % (nxt,)
                    if nxt not in state:
                        visit(nxt)
                state[a] = 2
            for a in pair_of:
                if a not in state:
                    visit(a)
    except AssertionError as e:
        msg = str(e)
    assert_collective(COMM, msg is None, msg)


def test_cubical_critical_cells_do_not_depend_on_ranks():
    """The critical cells are those of the gradient on one rank."""
    shape = (7, 6, 8)
    f = cubical_field(shape, "noise")
    G = discrete_gradient(Grid(shape, COMM, complex="cubical"), f, axes="zyx")
    G1 = discrete_gradient(Grid(shape, MPI.COMM_SELF, complex="cubical"), f, axes="zyx")
    for d in range(4):
        assert_equal_collective(G.critical_cells(d), G1.critical_cells(d), err_msg="d=%d" % d)
    assert_collective(COMM, sum(G.critical_counts()) > 40, str(G.critical_counts()))


def test_cubical_gradient_does_not_depend_on_threads():
    """The byte of every cell (pairing code and step) and the critical cells
    at 2 and 4 threads are those at 1 thread, on a grid whose planes make
    several blocks on every rank."""
    shape = (12, 11, 8 * COMM.size + 3)
    f = cubical_field(shape, "noise")
    grid = Grid(shape, COMM, complex="cubical")
    with using(1):
        ref = discrete_gradient(grid, f, axes="zyx")
    for k in (2, 4):
        with using(k):
            G = discrete_gradient(grid, f, axes="zyx")
        assert_equal_collective(G.C, ref.C, err_msg="cell bytes at %d threads" % k)
        for d in range(4):
            assert_equal_collective(G.local_critical(d), ref.local_critical(d),
                                    err_msg="critical %d-cells at %d threads" % (d, k))
    assert_collective(COMM, np.count_nonzero(ref.C) > 1000, "too small a gradient")
