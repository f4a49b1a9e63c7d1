"""Multigrid cycles: V (one coarse visit per level) and W (two)."""

from __future__ import annotations

import numpy as np

from dmsolve import Registry

from .._threads import ufunc_blocks

__all__ = ["CYCLES", "run_cycle"]

#: Cycle shapes by name: the number of coarse-grid visits per level (gamma).
CYCLES = Registry("cycle")
CYCLES.register("V", 1)
CYCLES.register("W", 2)


def run_cycle(levels, coarse, lvl: int, b: np.ndarray, x: np.ndarray, gamma: int,
              zero_guess: bool = True) -> None:
    """One cycle on level ``lvl``: improve ``x`` towards ``A_lvl x = b``.

    Pre-smooth, restrict the residual with ``P^T``, visit the next level
    ``gamma`` times, prolongate the correction, post-smooth. A rank outside a
    level's communicator (an idle level: it owns no rows there or below)
    returns at once; ``coarse`` is then an idle solver that does nothing.
    Collective on each level's communicator in turn; allocates nothing
    (every level carries its work vectors).
    """
    if lvl == len(levels):
        coarse.solve(b, x)
        return
    L = levels[lvl]
    if not L.active:
        return
    L.presmoother.smooth(b, x, zero_guess)
    L.residual(b, x, L.r.local)
    L.P.rmatvec(L.r, out=L.bc)
    for visit in range(gamma):
        run_cycle(levels, coarse, lvl + 1, L.bc.local, L.xc.local, gamma,
                  zero_guess=(visit == 0))
    L.P.matvec(L.xc, out=L.corr)
    ufunc_blocks(np.add, x, L.corr.local, x)
    L.postsmoother.smooth(b, x, False)
