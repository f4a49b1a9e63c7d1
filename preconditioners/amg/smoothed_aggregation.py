"""Smoothed-aggregation algebraic multigrid (SA-AMG) as a preconditioner.

The set-up reads like the algorithm, one module per stage::

    strength -> aggregate -> tentative -> smooth -> galerkin -> coarse

and the solve phase is a V- or W-cycle (:mod:`.cycle`) with the smoothers of
:mod:`preconditioners.smoothers`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from dmsolve import (DistCSR, DistVector, Preconditioner, Progress, Registry,
                     raise_from_root)
from dmsolve.reproducible import canonical, keys_of
from dmsolve.validate import agreed, check_bool, check_choice, check_int

from .._diagonal import checked_diagonal
from .._precision import Float32Work, check_precision, refuse_single_reproducible
from .._registry import register
from .._threads import ufunc_blocks
from ..smoothers import (MAX_SWEEPS, SMOOTHERS, adjoint_smoother, check_smoother,
                         make_smoother)
from .aggregate import AGGREGATIONS
from . import coarse as _coarse
from .coarse import (CoarseSolver, DoubleCoarseSolver, IdleCoarseSolver,
                     RelaxationCoarseSolver, level_communicator, made_layout,
                     plan_coarse_level, redistribute_rows, sub_layout)
from .cycle import CYCLES, run_cycle
from .galerkin import galerkin_rows
from . import reproducible as rp
from .reproducible import check_key_range
from .smooth import PROLONGATOR_SMOOTHERS
from .strength import STRENGTH
from .tentative import tentative_prolongator

__all__ = ["SmoothedAggregation", "Level", "IdleLevel"]


@dataclass(frozen=True)
class _Plan:
    """The checked options that shape a hierarchy's levels and coarsest
    solve. Not collective."""

    aggregate: str
    presmoother: tuple
    postsmoother: tuple
    max_levels: int
    max_coarse: int
    min_rows_per_rank: int
    max_dense_coarse: int
    coarse_sweeps: int


class Level:
    """One level of the hierarchy: its operator ``A``, the prolongator ``P`` to
    it from the next level, the smoothers and preallocated work vectors.
    ``A`` and ``P`` live on the level's communicator (:attr:`comm`), which
    may hold only some ranks of the hierarchy's. Construction is not
    collective (allocation only)."""

    active = True

    def __init__(self, A: DistCSR, P: DistCSR, presmoother, postsmoother):
        self.A, self.P = A, P
        self.presmoother, self.postsmoother = presmoother, postsmoother
        self.r = DistVector.zeros(A.row_layout, A.dtype)
        self.corr = DistVector.zeros(A.row_layout, A.dtype)
        self.bc = DistVector.zeros(P.col_layout, A.dtype)
        self.xc = DistVector.zeros(P.col_layout, A.dtype)

    @property
    def comm(self):
        """The communicator of the level's ranks."""
        return self.A.comm

    def residual(self, b: np.ndarray, x: np.ndarray, out: np.ndarray) -> None:
        """``out = b - A x`` on this level; ``x`` and ``out`` are local arrays,
        wrapped (not copied) as vectors of the level's layout. Collective among
        neighbouring ranks (the matvec's halo exchange)."""
        lay = self.A.row_layout
        y = DistVector(lay, out)
        assert y.local is out, "out must be a contiguous array of the level's dtype"
        self.A.matvec(DistVector(lay, x), out=y)
        ufunc_blocks(np.subtract, b, out, out)


class IdleLevel:
    """A level on a rank outside its communicator: the rank owns no rows of
    it (nor of any coarser level) and skips it in the cycle. ``A``, ``P``,
    the smoothers and :attr:`comm` are None. Not collective."""

    active = False
    A = P = presmoother = postsmoother = comm = None

    def __repr__(self) -> str:
        return "IdleLevel()"


def _candidates(A, B) -> np.ndarray:
    """This rank's rows of the near-null-space candidates as an ``(n, k)``
    float64 array, checked on this rank (finite, real, the right rows, at
    least one column). Not collective: call it inside :func:`agreed`, then
    :func:`_check_candidates` for what only all ranks together can tell.
    """
    n = A.row_layout.local_size
    if B is None:
        return np.ones((n, 1))
    if isinstance(B, DistVector):
        B = [B]
    if isinstance(B, (list, tuple)):
        if not B:
            raise ValueError("B must hold at least one vector (None gives the constants)")
        cols = []
        for v in B:
            if not isinstance(v, DistVector) or v.layout != A.row_layout:
                raise ValueError("B must hold DistVectors on A's row layout")
            cols.append(v.local)
        B = np.column_stack(cols)
    elif not isinstance(B, np.ndarray):
        raise TypeError("B must be None, a DistVector, a list of DistVectors or a numpy "
                        "array of this rank's rows x k, got %s" % type(B).__name__)
    if B.dtype.kind not in "fiu":
        raise TypeError("B must hold real numbers, got dtype %s" % B.dtype)
    B = np.asarray(B, dtype=np.float64)
    if B.ndim == 1:
        B = B[:, None]
    if B.ndim != 2 or B.shape[0] != n:
        raise ValueError("B must have this rank's %d rows, got shape %s" % (n, B.shape))
    if B.shape[1] == 0:
        raise ValueError("B must have at least one column (None gives the constants)")
    if not np.all(np.isfinite(B)):
        raise ValueError("B has non-finite entries")
    return B


