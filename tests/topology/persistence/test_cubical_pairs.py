"""The persistence diagram of the cubical complex of a grid (the pairs of
the cubical Morse complex) against gudhi's CubicalComplex(vertices=...) (the
V-construction), its critical points against its pairs, and the cubical
reference itself against CubicalRipser, at any number of ranks."""

import gudhi
import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.threads import using
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from topology import Grid, critical_points, discrete_gradient, persistence_diagram
from topology.kernels import PATH_BLOCK
from topology_cases import (BENCH_CASES, CUBICAL_CASES, bench_field, cubical_field,
                            finite_nonzero, image_axes)

COMM = MPI.COMM_WORLD
FIELDS = ("dim", "birth", "death", "birth_vertex", "death_vertex")


def gudhi_pairs(f) -> dict:
    """gudhi's finite pairs with death > birth and essential births, per dimension."""
    cc = gudhi.CubicalComplex(vertices=f)
    cc.compute_persistence(homology_coeff_field=2, min_persistence=-1.0)
    out = {}
    for d in range(f.ndim):
        p = np.asarray(cc.persistence_intervals_in_dimension(d), np.float64).reshape(-1, 2)
        fin = p[np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])]
        out[d] = (fin[np.lexsort((fin[:, 1], fin[:, 0]))], np.sort(p[~np.isfinite(p[:, 1]), 0]))
    return out


@pytest.mark.parametrize("case", sorted(CUBICAL_CASES))
def test_diagram_equals_gudhi_cubical(case):
    """Pair for pair, every dimension, ties included, at any number of ranks."""
    shape, kind = CUBICAL_CASES[case]
    f = cubical_field(shape, kind)
    g = Grid(shape, COMM, complex="cubical")
    dg = persistence_diagram(g, f, axes=image_axes(shape)).gather()
    ref = gudhi_pairs(f)
    for d in range(len(shape)):
        assert_equal_collective(dg.finite(d), ref[d][0], err_msg="D%d of %s" % (d, case))
        assert_equal_collective(dg.essential(d), ref[d][1], err_msg="essential D%d" % d)
    if kind == "noise":
        assert_collective(COMM, len(ref[1][0]) >= 3, "too easy: %d D1 pairs" % len(ref[1][0]))
    assert_collective(COMM, dg.missing == [], str(dg.missing))


def test_cubical_differs_from_freudenthal():
    """The two complexes are different filtrations: on noise their diagrams differ
    (else the complex= switch would be a no-op that the tests above cannot see)."""
    shape = (7, 6, 5)
    f = cubical_field(shape, "noise")
    a = persistence_diagram(Grid(shape, COMM, complex="cubical"), f, axes="zyx").gather()
    b = persistence_diagram(Grid(shape, COMM), f, axes="zyx").gather()
    assert_collective(COMM, a.report != b.report, "%s == %s" % (a.report, b.report))


@pytest.mark.parametrize("case", ["2d-9x7-noise", "3d-9x8x10-noise", "3d-7x6x5-ties"])
def test_cubical_critical_points_agree_with_the_diagram(case):
    """Minima are the D0 births; every D0 death is a join saddle and every
    D(d-1) birth a split saddle; every finite D(d-1) death is a maximum."""
    shape, kind = CUBICAL_CASES[case]
    f = cubical_field(shape, kind)
    g = Grid(shape, COMM, complex="cubical")
    ids, types = critical_points(g, f, axes=image_axes(shape)).gather()
    dg = persistence_diagram(g, f, axes=image_axes(shape)).gather()
    raw = dg.raw_pairs
    d = len(shape)
    kind_of = dict(zip(ids.tolist(), types.tolist()))
    d0 = raw["dim"] == 0
    births = set(raw["birth_vertex"][d0].tolist())
    minima = {i for i, t in kind_of.items() if t == 0}
    assert_collective(COMM, minima == births, "minima %s births %s" % (len(minima), len(births)))
    fin = np.isfinite(raw["death"])
    deaths = set(raw["death_vertex"][d0 & fin & (raw["death"] > raw["birth"])].tolist())
    split = (raw["dim"] == d - 1) & fin & (raw["death"] > raw["birth"])
    ok = all(kind_of.get(v) in (1, 4) for v in deaths)
    ok &= all(kind_of.get(v) in (d - 1, 4) for v in raw["birth_vertex"][split].tolist())
    ok &= all(kind_of.get(v) == 3 for v in raw["death_vertex"][split].tolist())
    assert_collective(COMM, ok, "critical types disagree with the diagram")


