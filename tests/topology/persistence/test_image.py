"""The persistence diagram of a 2-D image (image_persistence, also the path of
persistence_diagram on a 2D cubical Grid): pair for pair gudhi's
CubicalComplex(vertices=...) and CubicalRipser's computePH on crops of
scikit-image's images and on random images with ties, every raw pair equal
to the sweeps of the whole vertex graph, the same blocks at any number of
ranks, and bad input refused on every rank."""

import gudhi
import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Progress
from dmsolve.threads import using
from mpitest import assert_collective, assert_equal_collective, assert_raises_collective
from topology import Grid, image_persistence, persistence_diagram
from topology.persistence import in_memory_parts, row_ranges, sorted_block
from topology.persistence._image import _link_tables
from topology.persistence._image_kernels import NEIGHBOURS_8
from topology.morse import cubical_link_graph

COMM = MPI.COMM_WORLD


def gudhi_pairs(f) -> dict:
    """gudhi's finite pairs with death > birth and essential births of D0, D1."""
    cc = gudhi.CubicalComplex(vertices=f)
    cc.compute_persistence(homology_coeff_field=2, min_persistence=-1.0)
    out = {}
    for d in range(2):
        p = np.asarray(cc.persistence_intervals_in_dimension(d), np.float64).reshape(-1, 2)
        fin = p[np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])]
        out[d] = (fin[np.lexsort((fin[:, 1], fin[:, 0]))], np.sort(p[~np.isfinite(p[:, 1]), 0]))
    return out


def cripser_pairs(f) -> dict:
    """The same from CubicalRipser (``computePH(f, maxdim=1)``)."""
    cripser = pytest.importorskip("cripser")
    ph = cripser.computePH(np.ascontiguousarray(f, np.float64), maxdim=1)
    out = {}
    for d in range(2):
        p = ph[ph[:, 0] == d][:, 1:3].copy()
        p[p[:, 1] >= np.finfo(np.float64).max, 1] = np.inf       # cripser's "never dies"
        fin = p[np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])]
        out[d] = (fin[np.lexsort((fin[:, 1], fin[:, 0]))], np.sort(p[~np.isfinite(p[:, 1]), 0]))
    return out


def skimage_image(name: str, crop) -> np.ndarray:
    """A crop of one of scikit-image's bundled images, in grey, as float64."""
    data = pytest.importorskip("skimage.data")
    color = pytest.importorskip("skimage.color")
    img = getattr(data, name)()
    if img.ndim == 3:
        img = color.rgb2gray(img)
    return np.ascontiguousarray(np.asarray(img, np.float64)[crop])


def random_image(shape, levels, seed) -> np.ndarray:
    """Random values, with many ties when ``levels`` is small (None: no ties)."""
    rng = np.random.default_rng(seed)
    if levels is None:
        return rng.random(shape)
    return rng.integers(0, levels, shape).astype(np.float64)


IMAGES = {
    "camera-96x128": ("camera", (slice(200, 296), slice(100, 228))),
    "coins-61x77": ("coins", (slice(100, 161), slice(150, 227))),
    "hubble-grey-80x90": ("hubble_deep_field", (slice(400, 480), slice(500, 590))),
    "retina-grey-101x73": ("retina", (slice(600, 701), slice(700, 773))),
}

RANDOM = {
    "noise-37x29": ((37, 29), None, 1),
    "ties3-31x23": ((31, 23), 3, 2),
    "ties8-13x41": ((13, 41), 8, 3),
    "ties2-7x5": ((7, 5), 2, 4),
    "one-row-1x17": ((1, 17), 4, 5),
    "one-column-19x1": ((19, 1), 4, 6),
    "rows-fewer-than-ranks-3x9": ((3, 9), 5, 7),
    "one-pixel": ((1, 1), None, 8),
}


def _check_against(dg, ref, case):
    for d in range(2):
        assert_equal_collective(dg.finite(d), ref[d][0], err_msg="finite D%d of %s" % (d, case))
        assert_equal_collective(dg.essential(d), ref[d][1], err_msg="essential D%d of %s"
                                % (d, case))


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_skimage_crops_equal_gudhi_and_cripser(case):
    """Crops of camera, coins, hubble_deep_field and retina (grey): the pairs
    equal gudhi's and CubicalRipser's, at any number of ranks."""
    name, crop = IMAGES[case]
    f = skimage_image(name, crop)
    dg = image_persistence(f, COMM).gather()
    _check_against(dg, gudhi_pairs(f), case)
    _check_against(dg, cripser_pairs(f), case)
    assert_collective(COMM, dg.report[1]["nonzero"] >= 10, "too easy: %s" % dg.report)


