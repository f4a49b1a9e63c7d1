"""Preconditioners for dmsolve, built by name through a registry:
``preconditioners.make("amg", A)`` or ``make(("asm", {"overlap": 2}), A)``.

Names (:func:`available` lists them): ``none`` and ``jacobi`` (:mod:`._jacobi`),
``bjacobi`` and ``asm`` (:mod:`._schwarz`), ``cheby`` (:mod:`._cheby`), ``amg``
(the :mod:`.amg` package, relaxation from :mod:`.smoothers`) and ``gemslr``
(:class:`GeMSLR`).
"""

from dmsolve import Preconditioner
from ._cheby import Chebyshev
from ._jacobi import Identity, Jacobi
from ._registry import available, make, register
from ._schwarz import AdditiveSchwarz, BlockJacobi

__all__ = ["make", "register", "available", "Preconditioner", "Jacobi", "Identity",
           "BlockJacobi", "AdditiveSchwarz", "Chebyshev"]

from .amg import SmoothedAggregation  # noqa: E402  (registers "amg")

from .gemslr import GeMSLR  # noqa: E402  (registers "gemslr")
__all__ += ["SmoothedAggregation", "GeMSLR"]
