"""The lower-star discrete gradient (discrete_gradient) of grids and
tetrahedral meshes: a valid acyclic matching within lower stars, the Euler
characteristic and Morse inequalities, and the same critical cells and pairs
at any number of ranks and under every partition."""

import itertools

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.threads import using
from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     on_rank0)
from topology import Grid, SimplicialComplex, betti_numbers, discrete_gradient
from topology.morse._gradient import STAR_BLOCK
from topology.morse._lower_star import CRITICAL, DOWN, NOT_LOWER
from topology_cases import GRADIENT_MESHES, HOLED_GRID_MESHES, complex_on_rank0, gradient_field
from topology_reference import faces, grid_cells

COMM = MPI.COMM_WORLD

GRIDS = {"2d-7x9-ties": ((7, 9), "ties"), "2d-13x5-smooth": ((13, 5), "smooth"),
         "3d-5x6x7-ties": ((5, 6, 7), "ties"), "3d-3x4x2-noise": ((3, 4, 2), "noise"),
         "3d-7x5x6-smooth": ((7, 5, 6), "smooth")}


def euler(counts):
    return sum((-1) ** k * c for k, c in enumerate(counts))


def check_gradient(G, tops):
    """V is a matching of facet-cofacet pairs within one lower star; V-paths
    are acyclic; the critical cells are the rest."""
    values_order = G.order.gather()
    d = G.dimension
    all_cells = {k: {tuple(r) for r in faces(tops, k)} for k in range(d + 1)}
    seen = {k: [] for k in range(d + 1)}
    edges = []                       # the V-path digraph on (d, d+1) pairs
    for k in range(d):
        lo, hi = G.pairs(k)
        for a, b in zip(map(tuple, lo), map(tuple, hi)):
            assert set(a) < set(b) and len(b) == len(a) + 1, (a, b)
            assert a in all_cells[k] and b in all_cells[k + 1]
            # same lower star: the same maximum vertex
            assert max(a, key=lambda v: values_order[v]) == max(b, key=lambda v: values_order[v])
            seen[k].append(a)
            seen[k + 1].append(b)
        edges.append((k, lo, hi))
    for k in range(d + 1):
        crit = [tuple(r) for r in G.critical_cells(k)]
        cells = seen[k] + crit
        assert len(cells) == len(set(cells)), "a %d-cell is paired twice" % k
        assert set(cells) == all_cells[k], "%d-cells missing from V and the critical set" % k
    # acyclicity of V-paths between dimensions k and k+1
    for k, lo, hi in edges:
        if k == 0:
            continue
        pair_of = {a: b for a, b in zip(map(tuple, lo), map(tuple, hi))}
        succ = {}
        for a, b in pair_of.items():
            succ[a] = [f for f in itertools.combinations(b, k + 1) if f != a and f in pair_of]
        state = {}
        for s in pair_of:
            stack = [(s, iter(succ[s]))]
            state[s] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                    continue
                assert state.get(nxt) != 1, "closed V-path through %s" % (nxt,)
                if nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, iter(succ[nxt])))


@pytest.mark.parametrize("case", list(GRIDS), ids=list(GRIDS))
def test_grid_gradient_valid_and_euler(case):
    """On 2D and 3D grids the gradient is a valid acyclic matching whose
    critical cells have the Euler characteristic of a box."""
    shape, kind = GRIDS[case]
    g = Grid(shape, COMM)
    G = discrete_gradient(g, gradient_field(kind, shape, seed=1))
    counts = G.critical_counts()
    assert_collective(COMM, euler(counts) == 1, "Euler characteristic %s" % counts)
    ok, msg = True, ""
    try:
        check_gradient(G, grid_cells(shape))
    except AssertionError as e:
        ok, msg = False, str(e)
    assert_collective(COMM, ok, msg)
    # weak Morse inequalities: m_k >= b_k (a grid is contractible)
    assert_collective(COMM, counts[0] >= 1 and all(c >= 0 for c in counts), str(counts))


@pytest.mark.parametrize("name", list(GRADIENT_MESHES), ids=list(GRADIENT_MESHES))
def test_mesh_gradient_morse_inequalities(name):
    """On tetrahedral meshes the gradient is a valid acyclic matching whose
    critical cells meet the Euler characteristic and the Morse inequalities."""
    tets = GRADIENT_MESHES[name]()
    cx = complex_on_rank0(tets)
    values = gradient_field("ties", (tets.max() + 1,), seed=4)
    G = discrete_gradient(cx, values)
    counts = G.critical_counts()
    betti = betti_numbers(cx)
    chi = euler(cx.counts())
    assert_collective(COMM, euler(counts) == chi == euler(betti), "%s %s %s" % (counts, chi, betti))
    assert_collective(COMM, all(m >= b for m, b in zip(counts, betti)), "%s < %s" % (counts, betti))
    ok, msg = True, ""
    try:
        check_gradient(G, tets)
    except AssertionError as e:
        ok, msg = False, str(e)
    assert_collective(COMM, ok, msg)