@pytest.mark.parametrize("case", sorted(RANDOM))
def test_random_images_equal_gudhi(case):
    """Random images, with ties and without, thin ones and ones with fewer
    rows than ranks: the pairs equal gudhi's."""
    shape, levels, seed = RANDOM[case]
    f = random_image(shape, levels, seed)
    dg = image_persistence(f, COMM).gather()
    _check_against(dg, gudhi_pairs(f), case)


@pytest.mark.parametrize("case", ["camera-96x128", "ties3-31x23", "noise-37x29"])
def test_raw_pairs_equal_the_grid_sweeps(case):
    """Every raw pair (ties' zero-persistence ones too) and every rank's block
    equal those of the sweeps of the whole vertex graph on a cubical Grid
    (global order, descent labels, distributed elder rule) and
    persistence_diagram's on that Grid."""
    if case in IMAGES:
        f = skimage_image(*IMAGES[case])
    else:
        f = random_image(*RANDOM[case])
    nrows, ncols = f.shape
    grid = Grid((ncols, nrows), COMM, complex="cubical")
    a = image_persistence(f, COMM)
    sweeps = sorted_block(COMM, in_memory_parts(grid, f, "yx", Progress(None, COMM, "test")))
    b = persistence_diagram(grid, f, axes="yx")
    for key in sweeps:
        assert_equal_collective(a.local_raw_pairs[key], sweeps[key], err_msg="sweeps %s" % key)
        assert_equal_collective(b.local_raw_pairs[key], sweeps[key], err_msg="grid %s" % key)
    assert_collective(COMM, a.report == b.report, "%s != %s" % (a.report, b.report))


def test_blocks_are_sorted_and_balanced():
    """Rank r holds block r of the whole diagram sorted by (dim, birth_vertex,
    death_vertex), as psort's blocks."""
    f = random_image((23, 19), 4, 11)
    dg = image_persistence(f, COMM)
    whole = dg.gather()
    p = whole.raw_pairs
    keys = np.column_stack((p["dim"], p["birth_vertex"], p["death_vertex"]))
    order = np.lexsort(keys.T[::-1])
    assert_equal_collective(order, np.arange(order.size), err_msg="gathered order")
    cut = row_ranges(order.size, COMM.size)
    r = COMM.rank
    assert_equal_collective(dg.local_raw_pairs["birth_vertex"],
                            p["birth_vertex"][cut[r]:cut[r + 1]], err_msg="block")


def test_integer_and_bool_images():
    """Integer and boolean images are read as float64."""
    f = random_image((17, 13), 6, 12)
    a = image_persistence(f.astype(np.uint8), COMM).gather()
    _check_against(a, gudhi_pairs(f), "uint8")
    b = image_persistence(f > 2, COMM).gather()
    _check_against(b, gudhi_pairs((f > 2).astype(np.float64)), "bool")


def test_example_pixels_and_min_persistence():
    """Births and deaths are pixel ids j + i * ncols; min_persistence keeps
    only the longer pairs."""
    image = np.array([[5, 4, 5, 6, 7],
                      [4, 1, 3, 2, 6],
                      [5, 3, 6, 0, 5],
                      [6, 4, 5, 3, 6]])
    dg = image_persistence(image, COMM).gather()
    p = dg.pairs
    d1 = p["dim"] == 1
    assert_equal_collective(np.column_stack(np.unravel_index(p["death_vertex"][d1], (4, 5))),
                            np.array([[2, 2]]), err_msg="D1 death pixel")
    assert_equal_collective(dg.finite(0), np.array([[1.0, 3.0]]), err_msg="D0")
    kept = image_persistence(image, COMM, min_persistence=1.5).gather()
    assert_equal_collective(kept.finite(0), np.array([[1.0, 3.0]]), err_msg="kept D0")
    assert_equal_collective(kept.finite(1), np.zeros((0, 2)), err_msg="kept D1")


