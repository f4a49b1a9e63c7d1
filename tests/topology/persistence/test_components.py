"""Connected components (connected_components) of complexes, of the
sublevel and superlevel sets of grid fields (Freudenthal and cubical) and
under every partition, against scipy's components of the serial graph, in
a number of supersteps that does not grow with the chain of pieces."""

import numpy as np
import pytest
import scipy.ndimage as ndi
from mpi4py import MPI

import topology
from bad_inputs import check_bad_input
from dmsolve import DistVector
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from topology import Grid, SimplicialComplex, connected_components
from topology_cases import (CUBICAL_CASES, cubical_field, delaunay, image_axes, mixed_complex,
                            my_share)
from topology_reference import faces, grid_cells, reference_components

COMM = MPI.COMM_WORLD


def test_components_of_complex():
    """A complex of mixed dimensions with an isolated vertex has the
    components of its edge graph, each named by its smallest vertex."""
    parts, n = mixed_complex()
    cx = SimplicialComplex([p[COMM.rank::COMM.size] for p in parts], COMM)
    labels = connected_components(cx).gather()
    edges = faces([tuple(r) for p in parts[:-1] for r in p], 1)
    assert_equal_collective(labels, reference_components(n, edges))
    assert_equal_collective(labels[[0, 4, 5, 8, 9, 11, 12]], [0, 0, 5, 5, 9, 9, 12])


@pytest.mark.parametrize("shape", [(7, 9), (5, 6, 7)], ids=["2d", "3d"])
def test_level_set_components_on_grid(shape):
    """A grid is one component; the sublevel and superlevel sets of a random
    field have the components of the triangulation's edges."""
    g = Grid(shape, COMM)
    n = int(np.prod(shape))
    rng = np.random.default_rng(2)
    fld = rng.random(n)
    edges = faces(grid_cells(shape), 1)
    assert_equal_collective(connected_components(g).gather(), np.zeros(n, dtype=np.int64))
    for thr, sub in ((0.45, True), (0.6, False)):
        got = connected_components(g, fld, thr, sublevel=sub).gather()
        keep = fld <= thr if sub else fld >= thr
        assert_equal_collective(got, reference_components(n, edges, keep))


def test_level_set_components_snake_across_ranks():
    """A serpentine sublevel set crossing the rank boundaries many times is
    one component as serially; a field without a threshold is refused."""
    # a serpentine sublevel set that crosses the slab boundaries many times
    nx, ny = 5, 16
    fld = np.ones((ny, nx))
    fld[:, 0] = 0
    for y in range(0, ny, 2):
        fld[y, :] = 0
    fld[1::4, 0] = 1
    fld[3::4, -1] = 0
    fld = fld.ravel()
    edges = faces(grid_cells((nx, ny)), 1)
    got = connected_components(Grid((nx, ny), COMM), DistVector.from_global(
        fld, Grid((nx, ny), COMM).vertex_layout), 0.5).gather()
    assert_equal_collective(got, reference_components(nx * ny, edges, fld <= 0.5))
    assert_raises_collective(COMM, ValueError, connected_components, Grid((3, 3), COMM),
                             np.zeros(9))


def _comb(nx, ny):
    """A comb across the boundary of rows 0-5 (rank 0) and 6-11 (rank 1):
    teeth on the even columns of rows 3-9, joined in pairs by a bridge on row
    3 (columns 4k..4k+2) and, shifted by one tooth, on row 9 (4k+2..4k+4).
    With one ghost row, rank 0 sees the lower bridges only and rank 1 the
    upper ones: a chain of about nx/2 pieces going back and forth between
    two ranks."""
    fld = np.ones((ny, nx))
    fld[3:10, 0::2] = 0
    for x in range(0, nx - 2, 4):
        fld[3, x:x + 3] = 0
        fld[9, x + 2:x + 5] = 0
    return fld.ravel()