@pytest.mark.parametrize("shape, kind", [pytest.param(s, k, id=i) for s, k, i in BENCH_CASES])
def test_cripser_is_gudhi_cubical_vertices(shape, kind):
    """cripser.computePH(arr, maxdim=2) (V-construction) equals gudhi's
    CubicalComplex(vertices=arr), pair for pair, D0-D2, essential classes too:
    the cubical reference of bench/bench_persistence.py --references is the
    one these tests check against."""
    cripser = pytest.importorskip("cripser")
    nx, ny, nz = shape
    arr = bench_field(shape, kind).reshape(nz, ny, nx)
    ph = cripser.computePH(arr, maxdim=2, top_dim=False)
    cc = gudhi.CubicalComplex(vertices=arr)
    cc.compute_persistence(min_persistence=-1.0)
    for d in range(3):
        ours = ph[ph[:, 0] == d][:, 1:3].copy()
        ours[ours[:, 1] >= np.finfo(np.float64).max, 1] = np.inf    # cripser's "never dies"
        ref = np.asarray(cc.persistence_intervals_in_dimension(d), dtype=np.float64).reshape(-1, 2)
        assert_equal_collective(finite_nonzero(ours), finite_nonzero(ref),
                                err_msg="finite D%d" % d)
        assert_equal_collective(np.sort(ours[np.isinf(ours[:, 1]), 0]),
                                np.sort(ref[np.isinf(ref[:, 1]), 0]), err_msg="essential D%d" % d)


def cripser_pairs(f) -> dict:
    """CubicalRipser's finite pairs with death > birth and essential births, per dimension."""
    cripser = pytest.importorskip("cripser")
    ph = cripser.computePH(np.ascontiguousarray(f, np.float64), maxdim=f.ndim - 1, top_dim=False)
    out = {}
    for d in range(f.ndim):
        p = ph[ph[:, 0] == d][:, 1:3].copy()
        p[p[:, 1] >= np.finfo(np.float64).max, 1] = np.inf        # cripser's "never dies"
        out[d] = (finite_nonzero(p), np.sort(p[np.isinf(p[:, 1]), 0]))
    return out


def test_diagram_does_not_depend_on_threads():
    """A noisy volume whose V-paths, lower stars and reduction make several
    blocks on every rank: every raw pair, bit for bit, at 2 and 4 threads
    (the process default, and threads=) is the one at 1 thread, and the
    diagram is gudhi's and CubicalRipser's."""
    shape = (30, 28, 24 * COMM.size + 5)
    f = cubical_field(shape, "noise")
    g = Grid(shape, COMM, complex="cubical")
    ref = persistence_diagram(g, f, axes="zyx", threads=1)
    for k in (2, 4):
        with using(k):
            by_default = persistence_diagram(g, f, axes="zyx")
        by_argument = persistence_diagram(g, f, axes="zyx", threads=k)
        for dg, how in ((by_default, "using"), (by_argument, "threads=")):
            for name in FIELDS:
                assert_equal_collective(dg.local_raw_pairs[name], ref.local_raw_pairs[name],
                                        err_msg="%s at %d threads (%s)" % (name, k, how))
    whole = ref.gather()
    for refs, who in ((gudhi_pairs(f), "gudhi"), (cripser_pairs(f), "cripser")):
        for d in range(3):
            assert_equal_collective(whole.finite(d), refs[d][0], err_msg="D%d %s" % (d, who))
            assert_equal_collective(whole.essential(d), refs[d][1], err_msg="ess. D%d" % d)
    # D0's V-paths start at both ends of every critical edge
    items = 2 * discrete_gradient(g, f, axes="zyx").local_critical(1)[0].size
    assert_collective(COMM, COMM.allreduce(items, op=MPI.MIN) >= 4 * PATH_BLOCK,
                      "too few V-path items for several blocks: %d" % items)


@pytest.mark.parametrize("threads, exc", [(0, ValueError), (-2, ValueError), (1.5, TypeError),
                                          ("2", TypeError), (True, TypeError)])
def test_bad_threads_raise_on_every_rank(threads, exc):
    """A thread count that is not a positive integer, on every rank or on
    the last rank only, is refused on every rank."""
    g = Grid((5, 4, 6), COMM, complex="cubical")
    f = cubical_field((5, 4, 6), "noise")
    assert_raises_collective(COMM, exc, persistence_diagram, g, f, axes="zyx", threads=threads,
                             match="threads must be a positive integer")
    mine = threads if COMM.rank == COMM.size - 1 else 2
    assert_raises_collective(COMM, exc, persistence_diagram, g, f, axes="zyx", threads=mine,
                             match="threads must be a positive integer")
