"""The cells of a grid's cubical complex, as each rank sees them: the
geometry record every cubical kernel takes, the static tables of a vertex's
star, and the compiled helpers that name cells and read their pairing codes.

Cells live on the doubled grid (Khalimsky coordinates): the cell with
doubled coordinates ``c`` has the vertices ``c // 2`` and ``(c + 1) // 2``
along every axis, so its dimension is the number of odd coordinates and its
facets are ``c -+ 1`` along an odd one. A cell enters the filtration at the
largest value of its vertices (the V-construction) and belongs to the lower
star of its maximum vertex in the global ``(value, id)`` order. Cell ``2v +
delta`` (``delta`` in ``{-1, 0, 1}^3``) is named globally by its *code*
``v * SLOTS + k``, ``k = (dz+1)*9 + (dy+1)*3 + (dx+1)`` (``k = CENTRE``: the
vertex), and ordered by its *key* ``order(v) * SLOTS + step``, the step of
its lower star at which it was paired or made critical.

Each rank works on the doubled grid of its ghosted planes, with one byte per
cell for its pairing code and step (:func:`put`): 8 bytes per vertex in 3D.
A 2D grid ``(nx, ny)`` is handled as the 3D grid ``(1, nx, ny)``.
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import numpy as np

from dmsolve.jit import njit

__all__ = ["CubeGeometry", "cube_geometry", "star_tables", "UNKNOWN", "CRITICAL", "CENTRE",
           "SLOTS", "AXES", "code_vertex"]

UNKNOWN = -1        #: pairing code of a cell outside this rank's lower stars
CRITICAL = 0        #: pairing code of a critical cell; 1 + 2*axis + (sign > 0): the partner
CENTRE = 13         #: star offset of the vertex itself
#: Slots per vertex in cell codes and keys: the 27 star offsets (or the
#: steps of a lower star, fewer than 27), rounded up to a power of two
SLOTS = 32
#: star offsets of the six axis neighbours (the edges through the centre), and their bit mask
AXES = np.array([4, 10, 12, 14, 16, 22], np.int64)
AXMASK = sum(1 << int(k) for k in AXES)


class CubeGeometry(NamedTuple):
    """This rank's ghosted planes as a 3D box ``(Z, Y, X)`` of vertices and
    its doubled grid ``(2Z-1, DY, DX)``, the one record the cubical kernels
    take. Owned planes are ``oz0:oz1`` (local), ``g0`` the first ghosted
    plane, ``NZ`` the grid's planes, ``base`` the global id of local vertex 0."""

    X: int
    Y: int
    Z: int
    oz0: int
    oz1: int
    g0: int
    NZ: int
    DX: int
    DY: int
    DZ: int
    base: int


def cube_geometry(grid) -> CubeGeometry:
    """The :class:`CubeGeometry` of this rank's slab of ``grid``. Not collective."""
    shape = grid.shape if grid.dimension == 3 else (1,) + tuple(grid.shape)
    X, Y, NZ = int(shape[0]), int(shape[1]), int(shape[2])
    g0, g1 = grid.ghosted_planes
    p0, p1 = grid.owned_planes
    Z = g1 - g0
    return CubeGeometry(X, Y, Z, p0 - g0, p1 - g0, g0, NZ, 2 * X - 1, 2 * Y - 1,
                        max(2 * Z - 1, 0), g0 * X * Y)


def code_vertex(codes):
    """The global vertex id of cell codes (their top vertex). Not collective."""
    return codes // SLOTS



@functools.lru_cache(maxsize=None)
def star_tables():
    """Static tables over the 27 offsets ``k`` of a vertex's star (not collective):
    ``dim``, ``sub`` (the vertex offsets of the cell other than the centre),
    ``fac`` (facets through the centre), ``cof`` (cofacets through the
    centre), ``delta`` (dz, dy, dx), each list padded with -1."""
    deltas = list(itertools.product((-1, 0, 1), repeat=3))

    def index(d):
        return (d[0] + 1) * 9 + (d[1] + 1) * 3 + (d[2] + 1)

    dim = np.zeros(27, np.int64)
    sub = np.full((27, 7), -1, np.int64)
    fac = np.full((27, 3), -1, np.int64)
    cof = np.full((27, 6), -1, np.int64)
    for d in deltas:
        k = index(d)
        nz = [a for a in range(3) if d[a]]
        dim[k] = len(nz)
        subs = [e for e in itertools.product(*[(0, d[a]) if d[a] else (0,) for a in range(3)])
                if any(e)]
        sub[k, :len(subs)] = [index(e) for e in subs]
        if len(nz) >= 2:
            fac[k, :len(nz)] = [index(tuple(0 if b == a else d[b] for b in range(3)))
                                for a in nz]
        cofs = [index(tuple(s if b == a else d[b] for b in range(3)))
                for a in range(3) if not d[a] for s in (-1, 1)]
        cof[k, :len(cofs)] = cofs
    return dim, sub, fac, cof, np.array(deltas, np.int64)


# -- compiled helpers (not collective) -----------------------------------------------------------
@njit(cache=True, inline="always")
def cell_code(v, k):  # pragma: no cover
    """The code of the cell at star offset ``k`` of vertex ``v``."""
    return v * SLOTS + k