def test_components_of_a_comb_chaining_two_ranks_take_log_supersteps(monkeypatch):
    """A comb whose pieces chain back and forth between two ranks is one
    component, found within 2 ceil(log2 p) + 2 supersteps whatever the chain
    (none on one rank); fewer allowed supersteps raise on every rank."""
    from dmsolve.bsp import Ledger
    nx, ny = 121, 6 * max(COMM.size, 2)
    # a chain of nx // 2 = 60 pieces at 2 ranks and more
    fld = _comb(nx, ny)
    steps = []
    record = Ledger.record_superstep
    monkeypatch.setattr(Ledger, "record_superstep",
                        lambda self, *a, **k: (steps.append(a[0]), record(self, *a, **k)))
    g = Grid((nx, ny), COMM)
    got = connected_components(g, fld, 0.5).gather()
    monkeypatch.undo()
    edges = faces(grid_cells((nx, ny)), 1)
    assert_equal_collective(got, reference_components(nx * ny, edges, fld <= 0.5))
    assert_collective(COMM, np.all(got[fld <= 0.5] == 3 * nx), "one component")
    # one superstep of links, then the union-find up and down the rank tree,
    # 2 ceil(log2 p) + 1 whatever the chain (min-label propagation would take
    # about one per piece of the chain; hooking up to 4 log2(chain))
    bound = 1 + (2 * np.ceil(np.log2(COMM.size)) + 1 if COMM.size > 1 else 0)
    assert_collective(COMM, len(steps) <= bound and (COMM.size == 1) == (len(steps) == 0),
                      "%d supersteps, bound %.1f" % (len(steps), bound))
    if COMM.size > 1:
        assert_raises_collective(COMM, RuntimeError, connected_components, g, fld, 0.5,
                                 max_steps=2, match="within 2 supersteps")
        got = connected_components(g, fld, 0.5, max_steps=int(bound)).gather()
        assert_collective(COMM, np.all(got[fld <= 0.5] == 3 * nx), "within max_steps")


@pytest.mark.parametrize("partition", ["block", "metis", "multilevel", "rcb", "hilbert"])
def test_components_do_not_depend_on_the_partition(partition):
    """Under every partition the components of a complex and of its
    sublevel sets, read in global id order, are scipy's."""
    pts, cells = delaunay(60, 2, seed=31)
    n = 60
    fld = np.random.default_rng(7).integers(0, 4, n).astype(float)    # ties
    cx = SimplicialComplex([my_share(cells)], COMM, points=pts, partition=partition)
    edges = faces(cells, 1)
    for thr in (0.5, 2.5):
        got = cx.gather_global(connected_components(cx, fld, thr))
        assert_equal_collective(got, reference_components(n, edges, fld <= thr))
    lab = cx.gather_global(connected_components(cx))
    assert_equal_collective(lab, reference_components(n, edges))


@pytest.mark.parametrize("case", ["2d-12x10-ties", "3d-9x8x10-noise"])
@pytest.mark.parametrize("sublevel", [True, False])
def test_cubical_components_follow_the_grid_edges(case, sublevel):
    """Labels are scipy.ndimage.label's (4-/6-connectivity) components, named by
    their smallest vertex id."""
    shape, kind = CUBICAL_CASES[case]
    f = cubical_field(shape, kind)
    t = float(np.median(f))
    g = Grid(shape, COMM, complex="cubical")
    lab = connected_components(g, f, t, sublevel=sublevel, axes=image_axes(shape)).gather()
    inside = f <= t if sublevel else f >= t
    ref, n = ndi.label(inside)            # the cross structuring element: the grid's edges
    ref = ref.ravel()
    want = np.full(ref.size, -1, np.int64)
    for c in range(1, n + 1):
        ids = np.flatnonzero(ref == c)
        want[ids] = ids.min()
    assert_equal_collective(lab, want)
    assert_collective(COMM, n >= 3, "too easy: %d components" % n)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("components-threshold-nan", ValueError, "threshold",
     lambda e: topology.connected_components(e.grid, np.ones(16), threshold=float("nan"))),
    ("components-threshold-a-string", TypeError, "threshold",
     lambda e: topology.connected_components(e.grid, np.ones(16), threshold="low")),
    ("components-sublevel-not-a-bool", TypeError, "sublevel",
     lambda e: topology.connected_components(e.grid, np.ones(16), 0.5, sublevel=1)),
    ("components-max-steps-zero", ValueError, "max_steps",
     lambda e: topology.connected_components(e.grid, max_steps=0)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