def test_critical_cells_do_not_depend_on_ranks():
    """The critical cells of a grid field with ties are those of the serial gradient."""
    shape = (9, 7, 11)
    values = gradient_field("ties3", shape, seed=2)
    G = discrete_gradient(Grid(shape, COMM), values)
    cells = [G.critical_cells(d) for d in range(4)]
    # the serial gradient of the same field, on one rank, is the reference
    def serial():
        Gs = discrete_gradient(Grid(shape, MPI.COMM_SELF), values)
        return [Gs.critical_cells(d) for d in range(4)]

    ref = on_rank0(COMM, serial)
    for d in range(4):
        assert_equal_collective(cells[d], ref[d], err_msg="critical %d-cells" % d)
    assert_collective(COMM, sum(c.shape[0] for c in cells) > 20, "too easy a case")


@pytest.mark.parametrize("case", ["grid", "mesh"])
def test_gradient_does_not_depend_on_threads(case):
    """Every star slot's code (and the step of every triangle its star
    pairs down or makes critical) at 2 and 4 threads is the one at 1
    thread, with several blocks of stars on every rank: the grid's
    bit-mask kernel and the general one (a mesh)."""
    # at least two blocks of STAR_BLOCK owned vertices on every rank
    nz = (2 * STAR_BLOCK // 256 + 2) * COMM.size + 5
    shape = (16, 16, nz)
    values = gradient_field("ties3", shape, seed=4)
    if case == "grid":
        domain = Grid(shape, COMM)
    else:
        domain = complex_on_rank0(grid_cells(shape))        # its tetrahedra as a mesh
    with using(1):
        ref = discrete_gradient(domain, values)
    owned = ref.vp.size
    for k in (2, 4):
        with using(k):
            G = discrete_gradient(domain, values)
        for name in ("vp", "ep", "tp", "qp"):
            assert_equal_collective(getattr(G, name), getattr(ref, name),
                                    err_msg="%s at %d threads" % (name, k))
        written = (ref.tp == CRITICAL) | (ref.tp >= DOWN) | (ref.tp == NOT_LOWER)
        assert_equal_collective(G.tt[written], ref.tt[written], err_msg="steps at %d" % k)
    assert_collective(COMM, COMM.allreduce(owned, op=MPI.MIN) >= 2 * STAR_BLOCK,
                      "a rank with one block: %d stars" % owned)


@pytest.mark.parametrize("name", list(HOLED_GRID_MESHES))
def test_gradient_does_not_depend_on_partition(name):
    """Integer values (ties): the critical cells and gradient pairs in global
    vertex ids are the same under block, METIS and RCB partitions as in a
    serial run."""
    tops, pts = HOLED_GRID_MESHES[name]()
    values = np.random.default_rng(11).integers(0, 3, pts.shape[0]).astype(np.float64)
    serial = SimplicialComplex(tops, MPI.COMM_SELF, pts)
    G0 = discrete_gradient(serial, values)
    d = serial.dimension
    for part in ("block", "metis", "multilevel", "rcb", "hilbert"):
        cx = SimplicialComplex(tops[COMM.rank::COMM.size], COMM, pts, partition=part)
        G = discrete_gradient(cx, values)
        assert_equal_collective(G.critical_counts(), G0.critical_counts(), err_msg=part)
        for k in range(d + 1):
            assert_equal_collective(G.critical_cells(k), G0.critical_cells(k),
                                    err_msg="%s critical %d-cells" % (part, k))
        for k in range(d):
            for a, b in zip(G.pairs(k), G0.pairs(k)):
                assert_equal_collective(a, b, err_msg="%s pairs %d" % (part, k))


def test_gradient_refuses_a_field_of_the_wrong_size():
    """A field that does not fit the grid is refused on every rank."""
    g = Grid((4, 4, 4), COMM)
    assert_raises_collective(COMM, ValueError, discrete_gradient, g, np.zeros(10))


def test_gradient_refuses_dimensions_out_of_range():
    """Critical cells and pairs of a dimension the gradient does not have are
    refused on every rank."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    cases = [
        (lambda: discrete_gradient(g, f).critical_cells(-1), ValueError, r"d must be .*\[0, 2\]"),
        (lambda: discrete_gradient(g, f).pairs(2), ValueError, r"d must be .*\[0, 1\]"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
