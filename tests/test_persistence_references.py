"""The references of bench/bench_persistence.py --references (issue 20) give the
answers the bench assumes: CubicalRipser's diagram is gudhi's cubical complex
with vertex values, and Oineus's Freudenthal lower star, with the x axis
reversed, is ours."""

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import assert_equal_collective
from topology import Grid, persistence_diagram

cripser = pytest.importorskip("cripser")
oineus = pytest.importorskip("oineus")
gudhi = pytest.importorskip("gudhi")

COMM = MPI.COMM_WORLD

# (nx, ny, nz): a cube, and a box with odd sides that differ, so that an axis mix-up shows
SHAPES = {"16x16x16": (16, 16, 16), "13x11x7": (13, 11, 7)}


def field(shape, kind: str) -> np.ndarray:
    """Vertex values in vertex-id order (x fastest), as bench_persistence's fields;
    'ties' rounds the noisy one to a few levels, so that most values are shared."""
    nx, ny, nz = shape
    z, y, x = np.meshgrid(np.arange(nz) / nz, np.arange(ny) / ny, np.arange(nx) / nx,
                          indexing="ij")
    f = np.sin(6.1 * x) * np.cos(5.3 * y) * np.sin(4.7 * z + 1) + 0.01 * np.cos(37 * (x + y + z))
    if kind in ("noisy", "ties"):
        f = f + 0.5 * np.random.default_rng(7).random(f.shape)
    if kind == "ties":
        f = np.round(4 * f) / 4
    return np.ascontiguousarray(f.ravel())


CASES = [pytest.param(s, k, id="%s-%s" % (name, k))
         for name, s in SHAPES.items() for k in ("smooth", "noisy", "ties")]


def finite_nonzero(pairs) -> np.ndarray:
    """(birth, death) rows with a finite death above the birth, sorted."""
    p = np.asarray(pairs, dtype=np.float64).reshape(-1, 2)
    p = p[np.isfinite(p[:, 1]) & (p[:, 1] > p[:, 0])]
    return p[np.lexsort((p[:, 1], p[:, 0]))]


@pytest.mark.parametrize("shape, kind", CASES)
def test_cripser_is_gudhi_cubical_vertices(shape, kind):
    """cripser.computePH(arr, maxdim=2) (V-construction) equals gudhi's
    CubicalComplex(vertices=arr), pair for pair, D0-D2, essential classes too."""
    nx, ny, nz = shape
    arr = field(shape, kind).reshape(nz, ny, nx)
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


@pytest.mark.parametrize("shape, kind", CASES)
def test_oineus_freudenthal_is_ours(shape, kind):
    """Oineus's lower star on the x-reversed array is our Freudenthal diagram
    (at this run's ranks): the same finite pairs D0-D2 and essential classes."""
    nx, ny, nz = shape
    f = field(shape, kind)
    dg = persistence_diagram(Grid(shape, COMM), f).gather()
    arr = np.ascontiguousarray(f.reshape(nz, ny, nx)[:, :, ::-1])
    ref = oineus.compute_diagrams_ls(arr, max_dim=2)
    for d in range(3):
        r = np.asarray(ref.in_dimension(d), dtype=np.float64).reshape(-1, 2)
        assert_equal_collective(finite_nonzero(dg.finite(d)), finite_nonzero(r),
                                err_msg="finite D%d" % d)
        assert_equal_collective(np.sort(dg.essential(d)), np.sort(r[np.isinf(r[:, 1]), 0]),
                                err_msg="essential D%d" % d)
    # the check has teeth: without the reversal the triangulations differ
    if kind == "noisy":
        plain = oineus.compute_diagrams_ls(np.ascontiguousarray(f.reshape(nz, ny, nx)), max_dim=2)
        same = all(np.array_equal(finite_nonzero(dg.finite(d)),
                                  finite_nonzero(plain.in_dimension(d))) for d in range(3))
        assert_equal_collective(same, False, err_msg="unreversed Oineus matched")