@njit(cache=True, inline="always")
def cell_key(order, step):  # pragma: no cover
    """The filtration key of a cell of the lower star of a vertex of order
    ``order``, assigned at step ``step`` of that lower star."""
    return order * SLOTS + step


@njit(cache=True, inline="always")
def _coords(q, DX, DY):  # pragma: no cover
    """Doubled (cz, cy, cx) of local cell position ``q``."""
    cx = q % DX
    r = q // DX
    return r // DY, r % DY, cx


@njit(cache=True, nogil=True)
def _top(O, q, X, Y, DX, DY):  # pragma: no cover
    """(local vertex index, star offset k, dimension) of the top vertex of the cell at ``q``."""
    cz, cy, cx = _coords(q, DX, DY)
    best = -1
    bv = -1
    bz = by = bx = 0
    for ez in range(2 if cz & 1 else 1):
        for ey in range(2 if cy & 1 else 1):
            for ex in range(2 if cx & 1 else 1):
                vz, vy, vx = (cz >> 1) + ez, (cy >> 1) + ey, (cx >> 1) + ex
                v = (vz * Y + vy) * X + vx
                if O[v] > best:
                    best, bv, bz, by, bx = O[v], v, vz, vy, vx
    k = (cz - 2 * bz + 1) * 9 + (cy - 2 * by + 1) * 3 + (cx - 2 * bx + 1)
    return bv, k, (cz & 1) + (cy & 1) + (cx & 1)


@njit(cache=True, inline="always")
def _stride(a, DX, DY):  # pragma: no cover
    return 1 if a == 0 else (DX if a == 1 else DX * DY)


@njit(cache=True, inline="always")
def _axis_sign(k):  # pragma: no cover
    """Axis (0 x, 1 y, 2 z) and sign of a star offset with one nonzero coordinate."""
    dz, dy, dx = k // 9 - 1, (k // 3) % 3 - 1, k % 3 - 1
    if dx != 0:
        return 0, dx
    if dy != 0:
        return 1, dy
    return 2, dz


# One byte per cell of the doubled grid: the pairing code + 1 in the low three
# bits (0: not in this rank's lower stars, 1: critical, 2..7: the partner's
# direction), the step of its lower star above them (below 27 in a 3D star).
@njit(cache=True, inline="always")
def _put(C, q, code, step):  # pragma: no cover
    """Record pairing code ``code`` and step ``step`` for the cell at ``q``."""
    C[q] = (step << 3) | (code + 1)


@njit(cache=True, inline="always")
def _code(C, q):  # pragma: no cover
    """The pairing code of the cell at ``q`` (UNKNOWN, CRITICAL or 1 + 2*axis + (sign > 0))."""
    return np.int64(C[q] & 7) - 1


@njit(cache=True, inline="always")
def _step(C, q):  # pragma: no cover
    """The step of its lower star at which the cell at ``q`` was assigned."""
    return np.int64(C[q] >> 3)


@njit(cache=True, nogil=True)
def cells_of(O, g, C, pos):  # pragma: no cover
    """(global code, dimension, filtration key) of the cells at local positions
    ``pos`` (cells of owned lower stars). Not collective."""
    X, Y = g.X, g.Y
    DX, DY = g.DX, g.DY
    base = g.base
    n = pos.shape[0]
    code = np.empty(n, np.int64)
    d = np.empty(n, np.int64)
    key = np.empty(n, np.int64)
    for i in range(n):
        v, k, dm = _top(O, pos[i], X, Y, DX, DY)
        code[i] = cell_code(base + v, k)
        d[i] = dm
        key[i] = cell_key(O[v], _step(C, pos[i]))
    return code, d, key


@njit(cache=True)
def cubical_from_global(g, cells):  # pragma: no cover
    """Local doubled positions of cells given by global doubled index."""
    shift = 2 * g.g0 * g.DY * g.DX
    out = np.empty(cells.shape[0], np.int64)
    for i in range(cells.shape[0]):
        out[i] = cells[i] - shift
    return out


@njit(cache=True, inline="always")
def _leave(O, g, q, cz_ok):  # pragma: no cover
    """Exit row fields ``(route vertex, global doubled index)`` of the local
    cell at ``q``: routed to the owner of its top vertex when the cell lies
    in this rank's doubled grid (``cz_ok``), else to the owner of its first
    vertex (whose ghost planes hold the whole cell)."""
    X, Y, g0 = g.X, g.Y, g.g0
    DX, DY = g.DX, g.DY
    base = g.base
    if cz_ok:
        v, k, dm = _top(O, q, X, Y, DX, DY)
        route = base + v
    else:
        cz, cy, cx = _coords_signed(q, DX, DY)
        route = base + ((cz >> 1) * Y + (cy >> 1)) * X + (cx >> 1)
    return route, q + 2 * g0 * DY * DX


@njit(cache=True, inline="always")
def _coords_signed(q, DX, DY):  # pragma: no cover
    """Doubled (cz, cy, cx) of a local position that may lie outside the
    local doubled grid along z (negative or past its end)."""
    plane = DX * DY
    cz = q // plane
    r = q - cz * plane
    return cz, r // DX, r % DX


