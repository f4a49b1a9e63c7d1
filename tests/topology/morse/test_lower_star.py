"""The lower-star kernels of the discrete gradient: the grid's bit-mask
kernel writes what the general heap kernel writes, slot for slot."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import DistVector
from mpitest import assert_collective
from topology import Grid, global_order
from topology.morse import GridStars
from topology.morse._lower_star import _general_lower_stars, lower_star_gradient

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("shape,kind", [((11, 9, 13), "noisy"), ((12, 10, 9), "smooth"),
                                        ((9, 8, 10), "ties"), ((31, 27), "noisy"),
                                        ((24, 20), "smooth")])
def test_grid_lower_star_kernel_equals_the_general_kernel(shape, kind):
    """On a grid, lower_star_gradient takes the bit-mask kernel with its cache
    of finished stars; the general heap kernel (what complexes take) run on
    the same star tables gives the same codes and steps in every slot (the
    arrays start from the same random values, twice, so that a slot one
    kernel leaves unwritten and the other writes or replays is caught)."""
    rng = np.random.default_rng(3)
    n = int(np.prod(shape))
    x = np.linspace(0, 3, n)
    f = {"noisy": rng.random(n), "smooth": np.sin(x) + 0.3 * np.cos(7 * x),
         "ties": np.round(rng.random(n) * 4)}[kind]
    g = Grid(shape, COMM)
    lay = g.vertex_layout
    order = global_order(DistVector(lay, f[lay.start:lay.stop]))
    S = GridStars(g, g.ghosted(np.ascontiguousarray(order.local, np.int64)))
    sizes = [S.n_owned, int(S.eptr[-1]), int(S.tptr[-1]), int(S.tptr[-1]), int(S.qptr[-1])]
    types = [np.int16, np.int16, np.int16, np.int8, np.int16]
    out = {}
    for name, kernel in (("grid", lower_star_gradient), ("general", _general_lower_stars)):
        for seed in (0, 1):
            fill = np.random.default_rng(seed)
            arrs = [fill.integers(-100, 100, m).astype(t) for m, t in zip(sizes, types)]
            if S.n_owned:
                kernel(S.table(), *arrs, 0, S.n_owned)
            out[name, seed] = arrs
    same = all(np.array_equal(a, b) for seed in (0, 1)
               for a, b in zip(out["grid", seed], out["general", seed]))
    assert_collective(COMM, same, "the grid kernel differs from the general one")
