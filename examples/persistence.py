"""Persistence diagram of a noisy 3D field: plot, simplification report, VTU.

Run it with

    mpiexec -n 2 python -m mpi4py examples/persistence.py --n 32 --noise 0.2 --out out/persistence

A few Gaussian bumps and dips plus uniform noise on an n x n x n grid (TTK's
Freudenthal triangulation, slabs of z-planes per rank). The lower-star
persistence diagram has D0 (minimum-saddle), D1 (saddle-saddle) and D2
(saddle-maximum) pairs; the noise makes thousands of short pairs near the
diagonal, and ``--min-persistence`` keeps only the features that stand out.
Writes ``OUT.png`` (the diagram), ``OUT.csv`` (the kept pairs) and
``OUT.vtu`` (the critical vertices of the kept pairs, with TTK's array
names: CriticalType, PairIdentifier, PairType, Persistence, ...).
"""

import argparse
import os

import numpy as np
from mpi4py import MPI

from dmsolve import DistVector
from topology import Grid, persistence_diagram


def noisy_field(grid: Grid, bumps: int, noise: float, seed: int) -> DistVector:
    """This rank's slab of a sum of Gaussians plus uniform noise."""
    n = np.array(grid.shape)
    rng = np.random.default_rng(seed)        # the same centres on every rank
    centres = rng.random((bumps, 3)) * (n - 1)
    heights = rng.choice([-1.0, 1.0], bumps) * rng.uniform(0.5, 1.5, bumps)
    width = 0.12 * n.min()
    lay = grid.vertex_layout
    ids = np.arange(lay.start, lay.stop)
    xyz = grid.coordinates(ids).astype(np.float64)
    f = np.zeros(lay.local_size)
    for c, h in zip(centres, heights):
        f += h * np.exp(-np.sum((xyz - c) ** 2, axis=1) / (2 * width ** 2))
    # noise from a generator keyed by vertex id: the field is rank-independent
    f += noise * np.random.default_rng([seed, 1]).random(grid.global_num_vertices)[ids]
    return DistVector(lay, f)


def plot(diagram, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 5))
    lo, hi = np.inf, -np.inf
    for d, colour in zip(range(diagram.dimension), ("tab:blue", "tab:orange", "tab:green")):
        raw = diagram.raw_pairs
        m = (raw["dim"] == d) & np.isfinite(raw["death"]) & (raw["death"] > raw["birth"])
        b, e = raw["birth"][m], raw["death"][m]
        kept = e - b > diagram.min_persistence
        ax.scatter(b[~kept], e[~kept], s=2, color=colour, alpha=0.25)
        ax.scatter(b[kept], e[kept], s=18, color=colour, edgecolor="k", label="D%d" % d)
        if b.size:
            lo, hi = min(lo, b.min()), max(hi, e.max())
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    if diagram.min_persistence > 0:
        ax.plot([lo, hi], [lo + diagram.min_persistence, hi + diagram.min_persistence],
                "k:", lw=0.8, label="persistence %g" % diagram.min_persistence)
    ax.set_xlabel("birth")
    ax.set_ylabel("death")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32, help="grid points per axis")
    p.add_argument("--bumps", type=int, default=8, help="number of Gaussian bumps and dips")
    p.add_argument("--noise", type=float, default=0.2, help="noise amplitude")
    p.add_argument("--min-persistence", type=float, default=0.25,
                   help="keep the pairs that persist longer than this")
    p.add_argument("--seed", type=int, default=0, help="seed of the bumps and the noise")
    p.add_argument("--out", default=os.path.join("out", "persistence"),
                   help="output prefix: PREFIX.png, PREFIX.csv, PREFIX.vtu")
    return p.parse_args(argv)


def main(comm: MPI.Comm, argv=None) -> dict:
    """Run the example; ``argv`` is an argv list (``None``: the command line).
    Collective on ``comm``. Returns the report, the diagram and the seconds taken."""
    args = parse_args(argv)

    if comm.rank == 0 and os.path.dirname(args.out):
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
    comm.Barrier()
    grid = Grid((args.n,) * 3, comm)
    field = noisy_field(grid, args.bumps, args.noise, args.seed)
    t0 = MPI.Wtime()
    dg = persistence_diagram(grid, field, min_persistence=args.min_persistence)
    seconds = comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX)
    dg.write_csv(args.out + ".csv")
    dg.write_vtu(args.out + ".vtu", grid)
    whole = dg.gather(root=0)             # the pairs are spread over the ranks; plot on rank 0
    if comm.rank == 0:
        plot(whole, args.out + ".png", "%d^3 grid, noise %g" % (args.n, args.noise))
        print("persistence diagram of a %s grid on %d ranks in %.2f s"
              % ("x".join(map(str, grid.shape)), comm.size, seconds))
        print(dg.describe())
        print("wrote %s.png, %s.csv, %s.vtu" % (args.out, args.out, args.out))
    return {"report": dg.report, "diagram": dg, "seconds": seconds}


if __name__ == "__main__":
    main(MPI.COMM_WORLD)

# Things to try
# -------------
# - Raise ``--noise``: the pairs near the diagonal multiply, the kept ones barely move.
# - ``--min-persistence 0``: every nonzero pair is kept (compare the counts in the report).
# - Open OUT.vtu in ParaView, glyph the points and colour by CriticalType or Persistence.
# - Run at ``-n 1`` and ``-n 4``: the CSV files are identical (ties broken by vertex id).
