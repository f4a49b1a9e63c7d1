"""GeMSLR: multilevel Schur-complement low-rank preconditioning (parGeMSLR style),
for indefinite and nonsymmetric systems where AMG and plain ILU give up.

One module per stage, in the paper's words:

- ``_order``: :func:`multilevel_order` (k-way partitions, interiors and
  interfaces, recursion on the interface) and the ``Partition`` that places it;
- ``_distribute``: the rows moved to their owners (``redistribute``) and cut
  into the blocks ``B_l``, ``E_l``, ``F_l``, ``C_l`` and the last level;
- ``_factor``: ILUT of each subdomain on its owner, and of the last level;
- ``_lowrank``: the low-rank corrections, from ``_arnoldi``'s thick-restart
  Arnoldi (Krylov-Schur) on ``G_l = I - S_l M_{l+1}``;
- ``_solve``: :class:`GeMSLR`, the recursive solve, registered as ``"gemslr"``.
"""

from ._factor import LAST_LEVEL_SOLVERS
from ._order import multilevel_order
from ._solve import GeMSLR  # registers "gemslr"

__all__ = ["GeMSLR", "multilevel_order", "LAST_LEVEL_SOLVERS"]
