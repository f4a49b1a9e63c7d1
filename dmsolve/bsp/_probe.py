"""Measure the BSP machine parameters g (seconds per byte) and l (latency)."""

from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from ._ledger import BSPParams
from ._superstep import BSP

__all__ = ["probe"]


def probe(comm: MPI.Comm, sizes=(0, 1 << 12, 1 << 16, 1 << 20), repeats: int = 5) -> BSPParams:
    """Estimate g and l by timing supersteps with a full h-relation.

    Each rank sends ``h / (p-1)`` bytes to every other rank (a total
    exchange; one rank sends to itself), for each ``h`` in ``sizes``; the
    median sync time is fitted to ``l + g*h`` by least squares.
    Collective on ``comm``.
    """
    size, rank = comm.Get_size(), comm.Get_rank()
    ctx = BSP(comm)
    times = []
    for h in sizes:
        peers = [r for r in range(size) if r != rank] or [rank]
        chunk = np.zeros(max(h // len(peers), 0), dtype=np.uint8)
        samples = []
        for _ in range(repeats):
            for r in peers:
                if chunk.size:
                    ctx.send(r, chunk)
            comm.Barrier()
            t0 = time.perf_counter()
            ctx.sync("probe")
            samples.append(time.perf_counter() - t0)
        # the slowest rank sets the pace of a superstep
        times.append(comm.allreduce(float(np.median(samples)), op=MPI.MAX))
    hs = np.array(sizes, dtype=np.float64)
    A = np.vstack([np.ones_like(hs), hs]).T
    (l, g), *_ = np.linalg.lstsq(A, np.array(times), rcond=None)
    return BSPParams(g=max(float(g), 0.0), l=max(float(l), 0.0), ranks=size)
