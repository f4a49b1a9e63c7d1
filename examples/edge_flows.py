"""Traffic flows on the Chicago road network: decomposition, filters, denoising,
interpolation and inferred triangles, distributed.

Run it with

    mpiexec -n 2 python -m mpi4py examples/edge_flows.py --out edge_flows.png
    mpiexec -n 4 python -m mpi4py examples/edge_flows.py --partition metis

The network is the Chicago sketch of the topological signal processing
literature (546 intersections, 1088 roads, 112 triangles; data in
``examples/data/chicago_sketch``), with the equilibrium traffic flow on each
road. The example

1. splits the flow into gradient, curl and harmonic parts (exact, by CG),
2. finds the smallest eigenvalues of ``L_0`` and ``L_2`` by LOBPCG with AMG
   (their nonzero ones are the gradient and curl frequencies of ``L_1``) and
   checks that the zero ones are as many as the Betti numbers,
3. extracts the same three parts with Chebyshev filters (matvecs only) whose
   cut-offs sit below the smallest frequencies found in 2,
4. denoises a noisy copy with ``(I + mu L_1) x = y`` and with l1 trend
   filtering (ADMM, one AMG set-up),
5. recovers the flow from half of the roads (``interpolate_flow``),
6. on the road graph alone, scores the 3-cliques by the flow's circulation,
   fills the best ones and shows the curl energy they explain.

Rank 0 plots the flow and its three parts on the map.
"""

import argparse
import os

import numpy as np
from mpi4py import MPI

import topology as T

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "chicago_sketch")


def load_network(path: str = DATA):
    """Edges (m, 2), their flows (m,), triangles (t, 3) and coordinates (n, 2)."""
    e = np.loadtxt(os.path.join(path, "edges.csv"), delimiter=",", skiprows=1)
    tris = np.loadtxt(os.path.join(path, "triangles.csv"), delimiter=",", skiprows=1,
                      dtype=np.int64)
    xy = np.loadtxt(os.path.join(path, "coordinates.csv"), delimiter=",", skiprows=1)
    return e[:, :2].astype(np.int64), e[:, 2], tris, xy


def nrmse(x: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(x - ref) / np.linalg.norm(ref))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--partition", default="block", help="block, metis or rcb")
    p.add_argument("--noise", type=float, default=0.5,
                   help="noise standard deviation, relative to the flow's RMS")
    p.add_argument("--mu", type=float, default=0.5, help="denoising weight")
    p.add_argument("--observed", type=float, default=0.5, help="fraction of roads observed")
    p.add_argument("--fill", type=int, default=10, help="triangles to infer and fill")
    p.add_argument("--order", type=int, default=128, help="Chebyshev filter order")
    p.add_argument("--out", default="edge_flows.png", help="PNG file to write ('' for none)")
    return p.parse_args(argv)


