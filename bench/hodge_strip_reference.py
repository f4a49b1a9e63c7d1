"""The Hodge case of bench/scale.py on one rank, at the global size of a
p-rank run, against pyamg on the same gradient system.

    python bench/hodge_strip_reference.py 1 64

Weak scaling lengthens the strip (30 x 30 p vertices): the gradient
system's iterations grow with it. This runs the harness's own ``prep_hodge``
and ``run_hodge`` on one rank with the triangles of all p ranks, then gives
the gradient system (gathered) to pyamg's smoothed aggregation with CG at
the same tolerance, to show whether the growth is the problem's or the
distribution's. Measured (2026-12-03): p = 1: dmsolve 6, pyamg 6; p = 64:
dmsolve 14, pyamg 14 (and 14 on 64 ranks).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402


class _Rank:
    """Stands for rank ``r`` of ``p`` in ``scale._tri_grid``."""

    def __init__(self, p, r):
        self.p, self.r = p, r

    def Get_size(self):
        return self.p

    def Get_rank(self):
        return self.r


def main(sizes) -> None:
    import pyamg

    import topology.signals._hodge as hodge

    comm = MPI.COMM_SELF
    tri_grid = scale._tri_grid
    for p in sizes:
        scale._tri_grid = lambda _comm, m, p=p: np.concatenate(
            [tri_grid(_Rank(p, r), m) for r in range(p)])
        captured = {}
        cg = hodge.cg

        def spy(A, b, **kw):
            captured.setdefault("system", (A.to_scipy().tocsr(), b.gather()))
            return cg(A, b, **kw)
        hodge.cg = spy
        try:
            ours = scale.run_hodge(scale.prep_hodge(comm, 10))["iterations_by_system"]
        finally:
            hodge.cg, scale._tri_grid = cg, tri_grid
        A, b = captured["system"]
        residuals = []
        ml = pyamg.smoothed_aggregation_solver(A, max_coarse=300)
        ml.solve(b - b.mean(), tol=1e-8, accel="cg", residuals=residuals)
        print("strip 30 x %d: dmsolve gradient %d, curl %d; pyamg gradient %d (%d levels)"
              % (30 * p, ours["gradient"], ours["curl"], len(residuals) - 1, len(ml.levels)))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[1, 64],
                    help="the rank counts whose global problem to build")
    main(ap.parse_args().sizes)
