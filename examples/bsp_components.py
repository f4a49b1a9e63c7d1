"""Connected components of a distributed graph, Pregel style, on dmsolve.bsp.

Run it with

    mpiexec -n 4 python -m mpi4py examples/bsp_components.py

Every vertex starts with its own global id as label and sends it to its
neighbours; a vertex that receives a smaller label adopts it and passes it on.
Labels travel with ``send_keyed(..., op="min")``, so a rank sends at most one
label per target vertex per superstep (the min combiner); vertices whose label
did not change stay silent, and the run halts when no label moved anywhere
(no votes, no messages in flight). Each component ends up labelled with its
smallest global vertex id.

The default graph is random but has known components: vertex ``v`` belongs to
class ``v % k``, every vertex links to a random earlier vertex of its class (a
random spanning tree per class) plus ``--extra`` random edges inside it. The
graph is the same at any rank count. ``--edges FILE`` reads an edge list
("u v" per line) instead. Small graphs are checked against
``scipy.sparse.csgraph.connected_components`` on rank 0.

References
----------
G. Malewicz et al., "Pregel: a system for large-scale graph processing",
SIGMOD 2010 (the min-label example is the paper's connected components).
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from dmsolve import Layout
from dmsolve.bsp import BSP, probe

EDGES, LABELS = 1, 2      # message tags
BLOCK = 4096              # vertices per random block: the graph is the same at any rank count


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", "--vertices", type=int, default=None,
                   help="number of vertices (random graph: 100000; with --edges: max id + 1)")
    p.add_argument("-k", "--components", type=int, default=10,
                   help="number of components of the random graph")
    p.add_argument("--extra", type=int, default=1,
                   help="extra random edges per vertex inside its component")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--edges", metavar="FILE", help="read 'u v' lines instead of a random graph")
    p.add_argument("--check-max", type=int, default=200_000,
                   help="check against scipy on rank 0 when there are at most this many vertices")
    p.add_argument("--probe", action="store_true",
                   help="measure g and l and print the BSP prediction W + g*H + l*S")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    return p.parse_args(argv)


def random_edges(n: int, k: int, extra: int, seed: int, start: int, stop: int) -> np.ndarray:
    """Edges ``(v, w)`` of the owned vertices ``start <= v < stop``. Not collective.

    Vertex ``v`` links to a random earlier vertex of class ``v % k`` (so the
    classes are exactly the components) and to ``extra`` random vertices of its
    class. Randomness is drawn per block of ``BLOCK`` vertices from
    ``(seed, block)``, so the graph does not depend on the number of ranks.
    """
    out = []
    if stop <= start:
        return np.zeros((0, 2), dtype=np.int64)
    for b in range(start // BLOCK, (stop - 1) // BLOCK + 1):
        lo, hi = b * BLOCK, min((b + 1) * BLOCK, n)
        rng = np.random.default_rng([seed, b])
        v = np.arange(lo, hi)
        r_parent = rng.random(v.size)
        r_extra = rng.random((extra, v.size))
        keep = (v >= start) & (v < stop)
        cls = v % k
        tree = v >= k                                   # the first vertex of a class is its root
        parent = v - k * (1 + np.floor(r_parent * (v // k)).astype(np.int64))
        out.append(np.stack((v, parent), axis=1)[keep & tree])
        class_size = (n - 1 - cls) // k + 1
        for r in r_extra:
            w = cls + k * np.floor(r * class_size).astype(np.int64)
            out.append(np.stack((v, w), axis=1)[keep & (w != v)])
    return np.concatenate(out)


def read_edges(path: str, comm: MPI.Comm) -> np.ndarray:
    """Every rank reads the file and keeps every ``size``-th edge. Not collective."""
    edges = np.loadtxt(path, dtype=np.int64, comments="#", ndmin=2).reshape(-1, 2)
    return edges[comm.rank::comm.size]


def distribute(ctx: BSP, layout: Layout, edges: np.ndarray):
    """One superstep: each edge ``(u, v)`` goes to the owners of ``u`` and ``v``.

    Returns the local adjacency as CSR arrays ``(indptr, neighbours)`` over
    the owned vertices (global neighbour ids).
    """
    both = np.concatenate((edges, edges[:, ::-1]))
    ctx.send_rows(layout.owner(both[:, 0]), both, tag=EDGES)
    adj = ctx.sync("distribute edges").concat(EDGES, dtype=np.int64, shape=(2,))
    u = adj[:, 0] - layout.start
    order = np.argsort(u, kind="stable")
    indptr = np.zeros(layout.local_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=layout.local_size), out=indptr[1:])
    return indptr, adj[order, 1]


def min_label(ctx: BSP, layout: Layout, indptr: np.ndarray, neighbours: np.ndarray):
    """Pregel min-label propagation; returns (labels of owned vertices,
    supersteps, label changes per superstep). Collective on ``ctx.comm``."""
    start = layout.start
    labels = np.arange(start, layout.stop, dtype=np.int64)
    changed = np.ones(layout.local_size, dtype=bool)          # everyone speaks first
    edge_source = np.repeat(np.arange(layout.local_size), np.diff(indptr))
    history = []

    def compute(ctx, inbox):
        if ctx.step > first_step:
            history.append(int(inbox.aggregates["changed"]))
            keys, best = inbox.reduced(LABELS, "min", dtype=np.int64)
            local = keys - start
            better = best < labels[local]
            changed[:] = False
            changed[local[better]] = True
            labels[local[better]] = best[better]
        # only vertices whose label moved tell their neighbours; the min
        # combiner sends one label per target vertex and rank
        speak = changed[edge_source]
        ctx.send_keyed(LABELS, neighbours[speak], labels[edge_source[speak]], layout, op="min")
        ctx.aggregate("changed", "sum", np.count_nonzero(changed))
        # no vote: a vertex stays active only as long as messages reach it

    first_step = ctx.step
    steps = ctx.run(compute, label="min-label")
    return labels, steps, history


def check_with_scipy(comm, n, edges, labels) -> bool:
    """Gather the graph on rank 0 and compare with scipy; the verdict is
    broadcast. Collective on ``comm``."""
    all_edges = comm.gather(edges, root=0)
    all_labels = comm.gather(labels, root=0)
    ok = None
    if comm.rank == 0:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import connected_components
        e = np.concatenate(all_edges)
        g = sp.coo_matrix((np.ones(len(e)), (e[:, 0], e[:, 1])), shape=(n, n)).tocsr()
        ncomp, comp = connected_components(g, directed=False)
        smallest = np.full(ncomp, n, dtype=np.int64)
        np.minimum.at(smallest, comp, np.arange(n))
        ok = bool(np.array_equal(np.concatenate(all_labels), smallest[comp]))
    return comm.bcast(ok, root=0)


def main(comm: MPI.Comm, argv=None) -> dict:
    """Run the example; ``argv`` is an argv list (``None``: the command line).
    Collective on ``comm``. Returns this rank's share of the result."""
    opts = parse_args(argv)
    if opts.edges:
        edges = read_edges(opts.edges, comm)
        # every rank read the same file, so every rank reaches the same verdict
        if comm.allreduce(bool(edges.size and edges.min() < 0), op=MPI.LOR):
            raise ValueError("%s: vertex ids must be non-negative" % opts.edges)
        n = max(opts.vertices or 0,
                comm.allreduce(int(edges.max()) + 1 if edges.size else 0, op=MPI.MAX))
        layout = Layout.block(n, comm)
    else:
        n = 100_000 if opts.vertices is None else opts.vertices
        if opts.components < 1 or n < 0:
            raise ValueError("need --components >= 1 and --vertices >= 0")
        layout = Layout.block(n, comm)
        edges = random_edges(n, opts.components, opts.extra, opts.seed, *layout.owned_range)

    ctx = BSP(comm)
    t0 = MPI.Wtime()
    indptr, neighbours = distribute(ctx, layout, edges)
    labels, steps, history = min_label(ctx, layout, indptr, neighbours)
    # one aggregator-only superstep: a component is counted at its smallest vertex
    ctx.aggregate("roots", "sum", np.count_nonzero(labels == np.arange(*layout.owned_range)))
    ctx.aggregate("edges", "sum", edges.shape[0])
    totals = ctx.sync("count").aggregates
    seconds = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    ncomp, nedges = int(totals["roots"]), int(totals["edges"])

    known = None
    if not opts.edges:      # the random graph's components are the classes v % k
        known = comm.allreduce(bool(np.array_equal(
            labels, np.arange(*layout.owned_range) % opts.components)), op=MPI.LAND)
    checked = check_with_scipy(comm, n, edges, labels) if n <= opts.check_max else None
    params = probe(comm) if opts.probe else None
    table = ctx.ledger.table(params)

    if comm.rank == 0 and not opts.quiet:
        print("connected components of a graph with %d vertices and %d edges on %d ranks"
              % (n, nedges, comm.size))
        print("components: %d   min-label supersteps: %d   time: %.3f s"
              % (ncomp, steps, seconds))
        print("vertices that sent their label, per superstep:", history)
        if known is not None:
            print("labels are the smallest vertex id of each known component:",
                  "OK" if known else "WRONG")
        print("check against scipy.sparse.csgraph.connected_components:",
              {True: "OK", False: "WRONG", None: "skipped (graph larger than --check-max)"}[checked])
        print(table)
    if known is False or checked is False:
        raise RuntimeError("connected components disagree with the reference")
    return {"labels": labels, "layout": layout, "edges": edges, "components": ncomp,
            "supersteps": steps, "checked": checked, "known": known}


if __name__ == "__main__":
    main(MPI.COMM_WORLD)

# Things to try
# -------------
# - Compare rank counts: `mpiexec -n 1`, `-n 2`, `-n 3`; labels, components and
#   supersteps are identical, only the ledger's h-relation and times change.
# - `--extra 0` leaves one random tree per component: deeper trees, more
#   supersteps (min-label needs about one superstep per hop of the diameter).
# - `--probe` measures g and l and prints the predicted W + g*H + l*S next to
#   the measured time.
# - Pass `combine=False` to `send_keyed` in `min_label` and watch the h column
#   of the ledger grow: the min combiner is what keeps messages per rank small.
# - Replace min-label by pointer jumping (each vertex asks its label's label):
#   O(log diameter) supersteps instead of O(diameter).
# - `--edges FILE` with a SNAP edge list ("u v" lines, '#' comments).
