"""The door check of the analyses that need stored simplices (boundary
operators, Hodge theory, signals on edges): the one place outside the
domain classes that names a kind."""

from __future__ import annotations

from ._complex import SimplicialComplex
from ._grid import Grid

__all__ = ["check_complex"]


def check_complex(cx, why: str, grid_hint: str = "") -> None:
    """Raise ``TypeError`` unless ``cx`` is a :class:`SimplicialComplex`,
    saying ``why`` the analysis needs one, and for a :class:`Grid` how to get
    one (``grid_hint`` adds to it). Not collective: every rank passes the
    same kind of object in SPMD code, so every rank raises alike."""
    if not isinstance(cx, SimplicialComplex):
        hint = ("; for a Grid, cx = grid.to_complex() is its Freudenthal triangulation"
                + grid_hint if isinstance(cx, Grid) else "")
        raise TypeError("cx must be a topology SimplicialComplex (%s), got %s%s"
                        % (why, type(cx).__name__, hint))
