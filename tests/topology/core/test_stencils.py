"""The grid stencils of TTK's Freudenthal triangulation (link structure and
link component table) against explicit simplices, and the explicit reference
triangulation itself."""

import numpy as np

from topology import component_table, link_structure
from topology_reference import faces, grid_cells


def test_link_structure_matches_explicit_cells():
    """A vertex's stencil neighbours and link edges are those of the explicit
    triangulation (degree 6 in 2D, 14 in 3D)."""
    for shape, degree in (((5, 5), 6), ((5, 5, 5), 14)):
        cells = grid_cells(shape)
        edges = faces(cells, 1)
        centre = int(np.ravel_multi_index(tuple(n // 2 for n in shape[::-1]), shape[::-1]))
        nbrs = sorted(set(edges[edges[:, 0] == centre, 1]) | set(edges[edges[:, 1] == centre, 0]))
        offsets, link = link_structure(len(shape))
        strides = np.cumprod((1,) + shape[:-1])
        assert sorted(centre + offsets @ strides) == nbrs
        assert len(nbrs) == degree
        # link edges are the triangles through the centre
        tris = faces(cells, 2)
        mine = {tuple(sorted(set(t) - {centre})) for t in tris if centre in t}
        ids = centre + offsets @ strides
        assert {tuple(sorted((ids[a], ids[b]))) for a, b in link} == mine


def test_component_table_small_cases():
    """The component table counts the link components of a few neighbour sets
    known by hand."""
    t = component_table(3)
    assert t.size == 2 ** 14 and t[0] == 0 and t[1] == 1 and t[-1] == 1
    offsets, link = link_structure(2)
    t2 = component_table(2)
    # opposite neighbours (1,0) and (-1,0) are not joined in the link
    i, j = [int(np.flatnonzero((offsets == o).all(1))[0]) for o in ((1, 0), (-1, 0))]
    assert t2[(1 << i) | (1 << j)] == 2


def test_reference_triangulation_counts_and_euler():
    """The reference triangulation (tests/topology_reference.py) has 2 or 6
    simplices per grid cell and the Euler characteristic of a box."""
    for shape in [(3, 4), (3, 4, 5)]:
        cells = grid_cells(shape)
        ncubes = int(np.prod([n - 1 for n in shape]))
        assert len(cells) == (2 if len(shape) == 2 else 6) * ncubes
        chi = sum((-1) ** k * len(faces(cells, k)) for k in range(len(shape) + 1))
        assert chi == 1  # a triangulated box is contractible
