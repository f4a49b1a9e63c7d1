"""Hodge decomposition of an edge flow on a triangle mesh with holes, plotted.

Run it with

    mpiexec -n 4 python -m mpi4py examples/hodge.py --n 24 --out hodge.png
    mpiexec -n 4 python -m mpi4py examples/hodge.py --partition metis

The mesh is a triangulated square with two holes (beta_1 = 2). A flow made
of a gradient, a rotation and random noise is split into
``f = B1^T p + B2 w + h``: gradient, curl and harmonic parts, each found by
CG on a singular consistent system (AMG preconditioner, the constant null
space of the graph Laplacian projected out; the curl system in coherently
oriented form). Rank 0 plots the three parts as arrows at the edge midpoints.
The vertices may be split into id blocks, METIS parts or coordinate
bisection (``--partition``): only ownership changes, the global edge ids and
the decomposition do not.
"""

import argparse

import numpy as np
from mpi4py import MPI

from topology import SimplicialComplex, betti_numbers, hodge_decomposition


def holey_square(n: int):
    """Triangles of an n x n grid (TTK diagonal) minus two square holes."""
    xs, ys = np.meshgrid(np.arange(n), np.arange(n))
    points = np.column_stack((xs.ravel(), ys.ravel())).astype(float)
    vid = lambda x, y: x + y * n
    tris = []
    holes = [(n // 4, n // 4, n // 5), (n // 2 + 1, n // 2, n // 5)]
    for y in range(n - 1):
        for x in range(n - 1):
            if any(hx <= x < hx + s and hy <= y < hy + s for hx, hy, s in holes):
                continue
            a, b, c, d = vid(x, y), vid(x + 1, y), vid(x, y + 1), vid(x + 1, y + 1)
            tris += [(a, b, c), (b, d, c)]
    tris = np.array(tris)
    used, tris = np.unique(tris, return_inverse=True)
    return points[used], tris.reshape(-1, 3)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=24, help="grid points per side")
    p.add_argument("--pc", default="amg", help="preconditioner: amg or jacobi")
    p.add_argument("--partition", default="block", help="block, metis or rcb")
    p.add_argument("--out", default="hodge.png", help="PNG file to write")
    return p.parse_args(argv)


def main(comm: MPI.Comm, argv=None) -> dict:
    """Run the example; ``argv`` is an argv list (``None``: the command line).
    Collective on ``comm``. Returns the Betti numbers and the energies."""
    args = parse_args(argv)

    points, tris = holey_square(args.n)
    # each rank passes a share of the triangles; the complex is their union
    cx = SimplicialComplex([tris[comm.rank::comm.size]], comm, points=points,
                           partition=args.partition)
    edges = cx.simplices(1)
    mid = points[edges].mean(axis=1)
    tangent = points[edges[:, 1]] - points[edges[:, 0]]
    centre = points.mean(axis=0)
    potential = np.sin(points[:, 0] / 4.0) + points[:, 1] / args.n
    rotation = np.column_stack((-(mid[:, 1] - centre[1]), mid[:, 0] - centre[0])) / args.n
    noise = np.random.default_rng(1).standard_normal(len(edges)) * 0.2
    flow = (potential[edges[:, 1]] - potential[edges[:, 0]]
            + np.sum(rotation * tangent, axis=1) + noise)

    hd = hodge_decomposition(cx, flow, rtol=1e-10, pc=args.pc)
    betti = betti_numbers(cx)
    # DistVectors are in partition order; gather_global puts them in edge-id order
    parts = {name: cx.gather_global(getattr(hd, name), 1, root=0)
             for name in ("gradient", "curl", "harmonic")}
    if comm.rank == 0:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        unit = tangent / np.linalg.norm(tangent, axis=1)[:, None]
        fig, axes = plt.subplots(1, 3, figsize=(15, 5))
        for ax, (name, vals) in zip(axes, parts.items()):
            ax.triplot(points[:, 0], points[:, 1], tris, lw=0.2, color="0.8")
            v = unit * vals[:, None]
            ax.quiver(mid[:, 0], mid[:, 1], v[:, 0], v[:, 1], vals, cmap="coolwarm")
            ax.set_title("%s: energy %.3g" % (name, hd.energies[name]))
            ax.set_aspect("equal")
            ax.axis("off")
        fig.suptitle("Hodge decomposition, beta = %s, %d ranks" % (betti, comm.size))
        fig.savefig(args.out, dpi=100)
        plt.close(fig)
        e = hd.energies
        print("betti numbers %s" % betti)
        print("energies: gradient %.6g + curl %.6g + harmonic %.6g = %.6g (||f||^2 = %.6g)"
              % (e["gradient"], e["curl"], e["harmonic"],
                 e["gradient"] + e["curl"] + e["harmonic"], e["total"]))
        print("CG iterations: %s" % {k: v.iterations for k, v in hd.infos.items()})
        print("wrote %s" % args.out)
    return {"betti": betti, "energies": hd.energies}


if __name__ == "__main__":
    main(MPI.COMM_WORLD)

# Things to try
# -------------
# - Drop the noise: the harmonic part then comes only from the flow around the holes.
# - ``--pc jacobi``: more CG iterations (hd.infos), the same decomposition.
# - ``--partition metis`` or ``rcb``: other owners, the same energies.
# - Fill the holes (no holes list): beta_1 = 0 and the harmonic energy vanishes.
