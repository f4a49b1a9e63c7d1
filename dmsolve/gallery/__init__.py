"""Test matrices built in parallel: every rank builds only the rows it owns.

Stencil problems number the grid points lexicographically with x fastest,
``i = x + y*nx + z*nx*ny``, and eliminate Dirichlet boundary points (no
stored entries for neighbours outside the grid), as ``pyamg.gallery`` does.

One module per kind of problem: :mod:`._stencil` (stencils on Dirichlet
grids) and :mod:`._random` (random SPD matrices, graph Laplacians);
:mod:`._nullspace` builds near null spaces for AMG's ``B=`` (block
constants, rigid-body modes from coordinates). Here:
right-hand sides and the registry of problems by name, with each one's size
known before it is built.
"""

from __future__ import annotations

import inspect
import math
from typing import NamedTuple

import numpy as np

from .._layout import Layout
from .._registry import Registry
from .._vector import DistVector
from ..validate import check_int
from ._common import MAX_ROWS, _grid, _uniform  # noqa: F401 (dmsolve.gallery.MAX_ROWS)
from ._nullspace import RIGID_BODY_MODES, block_constants, rigid_body_modes
from ._random import _random_spd_params, graph_laplacian, random_spd
from ._stencil import (_anisotropic_system, _convdiff_system, _laplacian_stencil,
                       _shifted_system, anisotropic_diffusion, convection_diffusion,
                       poisson1d, poisson2d, poisson3d, shifted_laplacian)

__all__ = [
    "poisson1d", "poisson2d", "poisson3d", "anisotropic_diffusion",
    "convection_diffusion", "shifted_laplacian", "random_spd",
    "graph_laplacian", "rhs", "PROBLEMS", "ProblemSize", "problem_size", "problem_options",
    "block_constants", "rigid_body_modes", "RIGID_BODY_MODES",
]


# -- right-hand sides and the registry -----------------------------------------

def rhs(A, kind: str = "ones", seed: int = 0) -> DistVector:
    """A right-hand side for ``A x = b``, the same at any rank count.

    Not collective (the entries come from the global index), but it checks
    ``kind`` identically on every rank.

    Parameters
    ----------
    A : DistCSR
        The matrix; ``b`` takes its row layout.
    kind : {"ones", "random"}
        All ones, or uniform in ``[-1, 1)`` from a hash of ``(seed, i)``.
    seed : int, optional
        Non-negative seed for ``kind="random"``.

    Returns
    -------
    DistVector
    """
    layout = getattr(A, "row_layout", None)
    if not isinstance(layout, Layout):
        raise TypeError("A must be a distributed matrix or operator with a row_layout, "
                        "got %s" % type(A).__name__)
    if kind == "ones":
        return DistVector(layout, np.ones(layout.local_size))
    if kind == "random":
        seed = check_int("seed", seed, low=0)
        idx = np.arange(layout.start, layout.stop, dtype=np.int64)
        return DistVector(layout, 2.0 * _uniform(int(seed) + 7, idx) - 1.0)
    raise ValueError("kind must be 'ones' or 'random', got %r" % (kind,))


# -- the registry, with each problem's size before it is built ---------------------

