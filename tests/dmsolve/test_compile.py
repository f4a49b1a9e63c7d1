"""Timings that leave numba's compilation out: compile time is not counted as
set-up or solve time, for a solve and for a named preconditioner."""

import time

import numpy as np
from mpi4py import MPI

import dmsolve
from dmsolve import DistLinearOperator, gallery
from mpitest import Checks

COMM = MPI.COMM_WORLD


def small_poisson(n=12):
    A = gallery.poisson2d(n, COMM)
    return A, gallery.rhs(A, "random")


# -- numba's compilation is not set-up or solve time -------------------------------------

def test_compile_time_is_left_out_of_the_timings():
    """A solve's set-up and solve times leave numba's compilation out."""
    import numba
    from dmsolve import _compile
    A, b = small_poisson()

    # defined here, so the first call compiles it (about a second)
    @numba.njit(cache=False)
    def scale(src, dst, alpha):
        for i in range(src.shape[0]):
            dst[i] = alpha * src[i]

    def mv(x, out=None):
        y = A.matvec(x, out=out)
        scale(y.local, y.local, 1.0)
        return y
    op = DistLinearOperator(A.row_layout, A.col_layout, mv)
    infos, walls = [], []
    for _ in range(2):                        # the first solve compiles, the second not
        t0 = time.perf_counter()
        _, info = dmsolve.solve(op, b, "cg", rtol=1e-8)
        walls.append(time.perf_counter() - t0)
        infos.append(info)
    first, second = infos
    c = first.extra["compile_seconds"]
    with Checks(COMM) as checks:
        checks.add(first.converged and second.converged, "solved")
        checks.add(c > 0.01, "the first solve compiled", c)
        checks.add(second.extra["compile_seconds"] == 0.0, "the second did not",
                   second.extra["compile_seconds"])
        # the timings add up to the wall time without the compilation
        total = first.setup_seconds + first.solve_seconds
        checks.add(0 <= total and total + c <= walls[0] + 1e-6, "timings exclude it",
                   (first.setup_seconds, first.solve_seconds, c, walls[0]))
        checks.add(first.solve_seconds < walls[0] - 0.9 * c, "solve time excludes it",
                   (first.solve_seconds, c, walls[0]))
        checks.add(_compile.compile_seconds() >= c, "the process clock counts it")


def test_compile_time_of_a_named_preconditioner_is_left_out():
    """A named preconditioner's set-up time leaves numba's compilation out."""
    import numba
    import preconditioners
    from dmsolve import PRECONDITIONERS
    A, b = small_poisson()

    class Scaled(dmsolve.Preconditioner):
        name = "test-compiling"

        def __init__(self, A):
            super().__init__(A)

            @numba.njit(cache=False)
            def invert(d, out):
                for i in range(d.shape[0]):
                    out[i] = 1.0 / d[i]
            self.inv = np.empty(A.row_layout.local_size)
            invert(A.diagonal().local, self.inv)       # compiles: set-up
            self._done()

        def _apply(self, r, out):
            np.multiply(r, self.inv, out=out)

    preconditioners.register("test-compiling", Scaled, replace=True)
    try:
        t0 = time.perf_counter()
        _, info = dmsolve.solve(A, b, "cg", pc="test-compiling", rtol=1e-8)
        wall = time.perf_counter() - t0
    finally:
        PRECONDITIONERS.unregister("test-compiling")
    c = info.extra["compile_seconds"]
    with Checks(COMM) as checks:
        checks.add(info.converged, "solved")
        checks.add(c > 0.01, "compiled in the set-up", c)
        checks.add(info.setup_seconds + info.solve_seconds + c <= wall + 1e-6,
                   "set-up time excludes it", (info.setup_seconds, c, wall))
        checks.add(info.extra["pc"]["setup_seconds"] < wall - 0.9 * c,
                   "the preconditioner's own set-up time excludes it",
                   (info.extra["pc"]["setup_seconds"], c, wall))
