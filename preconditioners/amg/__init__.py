"""Smoothed-aggregation algebraic multigrid, one module per stage of the set-up::

    strength -> aggregate -> tentative -> smooth -> galerkin -> coarse

:mod:`.smoothed_aggregation` drives them and :mod:`.cycle` applies the
hierarchy; the relaxation on each level is :mod:`preconditioners.smoothers`.
"""

from .smoothed_aggregation import IdleLevel, Level, SmoothedAggregation

__all__ = ["SmoothedAggregation", "Level", "IdleLevel"]