def main(comm: MPI.Comm, argv=None) -> dict:
    """Run the example; ``argv`` is an argv list (``None``: the command line).
    Collective on ``comm``. Returns the figures it prints."""
    args = parse_args(argv)
    edges, flow, tris, xy = load_network()
    # each rank passes a share of the roads and triangles; the complex is their union
    cx = T.SimplicialComplex([edges[comm.rank::comm.size], tris[comm.rank::comm.size]], comm,
                             points=xy, partition=args.partition)
    assert np.array_equal(cx.simplices(1), edges)      # flows are in this edge order
    betti = T.betti_numbers(cx)
    out = {"betti": betti}
    say = print if comm.rank == 0 else (lambda *a: None)
    say("Chicago sketch: %d vertices, %d edges, %d triangles; betti numbers %s"
        % (*cx.counts(), betti))

    # 1. the exact Hodge decomposition
    hd = T.hodge_decomposition(cx, flow, rtol=1e-10)
    e = hd.energies
    exact = {c: cx.gather_global(getattr(hd, c), 1) for c in ("gradient", "curl", "harmonic")}
    share = {c: e[c] / e["total"] for c in ("gradient", "curl", "harmonic")}
    say("energy shares: gradient %.4f, curl %.4f, harmonic %.4f"
        % (share["gradient"], share["curl"], share["harmonic"]))
    out["shares"] = share

    # 2. the bottom of the spectra (LOBPCG + AMG), checked against the Betti numbers:
    #    L_0 = B1 B1^T has as many zero eigenvalues as components, and its nonzero
    #    ones are the gradient frequencies of L_1; L_2 = B2^T B2 gives the curl ones
    lam = {}
    for k, part in ((0, "gradient"), (2, "curl")):
        ep = T.hodge_eigenpairs(cx, k, 4, tol=1e-8)
        lam[part] = float(ep.eigenvalues[ep.harmonic_dimension])
        say("smallest eigenvalues of L%d: %s; zero ones %d = beta_%d %d: %s"
            % (k, np.array2string(ep.eigenvalues, precision=4), ep.harmonic_dimension, k,
               betti[k], ep.harmonic_dimension == betti[k]))
        out["zeros_L%d" % k] = ep.harmonic_dimension
    say("smallest %s frequency %.4f, smallest curl frequency %.4f"
        % ("gradient", lam["gradient"], lam["curl"]))
    out["frequencies"] = lam

    # 3. the three parts by filtering (matvecs only), the cut-off below those frequencies
    bounds = T.spectral_bounds(cx, 1)
    fn = float(np.linalg.norm(flow))
    errs = {}
    for c in ("gradient", "curl", "harmonic"):
        cut = 0.5 * (lam[c] if c != "harmonic" else min(lam.values()))
        H = T.component_filter(cx, c, cutoff=cut, order=args.order, spectrum=bounds)
        errs[c] = float(np.linalg.norm(cx.gather_global(H.apply(flow), 1) - exact[c])) / fn
    say("Chebyshev filters of order %d, error against the exact parts (relative to ||f||):"
        % args.order)
    say("  gradient %.2e, curl %.2e, harmonic %.2e"
        % (errs["gradient"], errs["curl"], errs["harmonic"]))
    out["filter_errors"] = errs

    # 4. denoising a noisy copy
    rng = np.random.default_rng(7)
    noisy = flow + args.noise * np.sqrt(np.mean(flow ** 2)) * rng.standard_normal(flow.size)
    tik = cx.gather_global(T.denoise_flow(cx, noisy, args.mu), 1)
    w = args.noise * np.std(flow)
    tv, info = T.trend_filter_flow(cx, noisy, (w, w), rtol=1e-6, return_info=True)
    tv = cx.gather_global(tv, 1)
    out["denoise"] = {"noisy": nrmse(noisy, flow), "tikhonov": nrmse(tik, flow),
                      "trend": nrmse(tv, flow)}
    say("denoising: error %.3f noisy -> %.3f Tikhonov (mu %g), %.3f l1 trend filter "
        "(%d ADMM iterations)" % (out["denoise"]["noisy"], out["denoise"]["tikhonov"], args.mu,
                                  out["denoise"]["trend"], info.iterations))

    # 5. interpolation from a fraction of the roads (each rank gives a share)
    seen = np.flatnonzero(np.random.default_rng(3).random(flow.size) < args.observed)
    mine = seen[comm.rank::comm.size]
    # beta_1 = 431: most cycles are unfilled, so harmonic flows cost nothing in
    # x^T L_1 x and only eps keeps them small away from the samples
    rec = cx.gather_global(T.interpolate_flow(cx, mine, flow[mine], mu=0.1, eps=1.0), 1)
    hidden = np.setdiff1d(np.arange(flow.size), seen)
    out["interpolation"] = nrmse(rec[hidden], flow[hidden])
    say("interpolation from %d of %d roads: error %.3f on the unobserved ones (zero fill 1.000)"
        % (seen.size, flow.size, out["interpolation"]))

    # 6. triangles inferred from the flow's circulation: on the road graph alone
    #    (no triangles), rank the 3-cliques, fill the best and see how much of the
    #    flow becomes curl (every 3-clique of this network is one of its triangles)
    graph = T.SimplicialComplex([edges[comm.rank::comm.size]], comm, points=xy,
                                partition=args.partition)
    new, scores = T.infer_triangles(graph, flow, args.fill, return_scores=True)
    cx2 = T.fill_triangles(graph, new)
    e2 = T.hodge_decomposition(cx2, flow, rtol=1e-10).energies
    known = {tuple(t) for t in tris.tolist()}
    out["filled"] = {"triangles": new, "curl_after": e2["curl"] / e2["total"],
                     "known": sum(tuple(t) in known for t in new.tolist())}
    say("inferred %d triangles on the road graph (best %s, circulation^2 %.4g): curl share "
        "0 -> %.4f, against %.4f with all %d triangles"
        % (len(new), new[0].tolist(), scores[0], out["filled"]["curl_after"], share["curl"],
           len(tris)))

    if comm.rank == 0 and args.out:
        plot(args.out, xy, edges, flow, exact, e)
        print("wrote %s" % args.out)
    return out


def plot(path, xy, edges, flow, parts, energies) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    panels = [("flow", flow)] + [(c, parts[c]) for c in ("gradient", "curl", "harmonic")]
    fig, axes = plt.subplots(1, 4, figsize=(18, 5))
    segs = xy[edges]
    for ax, (name, v) in zip(axes, panels):
        lim = float(np.max(np.abs(v))) or 1.0
        lc = LineCollection(segs, array=v, cmap="coolwarm", linewidths=0.4 + 2.0 *
                            np.abs(v) / lim)
        lc.set_clim(-lim, lim)
        ax.add_collection(lc)
        ax.autoscale()
        ax.set_aspect("equal")
        ax.axis("off")
        title = name if name == "flow" else "%s (%.1f%% of the energy)" % (
            name, 100 * energies[name] / energies["total"])
        ax.set_title(title)
        fig.colorbar(lc, ax=ax, shrink=0.6)
    fig.suptitle("Chicago sketch traffic flow (oriented from the smaller to the larger "
                 "vertex id) and its Hodge decomposition")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main(MPI.COMM_WORLD)

# Things to try
# -------------
# - ``--partition metis``: other owners, the same numbers.
# - ``--order 32``: a cheaper filter, a larger extraction error (the smallest gradient
#   frequency, 0.015, is close to 0 on a spectrum reaching 10).
# - ``--observed 0.2``: fewer sensors, a larger interpolation error.
# - ``--fill 112``: all the triangles, the full curl share.