#: Smoothers a reproducible hierarchy takes: matvecs and entrywise updates
#: (Gauss-Seidel's sweep order is the partition's).
REPRODUCIBLE_SMOOTHERS = ("chebyshev", "jacobi", "l1-jacobi")


def _check_reproducible(A, Bl, single, presmoother, postsmoother, smooth_name) -> None:
    """The options ``reproducible=True`` cannot take. Not collective (inside
    the constructor's agreement)."""
    refuse_single_reproducible("amg", single, True)
    for which, desc in (("presmoother", presmoother), ("postsmoother", postsmoother)):
        if desc[0] not in REPRODUCIBLE_SMOOTHERS:
            raise ValueError("amg(reproducible=True) needs smoothers made of matvecs (%s); "
                             "the %s is %r, whose sweep order is the partition's"
                             % (", ".join(REPRODUCIBLE_SMOOTHERS), which, desc[0]))
    if Bl.shape[1] != 1:
        raise ValueError("amg(reproducible=True) takes one near-null-space candidate, "
                         "got %d" % Bl.shape[1])
    if smooth_name not in ("jacobi", "none"):
        raise ValueError("amg(reproducible=True) smooths with 'jacobi' or 'none', got %r"
                         % smooth_name)
    check_key_range(A)


def _check_reproducible_strength(name: str, strength) -> None:
    """The strength measures ``reproducible=True`` cannot take. Not collective
    (inside the constructor's agreement)."""
    if name not in ("symmetric", "classical") or getattr(strength, "block_size", 1) != 1:
        raise ValueError("amg(reproducible=True) takes the 'symmetric' strength measure "
                         "without block_size or the 'classical' one, got %r %r"
                         % (name, strength.options()))


def _check_candidates(B: np.ndarray, comm, global_rows: int) -> None:
    """Refuse candidates whose column count differs between ranks, or whose
    columns are zero or linearly dependent (the tentative prolongator would
    have zero columns and the coarse operators zero rows). Collective on
    ``comm``: three small reductions; the same ``ValueError`` on every rank.
    """
    k = B.shape[1]
    lo, hi = comm.allreduce(k, op=MPI.MIN), comm.allreduce(k, op=MPI.MAX)
    if lo != hi:
        raise ValueError("B must have the same number of columns on every rank, got "
                         "between %d and %d" % (lo, hi))
    if global_rows == 0:
        return          # an empty operator (e.g. of an empty complex): nothing to span
    scale = np.empty(k)
    comm.Allreduce(np.abs(B).max(axis=0) if B.shape[0] else np.zeros(k), scale, op=MPI.MAX)
    if not np.all(scale > 0):
        raise ValueError("B's column %d is zero" % int(np.flatnonzero(scale == 0)[0]))
    Bs = B / scale
    G = np.empty((k, k))
    comm.Allreduce(np.ascontiguousarray(Bs.T @ Bs), G, op=MPI.SUM)
    w = np.linalg.eigvalsh(G)
    if w[0] <= 10 * k * np.finfo(float).eps * w[-1]:
        raise ValueError("B's %d columns are linearly dependent" % k)


def _stage(registry: Registry, desc, **shorthands):
    """The stage object ``cls(**options)`` for the descriptor ``desc``, with
    each shorthand ``keyword=value`` whose value is not None among its
    options. Not collective.

    Raises
    ------
    ValueError
        If a keyword is given both ways, or an option value is bad.
    TypeError
        If the stage does not take one of the options.
    """
    name, cls, opts = registry.resolve(desc)
    for keyword, value in shorthands.items():
        if value is None:
            continue
        if keyword in opts:
            raise ValueError("%s given twice, as %s=%r and in %s %r; give it once"
                             % (keyword, keyword, value, registry.kind, desc))
        opts[keyword] = value
    try:
        return name, cls(**opts)
    except TypeError as e:
        raise TypeError("%s %r: %s" % (registry.kind, name, e)) from None


#: The strength measure of a scalar problem (one candidate) when neither
#: ``strength`` nor its shorthands are given.
SCALAR_STRENGTH = ("classical", {"theta": 0.3, "filter_levels": 1})


