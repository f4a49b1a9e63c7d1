"""Serial brute-force references for the topology tests: TTK's triangulation
of a grid as explicit simplices, critical types from explicit vertex links,
components of a graph, and dense boundary matrices and Laplacians.

The references use explicit simplex lists and a union-find per vertex link:
the slow obvious way, independent of the distributed code's tables. The
references themselves are checked in tests/topology/core/test_stencils.py and
tests/topology/morse/test_critical.py.
"""

import itertools

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components as cc

CORNERS3 = {"a": (0, 0, 0), "b": (1, 0, 0), "c": (0, 1, 0), "d": (1, 1, 0),
            "e": (0, 0, 1), "f": (1, 0, 1), "g": (0, 1, 1), "h": (1, 1, 1)}
CORNERS2 = {"a": (0, 0), "b": (1, 0), "c": (0, 1), "d": (1, 1)}


def grid_cells(shape):
    """Explicit top simplices (vertex ids) of TTK's triangulation of a grid."""
    if len(shape) == 2:
        corners, cells = CORNERS2, ("abc", "bcd")
    else:
        corners, cells = CORNERS3, ("abcg", "bcdg", "abeg", "befg", "bfgh", "bdgh")
    strides = np.cumprod((1,) + tuple(shape[:-1]))
    out = []
    for origin in itertools.product(*[range(n - 1) for n in shape]):
        for cell in cells:
            ids = [int(np.dot(np.add(origin, corners[c]), strides)) for c in cell]
            out.append(sorted(ids))
    return np.array(out, dtype=np.int64)


def faces(cells, k):
    """All k-simplices (sorted rows, lexicographic order) of a list of cells."""
    rows = set()
    for c in cells:
        for f in itertools.combinations(sorted(c), k + 1):
            rows.add(f)
    return np.array(sorted(rows), dtype=np.int64).reshape(-1, k + 1)


class UnionFind:
    def __init__(self, items):
        self.parent = {i: i for i in items}

    def find(self, i):
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)

    def count(self):
        return len({self.find(i) for i in self.parent})


def reference_types(cells, values, nvertices):
    """TTK critical types of every vertex from explicit links (union-find)."""
    cells = [tuple(sorted(c)) for c in cells]
    dim = max(len(c) for c in cells) - 1
    vals = np.asarray(values, dtype=np.float64)

    def below(u, v):
        return (vals[u], u) < (vals[v], v)

    nbrs = {v: set() for v in range(nvertices)}
    link_edges = {v: set() for v in range(nvertices)}
    for c in cells:
        for e in itertools.combinations(c, 2):
            nbrs[e[0]].add(e[1])
            nbrs[e[1]].add(e[0])
        for t in itertools.combinations(c, 3):
            for i in range(3):
                v = t[i]
                link_edges[v].add(tuple(x for j, x in enumerate(t) if j != i))
    boundary = set()
    if dim == 3:
        count = {}
        for c in cells:
            for t in itertools.combinations(c, 3):
                count[t] = count.get(t, 0) + 1
        for t, m in count.items():
            if m == 1:
                boundary.update(t)
    types = np.empty(nvertices, dtype=np.int32)
    for v in range(nvertices):
        low = {u for u in nbrs[v] if below(u, v)}
        up = nbrs[v] - low
        ul, uu = UnionFind(low), UnionFind(up)
        for a, b in link_edges[v]:
            if a in low and b in low:
                ul.union(a, b)
            if a in up and b in up:
                uu.union(a, b)
        L, U = ul.count(), uu.count()
        if (L, U) == (0, 1):
            t = 0
        elif (L, U) == (1, 0):
            t = 3
        elif (L, U) == (1, 1):
            t = 5
            if dim == 3 and v in boundary:
                lb = any(u in boundary for u in low)
                ub = any(u in boundary for u in up)
                if ub and not lb:
                    t = 1
                elif lb and not ub:
                    t = 2
        elif dim <= 2:
            t = 1 if (L, U) in ((2, 1), (1, 2), (2, 2)) else 4
        else:
            t = {(2, 1): 1, (1, 2): 2}.get((L, U), 4)
        types[v] = t
    return types


def reference_critical(cells, values, nvertices):
    """``(ids, types)`` of the critical vertices, like ``CriticalPoints.gather``."""
    t = reference_types(cells, values, nvertices)
    ids = np.flatnonzero(t != 5)
    return ids, t[ids]


def reference_components(n, edges, keep=None):
    """Components of the graph on ``n`` vertices restricted to ``keep``, each
    named by its smallest vertex id; -1 for the vertices left out (scipy)."""
    keep = np.ones(n, bool) if keep is None else keep
    e = edges[keep[edges[:, 0]] & keep[edges[:, 1]]]
    g = sp.coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n))
    _, lab = cc(g, directed=False)
    first = np.full(lab.max() + 1, n)
    np.minimum.at(first, lab, np.arange(n))
    return np.where(keep, first[lab], -1)


def serial_boundaries(cx):
    """Dense B1 (vertices x edges) and B2 (edges x triangles) from the simplex lists."""
    E, T = cx.simplices(1), cx.simplices(2)
    nv = int(E.max()) + 1
    B1 = np.zeros((nv, len(E)))
    B1[E[:, 0], np.arange(len(E))] = -1.0
    B1[E[:, 1], np.arange(len(E))] = 1.0
    index = {tuple(e): i for i, e in enumerate(E)}
    B2 = np.zeros((len(E), len(T)))
    for j, (a, b, c) in enumerate(T):
        B2[index[(b, c)], j] += 1.0
        B2[index[(a, c)], j] -= 1.0
        B2[index[(a, b)], j] += 1.0
    return B1, B2


def serial_parts(cx):
    """The dense down and up parts ``B1^T B1`` and ``B2 B2^T`` of the edge Laplacian."""
    B1, B2 = serial_boundaries(cx)
    return B1.T @ B1, B2 @ B2.T
