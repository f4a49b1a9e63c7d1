"""Serial brute-force references for the topology tests, and checks of the
references themselves against networkx and by hand.

The references use explicit simplex lists and a union-find per vertex link:
the slow obvious way, independent of the distributed code's tables.
"""

import itertools

import numpy as np

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


# -- checks of the references themselves ---------------------------------------------------
def test_grid_cells_counts_and_euler():
    for shape in [(3, 4), (3, 4, 5)]:
        cells = grid_cells(shape)
        ncubes = int(np.prod([n - 1 for n in shape]))
        assert len(cells) == (2 if len(shape) == 2 else 6) * ncubes
        chi = sum((-1) ** k * len(faces(cells, k)) for k in range(len(shape) + 1))
        assert chi == 1  # a triangulated box is contractible


def test_reference_types_by_hand():
    # a fan of triangles around vertex 0 (a disk): a saddle value pattern
    cells = [(0, 1, 2), (0, 2, 3), (0, 3, 4), (0, 4, 1)]
    values = [0.0, -1.0, 1.0, -1.0, 1.0]
    assert reference_types(cells, values, 5)[0] == 1       # (L, U) = (2, 2)
    values = [0.0, 1.0, 2.0, 3.0, 4.0]
    assert reference_types(cells, values, 5)[0] == 0


def test_reference_link_components_match_networkx():
    import networkx as nx
    rng = np.random.default_rng(1)
    shape = (4, 3, 3)
    cells = grid_cells(shape)
    values = rng.integers(0, 3, size=int(np.prod(shape))).astype(float)
    g = nx.Graph()
    for c in cells:
        g.add_edges_from(itertools.combinations(c, 2))
    v = 13  # an interior vertex (1, 1, 1) + ... ids within range
    low = [u for u in g[v] if (values[u], u) < (values[v], v)]
    sub = nx.Graph()
    sub.add_nodes_from(low)
    for c in cells:
        if v in c:
            rest = [u for u in c if u != v]
            sub.add_edges_from((a, b) for a, b in itertools.combinations(rest, 2)
                               if a in low and b in low)
    uf = UnionFind(low)
    for a, b in sub.edges:
        uf.union(a, b)
    assert uf.count() == nx.number_connected_components(sub)
