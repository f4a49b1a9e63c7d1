"""Star tables: the star of every owned vertex, packed for the compiled kernels.

On a grid the star is a fixed stencil (14 neighbours, 36 triangles, 24
tetrahedra around a vertex in 3D; 6, 6, 0 in 2D) applied at the vertex's
position in the padded ghosted array; on an explicit complex it is CSR lists.
Cells are named by their maximum vertex (in the global order) and their slot
in that vertex's star, so the lower star of a vertex owns each of its cells
exactly once. Every function here reads this rank's tables only.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dmsolve.jit import njit

__all__ = ["StarTable", "GRID", "COMPLEX"]

GRID = 0        #: ``StarTable.mode`` of a grid: stencil tables, neighbour = position + offset
COMPLEX = 1     #: ``StarTable.mode`` of a complex: CSR star lists


class StarTable(NamedTuple):
    """The star tables of this rank's owned vertices as one record, which the
    numba kernels take as a single argument. Not collective.

    Positions index the padded ghosted grid (mode ``GRID``) or the ghosted
    vertices of a complex (mode ``COMPLEX``).

    Attributes
    ----------
    mode : int
        ``GRID`` or ``COMPLEX``.
    O : int64 array
        Global order at each position (-1 for padding).
    P : int64 array
        Position of each owned vertex.
    own : int64 array
        Owned index at each position (-1 when another rank owns it).
    layout_index : int64 array
        Vertex layout index at each position (-1 for padding).
    doff : int64 array
        Grid: position offset of each stencil neighbour.
    eptr, enb : int64 arrays
        Star edges of owned vertex ``i``: slots ``0 .. eptr[i+1]-eptr[i]``;
        on a complex ``enb[eptr[i] + j]`` is the neighbour's position.
    tptr, ttab : int64 arrays
        Star triangles: the two neighbour slots of each (grid: one stencil row
        per slot; complex: row ``tptr[i] + t``).
    qptr, qtab, qface : int64 arrays
        Star tetrahedra: three neighbour slots each, and the triangle slots
        of their three faces through the centre.
    """

    mode: int
    O: np.ndarray
    P: np.ndarray
    own: np.ndarray
    layout_index: np.ndarray
    doff: np.ndarray
    eptr: np.ndarray
    enb: np.ndarray
    tptr: np.ndarray
    ttab: np.ndarray
    qptr: np.ndarray
    qtab: np.ndarray
    qface: np.ndarray


# The kernels unpack the record once, at their top, and the helpers they call
# at every step of a loop take the arrays they read: each read of a record
# field costs numba a reference count, which inside those loops made the
# lower-star kernel and the tet paths about 30 % slower (noisy 64^3 field).
# The helpers that locate a cell in another vertex's star (once per star
# crossed) take the record.
@njit(cache=True, inline="always")
def nbr_pos(mode, P, doff, eptr, enb, i, j):  # pragma: no cover
    """Position of neighbour slot ``j`` of owned vertex ``i``. Not collective."""
    if mode == GRID:
        return P[i] + doff[j]
    return enb[eptr[i] + j]


@njit(cache=True, inline="always")
def tri_nb(mode, tptr, ttab, i, t):  # pragma: no cover
    """The two neighbour slots of triangle slot ``t`` of owned vertex ``i``. Not collective."""
    k = t if mode == GRID else tptr[i] + t
    return ttab[k, 0], ttab[k, 1]


@njit(cache=True, inline="always")
def tet_nb(mode, qptr, qtab, i, t):  # pragma: no cover
    """The three neighbour slots of tetrahedron slot ``t`` of owned vertex ``i``. Not collective."""
    k = t if mode == GRID else qptr[i] + t
    return qtab[k, 0], qtab[k, 1], qtab[k, 2]


@njit(cache=True)
def edge_slot(st, i, pos):  # pragma: no cover
    """Neighbour slot of position ``pos`` in the star of owned vertex ``i``,
    or -1. Not collective."""
    mode, P, doff, eptr, enb = st.mode, st.P, st.doff, st.eptr, st.enb
    for j in range(eptr[i + 1] - eptr[i]):
        if nbr_pos(mode, P, doff, eptr, enb, i, j) == pos:
            return j
    return -1


@njit(cache=True)
def find_tet(st, i, a, b, c):  # pragma: no cover
    """Slot of the tetrahedron of owned vertex ``i``'s star spanned by
    neighbour slots ``a``, ``b``, ``c`` (any order), or -1. Not collective."""
    mode, qptr, qtab = st.mode, st.qptr, st.qtab
    for t in range(qptr[i + 1] - qptr[i]):
        u, v, w = tet_nb(mode, qptr, qtab, i, t)
        if (u == a or v == a or w == a) and (u == b or v == b or w == b) and \
                (u == c or v == c or w == c):
            return t
    return -1


@njit(cache=True)
def tet_slot(st, j, pa, pb, pc):  # pragma: no cover
    """Slot of the tetrahedron ``(top, pa, pb, pc)`` in the star of its top
    vertex, owned index ``j``, from the positions of its other three
    vertices. Not collective."""
    return find_tet(st, j, edge_slot(st, j, pa), edge_slot(st, j, pb), edge_slot(st, j, pc))


@njit(cache=True)
def tet_cofacets(mode, qptr, qtab, i, a, b, skip):  # pragma: no cover
    """The tets of owned vertex ``i``'s star that contain neighbour slots
    ``a`` and ``b``, other than slot ``skip``: up to two ``(slot, third
    neighbour)``, -1 where there is none. Not collective."""
    s1, w1, s2, w2 = -1, -1, -1, -1
    for t2 in range(qptr[i + 1] - qptr[i]):
        if t2 == skip:
            continue
        x, y, z = tet_nb(mode, qptr, qtab, i, t2)
        hit = 0
        s = -1
        if x == a or x == b:
            hit += 1
        else:
            s = x
        if y == a or y == b:
            hit += 1
        else:
            s = y
        if z == a or z == b:
            hit += 1
        else:
            s = z
        if hit == 2:
            if s1 < 0:
                s1, w1 = t2, s
            else:
                s2, w2 = t2, s
    return s1, w1, s2, w2


@njit(cache=True)
def locate_tets(st, rows):  # pragma: no cover
    """Star slots of tets given as rows (owned top position, three more
    positions). Not collective."""
    own = st.own
    out = np.empty(rows.shape[0], np.int64)
    for k in range(rows.shape[0]):
        out[k] = tet_slot(st, own[rows[k, 0]], rows[k, 1], rows[k, 2], rows[k, 3])
    return out


@njit(cache=True)
def locate_edges(st, top, other):  # pragma: no cover
    """Star slots of edges given as owned top position and other position.
    Not collective."""
    own = st.own
    out = np.empty(top.shape[0], np.int64)
    for k in range(top.shape[0]):
        out[k] = edge_slot(st, own[top[k]], other[k])
    return out
