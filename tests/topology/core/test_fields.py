"""Vertex fields at the door: the forms a field may take (global array, image
array, DistVector), the axis order of grid fields, and bad values refused on
every rank."""

import numpy as np
import pytest
from mpi4py import MPI

import gudhi_ref
from dmsolve import DistVector
from mpitest import assert_equal_collective, assert_raises_collective
from topology import (Grid, SimplicialComplex, connected_components, critical_points,
                      discrete_gradient, merge_tree, persistence_diagram)
from topology_cases import assert_same_diagram, my_share, random_field
from topology_reference import grid_cells, reference_critical

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("shape", [(5, 5), (4, 5, 4), (4, 6), (3, 4, 5)],
                         ids=["square", "palindrome-3d", "rect", "box"])
def test_field_axis_order_is_explicit(shape):
    """A grid field given as values[x, y(, z)], values[z, y, x], flat or in
    any axis permutation gives the same answers in every analysis when its
    axes are named, and a field whose two readings look alike is refused
    unless they are."""
    g = Grid(shape, COMM)
    rng = np.random.default_rng(4)
    flat = rng.permutation(g.global_num_vertices).astype(float)   # no ties
    image = flat.reshape(shape[::-1])                 # values[z, y, x]
    ij = image.T                                      # values[x, y, z]
    xyz, zyx = "xyz"[:len(shape)], "xyz"[:len(shape)][::-1]
    want = reference_critical(grid_cells(shape), flat, flat.size)
    for arr, axes in ((ij, xyz), (image, zyx), (flat, None)):
        ids, types = critical_points(g, arr, axes=axes).gather()
        assert_equal_collective(ids, want[0], err_msg=str(axes))
        assert_equal_collective(types, want[1], err_msg=str(axes))
    # any permutation: values[y, x(, z)]
    perm = "yx" if len(shape) == 2 else "yxz"
    arr = np.transpose(ij, [xyz.index(a) for a in perm])
    assert_equal_collective(critical_points(g, arr, axes=perm).gather()[1], want[1])
    ref = gudhi_ref.diagram(gudhi_ref.grid_simplices(shape), flat)
    assert_same_diagram(persistence_diagram(g, ij, axes=xyz), ref, len(shape))
    assert_equal_collective(merge_tree(g, ij, axes=xyz).gather().arcs,
                            merge_tree(g, flat).gather().arcs)
    assert_equal_collective(discrete_gradient(g, ij, axes=xyz).critical_counts(),
                            discrete_gradient(g, flat).critical_counts())
    t = float(np.median(flat))
    assert_equal_collective(connected_components(g, ij, t, axes=xyz).gather(),
                            connected_components(g, flat, t).gather())
    if tuple(shape) == tuple(shape[::-1]):
        # the two orders look alike: never guessed
        for arr in (image, ij):
            assert_raises_collective(COMM, ValueError, critical_points, g, arr,
                                     match="reads the same .* axes=")
    else:
        assert_equal_collective(critical_points(g, image).gather()[1], want[1])
        assert_raises_collective(COMM, ValueError, critical_points, g, ij,
                                 match="pass axes=%r" % xyz)


def test_bad_axes_are_refused():
    """Axes that are no permutation, of the wrong length or type, that do not
    fit the field's shape, or given for a complex are refused on every rank."""
    g2, g3 = Grid((4, 4), COMM), Grid((3, 4, 5), COMM)
    f2, f3 = np.zeros((4, 4)), np.zeros((5, 4, 3))
    cx = SimplicialComplex([my_share(np.array([[0, 1, 2]]))], COMM)
    for call, exc, match in (
            (lambda: critical_points(g2, f2, axes="xx"), ValueError, "permutation|axes must"),
            (lambda: critical_points(g2, f2, axes="xyz"), ValueError, "2 axes"),
            (lambda: critical_points(g2, f2, axes=1), TypeError, "axes must be None or a str"),
            (lambda: critical_points(g3, f3, axes="xyz"), ValueError, r"shape \(3, 4, 5\)"),
            (lambda: critical_points(g3, np.zeros((60, 1)), axes=None), ValueError, "3-D"),
            (lambda: critical_points(cx, np.zeros(3), axes="xy"), ValueError, "Grid"),
            (lambda: persistence_diagram(g2, f2, axes="YX"), ValueError, "axes must")):
        assert_raises_collective(COMM, exc, call, match=match)


def test_critical_points_input_forms_agree():
    """A flat global array, the image-shaped array and a DistVector give the
    same critical points."""
    shape = (5, 6, 7)
    fld = random_field(shape, 7)
    g = Grid(shape, COMM)
    a = critical_points(g, fld).gather()
    b = critical_points(g, fld.reshape(shape[::-1])).gather()
    c = critical_points(g, DistVector.from_global(fld, g.vertex_layout)).gather()
    for other in (b, c):
        assert_equal_collective(other[0], a[0])
        assert_equal_collective(other[1], a[1])


def test_critical_points_refuse_bad_fields():
    """A NaN, a field of the wrong size, and a size that differs between
    ranks are refused on every rank."""
    g = Grid((4, 5), COMM)
    bad = np.zeros(20)
    bad[7] = np.nan
    assert_raises_collective(COMM, ValueError, critical_points, g, bad, match="finite")
    assert_raises_collective(COMM, ValueError, critical_points, g, np.zeros(19), match="shape")
    local_only = np.zeros(20) if COMM.rank else np.zeros(21)
    assert_raises_collective(COMM, ValueError, critical_points, g, local_only)


def test_analyses_refuse_bad_fields():
    """Merge trees and the discrete gradient refuse a NaN and a field of the
    wrong shape on every rank."""
    g = Grid((4, 5), COMM)
    f = np.arange(20.0)
    nan = f.copy()
    nan[7] = np.nan
    cases = [
        (lambda: merge_tree(g, nan), ValueError, "finite"),
        (lambda: discrete_gradient(g, nan), ValueError, "finite"),
        (lambda: discrete_gradient(g, f[:-1]), ValueError, r"shape \(19,\)"),
    ]
    for call, exc, match in cases:
        assert_raises_collective(COMM, exc, call, match=match)