class ProblemSize(NamedTuple):
    """The size of a gallery problem, known before it is built.

    Not collective: a plain record (see :func:`problem_size`).

    Attributes
    ----------
    rows : int
        Global number of rows (exact).
    nnz : int
        Global number of stored entries: exact when ``exact``, else an upper bound.
    exact : bool
        Whether ``nnz`` is exact (the stencil problems) or a bound (random ones).
    build_bytes_per_nnz : float
        Peak memory of the assembly per stored entry on the rank that builds
        it (measured: the COO triplets, their CSR conversion and the
        diagonal/off-diagonal split are alive at once).
    """

    rows: int
    nnz: int
    exact: bool
    build_bytes_per_nnz: float

    def local_rows(self, ranks: int) -> int:
        """Rows of the largest block of a block layout over ``ranks``. Not collective."""
        return -(-self.rows // max(int(ranks), 1))

    def build_bytes(self, ranks: int) -> int:
        """Peak bytes that building needs on the rank with the most rows, over
        ``ranks`` ranks (entries in proportion to rows). Not collective."""
        local_nnz = self.nnz * self.local_rows(ranks) / max(self.rows, 1)
        return int(math.ceil(local_nnz * self.build_bytes_per_nnz))


# Measured peak resident growth per stored entry while building (1 and 2 ranks,
# poisson2d 1000^2, poisson3d 80^3: 107-108 B; random_spd 20000 at density 0.01:
# 180 B), with a little margin.
_STENCIL_BYTES_PER_NNZ = 112.0
_RANDOM_BYTES_PER_NNZ = 184.0


def _stencil_size(grid: tuple[int, ...], stencil: dict) -> ProblemSize:
    """Rows and entries of :func:`_stencil_matrix` on ``grid``, counted without
    building: an offset ``o`` couples ``prod(g_d - |o_d|)`` pairs of grid
    points. Pure function, in Python integers (no overflow)."""
    nnz = sum(math.prod(max(g - abs(o), 0) for g, o in zip(grid, off))
              for off, value in stencil.items() if value != 0)
    return ProblemSize(math.prod(grid), nnz, True, _STENCIL_BYTES_PER_NNZ)


def _random_spd_size(n, density, seed, shift) -> ProblemSize:
    nn, m, _, _ = _random_spd_params(n, density, seed, shift)
    # row i draws min(m, n-1-i) upper entries (fewer after collisions), mirrored,
    # plus the diagonal: sum_{k<n} min(m, k) in closed form
    upper = nn * (nn - 1) // 2 if m >= nn else m * (m - 1) // 2 + m * (nn - m)
    return ProblemSize(nn, nn + 2 * upper, False, _RANDOM_BYTES_PER_NNZ)


def _fixed(func, name: str, **fixed):
    """``func`` with some keywords fixed, as a problem ``f(n, comm, **options)``
    whose signature is ``func``'s without them (so :func:`problem_options`
    lists what may still be given)."""
    sig = inspect.signature(func)
    kept = sig.replace(parameters=[p for p in sig.parameters.values() if p.name not in fixed])

    def problem(n, comm, **options):
        kept.bind(n, comm, **options)          # a fixed keyword is refused, not overridden
        return func(n, comm, **fixed, **options)

    problem.__signature__ = kept
    problem.__name__ = problem.__qualname__ = name
    problem.__doc__ = "%s with %s. Collective on ``comm``." % (
        func.__name__, ", ".join("%s=%r" % kv for kv in fixed.items()))
    return problem


#: Problems by name; each is called as ``PROBLEMS[name](n, comm, **options)``.
PROBLEMS = Registry("problem")

# Each problem's size, by name (see problem_size), called with the builder's
# arguments after its own defaults are applied. The checked grid and stencil
# come from the builder's own helper, so the count cannot drift from what is built.
_SIZES = {}
for _name, _f, _size in [
        ("poisson1d", poisson1d, lambda n: _stencil_size(_grid(n, None, None, 1),
                                                         _laplacian_stencil(1))),
        ("poisson2d", poisson2d, lambda n, ny: _stencil_size(_grid(n, ny, None, 2),
                                                             _laplacian_stencil(2))),
        ("poisson3d", poisson3d, lambda n, ny, nz: _stencil_size(_grid(n, ny, nz, 3),
                                                                 _laplacian_stencil(3))),
        ("anisotropic2d", anisotropic_diffusion, lambda n, epsilon, theta, ny: _stencil_size(
            *_anisotropic_system(n, epsilon, theta, ny))),
        ("convdiff2d", _fixed(convection_diffusion, "convdiff2d", dim=2),
         lambda n, wind, diffusion: _stencil_size(*_convdiff_system(n, 2, wind, diffusion))),
        ("convdiff3d", _fixed(convection_diffusion, "convdiff3d", dim=3),
         lambda n, wind, diffusion: _stencil_size(*_convdiff_system(n, 3, wind, diffusion))),
        ("shifted3d", shifted_laplacian, lambda n, shift, alpha, ny, nz: _stencil_size(
            *_shifted_system(n, shift, alpha, ny, nz))),
        ("random-spd", random_spd, _random_spd_size)]:
    PROBLEMS.register(_name, _f)
    _SIZES[_name] = _size
del _name, _f, _size


def problem_options(name: str) -> dict:
    """The options of gallery problem ``name`` and their defaults, from its signature.

    ``PROBLEMS[name](n, comm, **options)`` accepts exactly these keywords.
    Not collective.

    Raises
    ------
    ValueError
        If no such problem is registered (the message lists them).
    """
    params = list(inspect.signature(PROBLEMS[name]).parameters.values())[2:]
    return {p.name: (None if p.default is p.empty else p.default) for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def problem_size(name: str, n: int, **options) -> ProblemSize | None:
    """The rows and stored entries of ``PROBLEMS[name](n, comm, **options)``,
    computed without building it (and without a communicator).

    Not collective. The problem's arguments are checked as the builder
    checks them, so a bad option raises here the error building would.

    Returns
    -------
    ProblemSize or None
        None for a problem registered without a size (``PROBLEMS.register``
        of your own).

    Raises
    ------
    TypeError
        An option ``name`` does not take (the message lists its options).
    ValueError
        Unknown ``name``, or a bad size or option.

    Examples
    --------
    >>> size = problem_size("poisson3d", 64)
    >>> size.rows, size.nnz
    (262144, 1810432)
    """
    key = PROBLEMS.canonical(name)
    known = problem_options(key)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError("problem %s has no option %s; its options: %s"
                        % (key, ", ".join(map(repr, unknown)), ", ".join(known) or "none"))
    size = _SIZES.get(key)
    if size is None or PROBLEMS[key] is not _BUILT_IN.get(key):
        return None             # a problem of the user's, or a replaced one
    bound = inspect.signature(PROBLEMS[key]).bind(n, None, **options)
    bound.apply_defaults()
    args = dict(bound.arguments)
    del args[list(args)[1]]     # the communicator: sizes do not depend on it
    return size(**args)


_BUILT_IN = dict(PROBLEMS.items())