def _default_strength(strength, theta, block_size, candidates: int):
    """The strength descriptor: ``strength`` when given; else
    :data:`SCALAR_STRENGTH` for one candidate, and the symmetric measure
    (PyAMG's) for several candidates or a ``theta`` or ``block_size``
    shorthand. Not collective."""
    if strength is not None:
        return strength
    if theta is None and block_size is None and candidates == 1:
        return SCALAR_STRENGTH
    return "symmetric"


class SmoothedAggregation(Preconditioner):
    """Distributed smoothed-aggregation AMG, applied as one cycle per call.

    Parameters
    ----------
    A : DistCSR
        Symmetric positive (semi-)definite, rows and columns distributed
        alike, with no zero on its diagonal (relaxation divides by it).
    B : None, DistVector, list of DistVector or array (local rows x k)
        Near null space; constants by default (e.g. rigid body modes for
        elasticity). Real, finite, the same number ``k >= 1`` of columns on
        every rank, linearly independent.
    theta : float in [0, 1], optional
        Shorthand for ``strength=("symmetric", {"theta": theta})`` (PyAMG's
        measure). This and the options after it are keyword only.
    aggregate : str
        Aggregation method (``"standard"``).
    omega : float in (0, 2], optional
        Shorthand for ``smooth=("jacobi", {"omega": omega})``; default 4/3.
    presmoother, postsmoother : str or (str, dict)
        From :data:`preconditioners.smoothers.SMOOTHERS`; default Chebyshev
        of degree 2 on PETSc GAMG's interval ``[0.1, 1.1] rho(D^-1 A)``
        (``("chebyshev", {"degree": 2, "ratio": 11})``): matvecs only, in the
        sliced ELL format of :class:`dmsolve.DistCSR`, and the same smoother
        at any number of ranks. PyAMG's default, symmetric hybrid
        Gauss-Seidel, is ``("gauss-seidel", {"sweep": "symmetric"})``: on 3D
        Poisson 100^3 it takes as many iterations (10) but the solve is some
        1.4x slower (docs/benchmarks.md); on strongly anisotropic or
        unstructured problems it can take fewer iterations. The cycle is
        symmetric (:attr:`symmetric`) when the postsmoother is the adjoint of
        the presmoother (:func:`preconditioners.smoothers.adjoint_smoother`).
    cycle : {"V", "W"}
    max_levels : int >= 1
        Levels in all, the coarsest included (1: the coarsest level is ``A``).
    max_coarse : int >= 1
        Coarsening stops at or below this many unknowns.
    min_rows_per_rank : int >= 0
        Levels with fewer unknowns per rank are gathered onto fewer ranks
        (spread over the communicator, the last rank among them:
        :func:`.coarse.active_ranks`), by at most
        :data:`.coarse.MAX_RANK_REDUCTION` (4) times fewer ranks per level.
    strength : str or (str, dict), optional
        Strength measure from :data:`.strength.STRENGTH`, as PyAMG's
        ``("symmetric", {"theta": 0.08})``; it also decides which couplings
        the prolongator smoothing filters out. Default: for one candidate,
        :data:`SCALAR_STRENGTH`, the classical signed measure
        ``("classical", {"theta": 0.3, "filter_levels": 1})``, under which
        anisotropic problems coarsen along their strong direction (with
        ``reproducible=True`` too: the measure reads whole rows, so it is the
        same at any partition); for several candidates, or with the
        ``theta`` or ``block_size`` shorthand, ``"symmetric"`` with ``theta`` 0.
    block_size : int >= 1, optional
        Shorthand for ``strength=("symmetric", {"block_size": block_size})``:
        interlaced unknowns per node (PETSc's matrix block size, PyAMG's BSR
        block), aggregated node by node; e.g. 2 or 3 with rigid-body modes
        for linear elasticity.
    smooth : str or (str, dict)
        Prolongator smoother from :data:`.smooth.PROLONGATOR_SMOOTHERS`:
        ``("jacobi", {"omega": 4/3})`` (the weight is divided by
        ``rho(D^-1 A)``) or ``"none"`` (unsmoothed aggregation).
    max_dense_coarse : int >= 0
        The coarsest level is solved redundantly on every rank with a dense
        (pseudo-)inverse when it has at most this many rows (default 2000:
        some 32 MB per array and a few seconds of ``eigh`` on every rank).
        Above it (AMG that cannot coarsen: ``max_levels=1``, ``max_coarse``
        at least the size of ``A``, a diagonal or uncoupled matrix) the
        coarsest level is relaxed instead: ``coarse_sweeps`` sweeps of its
        presmoother, then as many of its postsmoother, from zero; memory
        stays proportional to each rank's rows.
    coarse_sweeps : int in [1, MAX_SWEEPS]
        Sweeps of each smoother in a relaxed coarsest level (default 2).
    agglomerate : bool
        True (default): a gathered level lives on a sub-communicator of its
        ranks (GAMG's ``process_eq_limit``), so the other ranks take no part
        in its set-up, its halo exchanges or the coarsest solve, and the
        ranks shrink by at most ``MAX_RANK_REDUCTION`` per level. False:
        every rank of ``A.comm`` takes part in every level, and a level is
        gathered onto as few ranks as ``min_rows_per_rank`` asks in one step
        (the hierarchy before agglomeration; with at most
        ``MAX_RANK_REDUCTION`` ranks both give the same operators and
        cycles, bit for bit).
    precision : {"double", "single"}
        ``"single"``: the hierarchy (every level's operator, the
        prolongators and the smoothers' data) and the cycle's vectors are
        float32 inside the float64 Krylov method (which tests its residual in
        float64): half the bytes per product. The hierarchy is built in
        float64 and rounded level by level as it is made; the coarsest solve
        is computed in float64 (its inverse's rows then rounded to float32; a relaxed
        coarsest level stays float64). Needs smoothers made of matvecs (``chebyshev``,
        ``jacobi``, ``l1-jacobi``). Default ``"double"``; refused with
        ``reproducible=True``.
    progress : None, True or callable
        Report each level as it is built (``"level 1: 4096 rows, 35840
        nonzeros"``), then a summary: see :class:`dmsolve.Progress`. Given
        alike on every rank.

    Raises
    ------
    ValueError, TypeError
        On every rank, for a bad option (``theta`` or ``omega`` given both as
        a keyword and in a descriptor is one), a matrix that is not square,
        bad candidates ``B``, or a zero or non-finite diagonal entry of
        ``A`` (the message names the number of such rows and the first global
        row) or, in a row that is not empty, of a coarse level's operator.

    Notes
    -----
    Set-up is collective on ``A.comm``. :meth:`apply` is collective on
    ``A.comm`` (halo exchanges on every level among the level's ranks, one
    ``Allgatherv`` at a dense coarsest level among its ranks) and allocates
    no vectors. A rank outside a level's communicator holds an
    :class:`IdleLevel` there (and an :class:`.coarse.IdleCoarseSolver` if
    outside the coarsest level's). The sub-communicators are cached on
    ``A.comm`` and reused by later set-ups
    (:func:`.coarse.free_sub_communicators` frees them). :meth:`gather_operator`
    and :meth:`gather_prolongator` give any level's matrices on every rank
    (collective). :meth:`describe` adds
    ``levels`` (rows, nonzeros, ranks owning rows), ``level_comm_ranks``
    (the size of each level's communicator), the complexities,
    ``hierarchy_bytes_max_rank`` (operators, prolongators and the coarse
    solver), ``coarse`` (``solver``: ``"dense"`` or ``"relax"``, ``rows``,
    ``stored_bytes_max_rank``, ``max_dense_coarse``, ``sweeps``), the
    timings of each stage and the options.

    References
    ----------
    P. Vanek, J. Mandel, M. Brezina, "Algebraic multigrid by smoothed
    aggregation for second and fourth order elliptic problems", Computing
    56(3), 1996. N. Bell, L. Olson, J. Schroder, PyAMG (2023).
    """

    name = "amg"

    def __init__(self, A, B=None, *, theta: float | None = None, aggregate: str = "standard",
                 omega: float | None = None,
                 presmoother=("chebyshev", {"degree": 2, "ratio": 11.0}),
                 postsmoother=("chebyshev", {"degree": 2, "ratio": 11.0}),
                 cycle: str = "V", max_levels: int = 10, max_coarse: int = 300,
                 min_rows_per_rank: int = 2000, strength=None, block_size: int | None = None,
                 smooth="jacobi",
                 max_dense_coarse: int = 2000, coarse_sweeps: int = 2, progress=None,
                 agglomerate: bool = True, precision: str = "double",
                 reproducible: bool = False):
        super().__init__(A)
        comm = self.comm
        with agreed(comm):
            if not isinstance(A, DistCSR):
                raise TypeError("amg needs a DistCSR, got %s" % type(A).__name__)
            if A.row_layout != A.col_layout:
                raise ValueError("amg needs a square matrix with rows and columns "
                                 "distributed alike, got %d x %d" % A.shape)
            smooth_name, self.smooth = _stage(PROLONGATOR_SMOOTHERS, smooth, omega=omega)
            aggregate = check_choice("aggregate", aggregate, AGGREGATIONS)
            presmoother = check_smoother(presmoother)
            postsmoother = check_smoother(postsmoother)
            cycle = check_choice("cycle", cycle, CYCLES)
            max_levels = check_int("max_levels", max_levels, low=1)
            max_coarse = check_int("max_coarse", max_coarse, low=1)
            min_rows_per_rank = check_int("min_rows_per_rank", min_rows_per_rank, low=0)
            max_dense_coarse = check_int("max_dense_coarse", max_dense_coarse, low=0)
            coarse_sweeps = check_int("coarse_sweeps", coarse_sweeps, low=1, high=MAX_SWEEPS)
            agglomerate = check_bool("agglomerate", agglomerate)
            single = check_precision("amg", precision, A)
            precision = "single" if single else "double"
            if single:
                for which, desc in (("presmoother", presmoother),
                                    ("postsmoother", postsmoother)):
                    if not hasattr(SMOOTHERS[desc[0]], "single"):
                        raise ValueError(
                            "amg precision='single' needs smoothers made of matvecs (%s); "
                            "the %s is %r" % (", ".join(sorted(
                                n for n in SMOOTHERS if hasattr(SMOOTHERS[n], "single"))),
                                which, desc[0]))
            report = Progress(progress, comm, "amg")     # checks progress
            Bl = _candidates(A, B)
            reproducible = check_bool("reproducible", reproducible)
            strength_name, self.strength = _stage(
                STRENGTH, _default_strength(strength, theta, block_size, Bl.shape[1]),
                theta=theta, block_size=block_size)
            if reproducible:
                _check_reproducible(A, Bl, single, presmoother, postsmoother, smooth_name)
                _check_reproducible_strength(strength_name, self.strength)
        if comm.allreduce(int(bool(report)), op=MPI.SUM) not in (0, comm.Get_size()):
            raise ValueError("amg: progress must be given on every rank or on none")
        _check_candidates(Bl, comm, A.shape[0])
        # the one zero-diagonal check (jacobi's and cheby's): relaxation, the
        # strength measure and the prolongator smoothing all divide by it
        checked_diagonal(A, "amg")
        self.options = dict(strength=(strength_name, self.strength.options()),
                            smooth=(smooth_name, self.smooth.options()), aggregate=aggregate,
                            presmoother=presmoother, postsmoother=postsmoother,
                            cycle=cycle.upper(), max_levels=max_levels, max_coarse=max_coarse,
                            min_rows_per_rank=min_rows_per_rank, precision=precision)
        self._single = precision == "single"
        #: the same hierarchy and cycle, bit for bit, for any partition
        self.reproducible = reproducible
        if reproducible:
            self.options.update(aggregate="mis2", reproducible=True)
        adjoint = adjoint_smoother(presmoother)
        # both the cycle and a relaxed coarsest level are symmetric exactly
        # when the postsmoother undoes the presmoother's asymmetry
        self._symmetric = None if adjoint is None else adjoint == postsmoother
        self.gamma = CYCLES[cycle]
        self.levels: list[Level | IdleLevel] = []
        self.coarse = self.coarse_A = None
        self.timings: dict = {k: 0.0 for k in ("strength", "aggregate", "tentative",
                                               "smooth", "galerkin", "smoothers", "coarse")}
        self._agglomerate = agglomerate
        self._level_info = []
        # Levels are built by the ranks of each level's communicator only. A
        # report of a level on a sub-communicator waits for the end, where
        # every rank takes part; so does an error raised there (agreed among
        # that level's ranks), which the idle ranks then raise too.
        deferred: list = []
        exc = None
        plan = _Plan(aggregate=aggregate, presmoother=presmoother, postsmoother=postsmoother,
                     max_levels=max_levels, max_coarse=max_coarse,
                     min_rows_per_rank=min_rows_per_rank, max_dense_coarse=max_dense_coarse,
                     coarse_sweeps=coarse_sweeps)
        try:
            if reproducible:
                self._build_reproducible(A, Bl, plan, report)
            else:
                self._build(A, Bl, plan, report, deferred)
        except Exception as e:  # noqa: BLE001 - re-raised on every rank by _finish
            if self._lcomm is comm:
                raise           # every rank of comm is raising it
            exc = e
        self._finish(exc, report, deferred, max_dense_coarse, coarse_sweeps)
        n = A.row_layout.local_size
        self._work32 = Float32Work(n) if self._single else None
        self._done()

    def _build(self, A, Bl, plan: "_Plan", report, deferred):
        """The levels and the coarsest solve on this rank's levels. Collective
        on each level's communicator in turn (``self._lcomm``)."""
        comm = self.comm
        tm = self.timings
        aggregate_fn = AGGREGATIONS[plan.aggregate]
        Ak = A
        lcomm = self._lcomm = comm

        def note(message, *args):
            # report now if every rank of comm is here, else at the end
            if lcomm is comm:
                report(message, *args)
            else:
                deferred.append((message, args))

        while len(self.levels) < plan.max_levels - 1 and Ak.shape[0] > plan.max_coarse:
            t = time.perf_counter()
            S = self.strength(Ak)
            t, tm["strength"] = time.perf_counter(), tm["strength"] + time.perf_counter() - t
            agg, count = aggregate_fn(S)
            k = Bl.shape[1]
            total = lcomm.allreduce(count * k, op=MPI.SUM)
            t, tm["aggregate"] = time.perf_counter(), tm["aggregate"] + time.perf_counter() - t
            if total == 0 or total >= Ak.shape[0]:
                break                         # no coarsening possible
            made, _ = made_layout(count * k, lcomm)
            if self._agglomerate:
                # the limit is read here, so that a test may lower it
                clay, first, active = plan_coarse_level(
                    count * k, lcomm, plan.min_rows_per_rank,
                    max_reduction=_coarse.MAX_RANK_REDUCTION, gathered=lcomm is not comm,
                    made=made)
            else:
                clay, first, active = plan_coarse_level(count * k, lcomm, plan.min_rows_per_rank,
                                                        max_reduction=None, made=made)
                active = lcomm.Get_size()
            T, Bc = tentative_prolongator(Ak.row_layout, agg, count, Bl, clay, first)
            Bc = redistribute_rows(Bc, first, clay)
            t, tm["tentative"] = time.perf_counter(), tm["tentative"] + time.perf_counter() - t
            measure = self.strength.on_level(len(self.levels))
            P, rho = self.smooth(Ak, T, measure)
            if P is not T:
                T.free()
                # a smoothed P's rows hold a few aggregates' columns, never
                # diagonals: sliced ELL would pad them, and finding that out
                # costs a layout pass as long as a few products
                P.set_local_format("narrow")
            # where the measure filtered nothing, the prolongator was smoothed
            # with A itself: its estimate of rho(D^-1 A) serves the smoothers
            # too (GAMG's use_sa_esteig), instead of a second Lanczos iteration
            filtered = measure.filters and Ak.comm.allreduce(measure.has_weak(Ak), op=MPI.LOR)
            shared = rho if rho > 0 and not filtered else None
            t, tm["smooth"] = time.perf_counter(), tm["smooth"] + time.perf_counter() - t
            # finished on the ranks that made the coarse unknowns, then moved
            # whole to the gathered level's ranks
            rows = galerkin_rows(Ak, P, made)
            # only the `active` ranks of active_ranks own coarse rows: the
            # next level lives on their communicator, its layout the same
            # ranges relabelled (no data moves)
            sub = level_communicator(lcomm, active)
            slay = sub_layout(clay, sub)
            Ac = (DistCSR.from_local_rows(rows, slay, slay, check_finite=False)
                  if sub is not None else None)
            t, tm["galerkin"] = time.perf_counter(), tm["galerkin"] + time.perf_counter() - t
            pre, post = self._smoothers(Ak, len(self.levels), plan.presmoother, plan.postsmoother,
                                        rho=shared)
            if self._single:
                Ak, P, pre, post = self._rounded(Ak, P, pre, post, first=not self.levels)
            tm["smoothers"] += time.perf_counter() - t
            self.levels.append(Level(Ak, P, pre, post))
            self._level_info.append({"rho": rho})
            # one restriction now, on every rank of the level whatever its
            # thread count: on threads it builds the prolongator's transposed
            # copy here, at set-up, rather than in the first cycle
            self.levels[-1].P.rmatvec(self.levels[-1].r, out=self.levels[-1].bc)
            if report:
                note("level %d: %d rows, %d nonzeros", len(self.levels) - 1, Ak.shape[0],
                     Ak.global_nnz())
            Ak, Bl = Ac, Bc
            lcomm = self._lcomm = sub
            if sub is None:
                return                          # idle from here on: see _finish
        t = time.perf_counter()
        self.coarse_A = Ak
        if Ak.shape[0] <= plan.max_dense_coarse:
            self.coarse = CoarseSolver(Ak)
        else:
            pre, post = self._smoothers(Ak, len(self.levels), plan.presmoother, plan.postsmoother)
            self.coarse = RelaxationCoarseSolver(pre, post, plan.coarse_sweeps)
        if self._single:
            self.coarse = (self.coarse.single() if isinstance(self.coarse, CoarseSolver)
                           else DoubleCoarseSolver(self.coarse, Ak.row_layout.local_size))
        tm["coarse"] = time.perf_counter() - t
        if report:
            note("level %d (coarsest, %s solve): %d rows, %d nonzeros", len(self.levels),
                 self.coarse.kind, Ak.shape[0], Ak.global_nnz())

    def _build_reproducible(self, A, Bl, plan: "_Plan", report):
        """The levels of ``reproducible=True`` (:mod:`.reproducible`): keyed on
        the unknowns' canonical keys, products in key order, every rank on
        every level. Collective on ``A.comm``."""
        tm = self.timings
        self._lcomm = self.comm
        omega = getattr(self.smooth, "omega", None)       # None: unsmoothed
        Ak, keys = canonical(A), keys_of(A)
        while len(self.levels) < plan.max_levels - 1 and Ak.shape[0] > plan.max_coarse:
            t = time.perf_counter()
            measure = self.strength.on_level(len(self.levels))
            S, strong = rp.strength_graph(Ak, measure)
            t, tm["strength"] = time.perf_counter(), tm["strength"] + time.perf_counter() - t
            agg, clay, ckeys = rp.mis2_aggregation(Ak, S, keys)
            t, tm["aggregate"] = time.perf_counter(), tm["aggregate"] + time.perf_counter() - t
            if clay.global_size == 0 or clay.global_size >= Ak.shape[0]:
                break                         # no coarsening possible
            T, Bc = rp.tentative(Ak, agg, clay, keys, Bl)
            t, tm["tentative"] = time.perf_counter(), tm["tentative"] + time.perf_counter() - t
            P, rho = rp.smoothed(Ak, T, ckeys, omega, measure.filters, strong)
            if P is not T:
                T.free()
            Pc, Rc = canonical(P, ckeys), canonical(rp.transpose_rows(P), keys)
            t, tm["smooth"] = time.perf_counter(), tm["smooth"] + time.perf_counter() - t
            Ac = rp.level_operator(rp.galerkin(Ak, P, Rc), ckeys)
            t, tm["galerkin"] = time.perf_counter(), tm["galerkin"] + time.perf_counter() - t
            pre, post = self._smoothers(Ak, len(self.levels), plan.presmoother, plan.postsmoother)
            tm["smoothers"] += time.perf_counter() - t
            self.levels.append(Level(Ak, rp.Prolongation(Pc, Rc), pre, post))
            self._level_info.append({"rho": rho})
            if report:
                report("level %d: %d rows, %d nonzeros", len(self.levels) - 1, Ak.shape[0],
                       Ak.global_nnz())
            Ak, Bl, keys = Ac, Bc, ckeys
        t = time.perf_counter()
        self.coarse_A = Ak
        if Ak.shape[0] <= plan.max_dense_coarse:
            self.coarse = rp.CanonicalCoarseSolver(Ak, keys)
        else:
            pre, post = self._smoothers(Ak, len(self.levels), plan.presmoother, plan.postsmoother)
            self.coarse = RelaxationCoarseSolver(pre, post, plan.coarse_sweeps)
        tm["coarse"] = time.perf_counter() - t
        if report:
            report("level %d (coarsest, %s solve): %d rows, %d nonzeros", len(self.levels),
                   self.coarse.kind, Ak.shape[0], Ak.global_nnz())

    def _finish(self, exc, report, deferred, max_dense_coarse, coarse_sweeps):
        """Every rank of ``comm`` again: its last rank (on every level:
        :func:`.coarse.active_ranks`) tells the others the hierarchy's shape,
        an error raised on a sub-communicator, and the reports held back; idle
        ranks fill their levels in. Collective on ``comm``: one ``bcast``, and
        the summary's two reductions."""
        comm = self.comm
        root = comm.Get_size() - 1
        shape = None
        if comm.Get_rank() == root:
            ops = [L.A for L in self.levels] + ([self.coarse_A] if exc is None else [])
            shape = {"failed": exc is not None, "levels": len(self.levels),
                     "rows": [int(A.shape[0]) for A in ops],
                     "comm_ranks": [int(A.comm.Get_size()) for A in ops],
                     "coarse": None if exc is not None else self.coarse.kind,
                     "deferred": deferred}
        if comm.Get_size() > 1:
            shape = comm.bcast(shape, root=root)
        raise_from_root(comm, exc, shape["failed"], root=root)
        while len(self.levels) < shape["levels"]:
            self.levels.append(IdleLevel())
            self._level_info.append({"rho": None})
        if self.coarse is None:
            self.coarse_A = None
            self.coarse = IdleCoarseSolver(shape["coarse"])
        self._coarse_options = {"max_dense_coarse": max_dense_coarse, "sweeps": coarse_sweeps}
        if report:
            for message, args in shape["deferred"]:
                report(message, *args)
        self._summary = self._summarise(shape["rows"], shape["comm_ranks"])
        if report:
            report("done: %d levels, operator complexity %.3f, grid complexity %.3f",
                   len(self._summary["levels"]), self.operator_complexity(),
                   self.grid_complexity())

    @staticmethod
    def _smoothers(Ak, level: int, presmoother, postsmoother, rho: float | None = None):
        """The pre- and postsmoother of level ``level`` (one object when they
        are the same), given ``rho``, an estimate of ``rho(D^-1 A)`` already
        made, or None. Collective on ``Ak.comm``; a bad diagonal is raised on
        every rank with the level named."""
        try:
            pre = make_smoother(presmoother, Ak, rho=rho)
            post = pre if postsmoother == presmoother else make_smoother(postsmoother, Ak,
                                                                         rho=rho)
        except ValueError as e:     # raised alike on every rank (an agreed check)
            raise ValueError("amg level %d (%d rows): %s" % (level, Ak.shape[0], e)) from None
        return pre, post

    @staticmethod
    def _rounded(A, P, pre, post, first):
        """A level's operator, prolongator and smoothers in float32 (compact
        copies: a block multiplied in sliced ELL is not kept as CSR too); the
        float64 ones are freed (but not ``A`` of the ``first`` level, the
        caller's matrix). Collective on ``A.comm``."""
        A32, P32 = A.single(compact=True), P.single(compact=True)
        pre32 = pre.single(A32)
        post32 = pre32 if post is pre else post.single(A32)
        P.free()
        if not first:
            A.free()
        return A32, P32, pre32, post32

    # -- application -------------------------------------------------------------
    def _apply(self, r, out):
        """One cycle from a zero guess. Collective on ``comm``: :meth:`apply` is."""
        if self._single:
            self._work32.run(self._cycle, r, out)
        else:
            self._cycle(r, out)

    def _cycle(self, b, x):
        run_cycle(self.levels, self.coarse, 0, b, x, self.gamma, zero_guess=True)

    # -- summary -----------------------------------------------------------------
    def _summarise(self, rows: list, comm_ranks: list) -> dict:
        # collective on comm: rows and communicator sizes come from the last rank;
        # nonzeros and ranks owning rows are summed over all ranks (0 on an
        # idle level); bytes are maxima
        comm = self.comm
        ops = [L.A for L in self.levels] + [self.coarse_A]
        mine = np.zeros(2 * len(ops), dtype=np.int64)
        for i, A in enumerate(ops):
            if A is not None:
                mine[i] = A.local_nnz
                mine[len(ops) + i] = 1 if A.row_layout.local_size else 0
        summed = comm.allreduce(mine, op=MPI.SUM)
        nnz, active = summed[:len(ops)], summed[len(ops):]
        nbytes = sum(A.local_nbytes for A in ops if A is not None) \
            + sum(L.P.local_nbytes for L in self.levels if L.active) + self.coarse.nbytes
        most = np.zeros(2, dtype=np.int64)
        comm.Allreduce(np.array([nbytes, self.coarse.nbytes], dtype=np.int64), most, op=MPI.MAX)
        hier_max, coarse_max = most
        levels = [{"rows": r, "nnz": int(z), "ranks": int(a)}
                  for r, z, a in zip(rows, nnz, active)]
        coarse = {"solver": self.coarse.kind, "rows": rows[-1],
                  "stored_bytes_max_rank": int(coarse_max)}
        coarse.update(self._coarse_options)
        return {
            "levels": levels,
            "level_comm_ranks": [int(c) for c in comm_ranks],
            "coarse": coarse,
            "operator_complexity": float(nnz.sum() / nnz[0]) if nnz[0] else 1.0,
            "grid_complexity": float(sum(rows) / rows[0]) if rows[0] else 1.0,
            "hierarchy_bytes_max_rank": int(hier_max),
        }

    def gather_operator(self, level: int):
        """The operator of ``level`` (``len(levels)``: the coarsest) as scipy
        CSR on every rank, for tests and small matrices. Collective on
        ``comm``: the level's ranks gather it (on the level's communicator),
        then the last rank (on every level) broadcasts it."""
        ops = [L.A for L in self.levels] + [self.coarse_A]
        return self._gather(ops[level])

    def gather_prolongator(self, level: int):
        """The prolongator ``P`` of ``level`` (to it from ``level + 1``) as
        scipy CSR on every rank, for tests and small matrices. Collective on
        ``comm``, as :meth:`gather_operator`."""
        return self._gather(self.levels[level].P)

    def _gather(self, M):
        comm = self.comm
        if M is not None and M.comm is comm:
            return M.to_scipy()
        # the last rank of comm is on every level, and last on each
        out = M.to_scipy(root=M.comm.Get_size() - 1) if M is not None else None
        return comm.bcast(out, root=comm.Get_size() - 1)

    def operator_complexity(self) -> float:
        """Sum of nonzeros over all levels / nonzeros of the finest. Not collective."""
        return self._summary["operator_complexity"]

    def grid_complexity(self) -> float:
        """Sum of rows over all levels / rows of the finest. Not collective."""
        return self._summary["grid_complexity"]

    def _describe(self):
        d = dict(self._summary)
        d["cycle"] = self.options["cycle"]
        d["timings"] = {k: round(v, 4) for k, v in self.timings.items()}
        d["options"] = {k: v for k, v in self.options.items()}
        return d

    def __repr__(self) -> str:
        lv = self._summary["levels"]
        lines = ["SmoothedAggregation: %d levels, operator complexity %.3f, grid "
                 "complexity %.3f" % (len(lv), self.operator_complexity(),
                                      self.grid_complexity())]
        for i, L in enumerate(lv):
            lines.append("  level %d: %9d rows %11d nnz on %d ranks"
                         % (i, L["rows"], L["nnz"], L["ranks"]))
        return "\n".join(lines)


register("amg", SmoothedAggregation)