def test_link_tables_follow_the_cubical_link_graph():
    """The kernels' neighbour order is cubical_link_graph's, and the tables
    count the components of the link: none for no neighbour, two for two
    opposite ones, one for a full star."""
    full, _, _ = cubical_link_graph(2, True)
    assert_equal_collective(NEIGHBOURS_8, full, err_msg="neighbour order")
    (nodes0, links0), (nodes1, links1) = _link_tables()
    assert_collective(COMM, nodes0 == 2 + 8 + 16 + 64 and nodes1 == 255, "node masks")
    facts = [links0[0] == 0, links0[8 | 16] == 2, links0[255] == 1, links0[2 | 8] == 2,
             links0[1 | 2 | 8] == 1, links1[1 | 128] == 2, links1[255] == 1, links1[2 | 8] == 1]
    assert_collective(COMM, all(facts), "link tables %s" % facts)


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("image, exc, match", [
    pytest.param(np.zeros((3, 4, 5)), ValueError, "2-D", id="3d"),
    pytest.param(np.zeros(7), ValueError, "2-D", id="1d"),
    pytest.param(np.zeros((0, 4)), ValueError, "empty", id="empty"),
    pytest.param(np.array([[1.0, np.nan], [0.0, 2.0]]), ValueError, "finite", id="nan"),
    pytest.param(np.array([[1.0, np.inf], [0.0, 2.0]]), ValueError, "finite", id="inf"),
    pytest.param(np.array([["a", "b"], ["c", "d"]]), TypeError, "real numbers", id="strings"),
    pytest.param(np.ones((2, 2), complex), TypeError, "real numbers", id="complex"),
])
def test_bad_images_raise_on_every_rank(image, exc, match):
    assert_raises_collective(COMM, exc, image_persistence, image, COMM, match=match)


def test_nan_on_one_rank_rows_raises_on_every_rank():
    """A NaN in the last row is read by the last rank only; every rank raises."""
    f = random_image((9, 6), None, 13)
    f[-1, 2] = np.nan
    assert_raises_collective(COMM, ValueError, image_persistence, f, COMM, match="finite")


@pytest.mark.mpi(min_size=2)
def test_different_shapes_on_ranks_raise_on_every_rank():
    f = np.zeros((5 + COMM.rank, 4))
    assert_raises_collective(COMM, ValueError, image_persistence, f, COMM, match="same image")


def test_bad_arguments_raise_on_every_rank():
    f = np.zeros((3, 3))
    assert_raises_collective(COMM, ValueError, image_persistence, f, COMM,
                             min_persistence=-1.0)
    assert_raises_collective(COMM, TypeError, image_persistence, f, COMM, progress=3)
    assert_raises_collective(COMM, TypeError, image_persistence, f, "comm")


@pytest.mark.parametrize("threads, exc", [(0, ValueError), (-3, ValueError), (1.5, TypeError)])
def test_bad_threads_raise_on_every_rank(threads, exc):
    """A thread count that is not a positive integer, on every rank or on
    the last rank alone, is refused on every rank."""
    f = random_image((9, 8), 4, 3)
    assert_raises_collective(COMM, exc, image_persistence, f, COMM, threads=threads,
                             match="threads must be a positive integer")
    mine = threads if COMM.rank == COMM.size - 1 else 2
    assert_raises_collective(COMM, exc, image_persistence, f, COMM, threads=mine,
                             match="threads must be a positive integer")


def test_image_does_not_depend_on_threads():
    """Every raw pair, bit for bit, at 2 and 4 threads (the process default,
    and threads=) is the one at 1 thread, and the diagram is gudhi's and
    CubicalRipser's; the same through persistence_diagram on a cubical Grid."""
    f = random_image((83, 97), 40, 21)
    ref = image_persistence(f, COMM, threads=1)
    grid = Grid(f.shape[::-1], COMM, complex="cubical")
    for k in (2, 4):
        with using(k):
            by_default = image_persistence(f, COMM)
        for dg, how in ((by_default, "using"), (image_persistence(f, COMM, threads=k), "threads="),
                        (persistence_diagram(grid, f, axes="yx", threads=k), "grid")):
            for name, col in ref.local_raw_pairs.items():
                assert_equal_collective(dg.local_raw_pairs[name], col,
                                        err_msg="%s at %d threads (%s)" % (name, k, how))
    whole = ref.gather()
    _check_against(whole, gudhi_pairs(f), "gudhi")
    _check_against(whole, cripser_pairs(f), "cripser")
    assert_collective(COMM, whole.report[1]["nonzero"] >= 100, "too easy: %s" % whole.report)


def test_progress_reports_d0_and_d1():
    """A progress callback hears D0 and D1 with the report's counts."""
    calls = []
    f = random_image((11, 10), 5, 14)
    dg = image_persistence(f, COMM, progress=lambda t, m, s: calls.append(m))
    r = dg.report
    want = ["D0: %d pairs, %d essential" % (r[0]["pairs"], r[0]["essential"]),
            "D1: %d pairs" % r[1]["pairs"]]
    assert_collective(COMM, calls == want, "%s != %s" % (calls, want))
