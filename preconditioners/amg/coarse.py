"""Coarse levels: gathering small levels onto fewer ranks (and onto a
sub-communicator of those ranks), and the coarsest level's solve: redundant
and dense when it is small, relaxation when not."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from dmsolve import Layout, block_ranges
from dmsolve.bsp import BSP, free_inner_comm

__all__ = ["MAX_RANK_REDUCTION", "active_ranks", "coarse_layout", "made_layout",
           "plan_coarse_level", "sub_communicator", "level_communicator", "sub_layout",
           "free_sub_communicators", "redistribute_rows", "CoarseSolver",
           "RelaxationCoarseSolver", "IdleCoarseSolver"]

#: The ranks holding a level shrink by at most this factor from one level to
#: the next (GAMG's rank reduction): no rank receives the coarse rows of more
#: than this many ranks in one redistribution.
MAX_RANK_REDUCTION = 4


def active_ranks(size: int, active: int) -> np.ndarray:
    """The ranks of a communicator of ``size`` that hold a level gathered onto
    ``active`` of them: the last rank of each of ``active`` consecutive groups
    of (nearly) equal size, ``(j + 1) * size // active - 1`` for ``j < active``.

    The ranks are spread over the communicator, so the ranks that receive a
    gathered level's rows are as far apart as the groups they serve, and the
    last rank is always among them: nested levels end on the communicator's
    last rank, not on rank 0, which keeps only its finest-level work
    (PETSc GAMG's reduction also groups consecutive ranks). Not collective.
    """
    size, active = int(size), int(active)
    if not 1 <= active <= size:
        raise ValueError("active_ranks: %d active ranks of %d" % (active, size))
    return (np.arange(1, active + 1, dtype=np.int64) * size) // active - 1


def made_layout(local_count: int, comm) -> tuple[Layout, int]:
    """The layout of the coarse unknowns as this rank made them (each rank
    owns its own aggregates' unknowns, numbered rank by rank) and this rank's
    first coarse id. Collective on ``comm`` (one ``allgather``)."""
    counts = np.array(comm.allgather(int(local_count)), dtype=np.int64)
    ranges = np.concatenate(([0], np.cumsum(counts)))
    return Layout(ranges, comm)._trusted(), int(ranges[comm.Get_rank()])


def plan_coarse_level(local_count: int, comm, min_rows_per_rank: int, *,
                      max_reduction: int | None = MAX_RANK_REDUCTION,
                      gathered: bool = False,
                      made: Layout | None = None) -> tuple[Layout, int, int]:
    """The layout of the next level, this rank's first coarse id, and the
    number of ranks of ``comm`` (:func:`active_ranks`) that the next level
    lives on.

    Coarse unknowns are numbered rank by rank in the order they were made.
    When fewer than ``min_rows_per_rank`` would land on each rank, the level
    is gathered onto ``ceil(N / min_rows_per_rank)`` ranks, but onto no
    fewer than ``ceil(comm.size / max_reduction)`` (None: no limit): the
    ranks :func:`active_ranks` names, in order, each owning a block of
    :func:`~dmsolve.block_ranges`, the others owning nothing. The layout stays
    contiguous, so no renumbering is needed. The natural layout (each rank
    keeps the unknowns it made) is kept when every rank would stay active
    with at least a quarter of ``min_rows_per_rank`` rows, and only on the
    hierarchy's own communicator (``gathered=False``): a level that was
    already gathered onto a sub-communicator is balanced with
    :func:`~dmsolve.block_ranges`, as when the idle ranks were counted as
    owning nothing. ``made``: :func:`made_layout` of ``local_count``, if the
    caller has it.

    Collective on ``comm`` (one ``allgather``, none when ``made`` is given).

    Returns
    -------
    layout : Layout
        On ``comm``; only the ranks :func:`active_ranks` names own rows.
    first : int
        Global id of this rank's first coarse unknown (in the numbering of
        the ranks that made them).
    active : int
        The number of ranks the next level is distributed over.
    """
    if made is None:
        made, first = made_layout(local_count, comm)
    else:
        first = made.start
    natural = made
    counts = natural.local_sizes
    N = natural.global_size
    size = comm.Get_size()
    active = int(min(size, max(1, -(-N // max(1, min_rows_per_rank)))))
    if max_reduction is not None:
        active = max(active, -(-size // int(max_reduction)))
    if not gathered and active == size and counts.min() >= min_rows_per_rank // 4:
        return natural, first, size
    sizes = np.zeros(size, dtype=np.int64)
    sizes[active_ranks(size, active)] = np.diff(block_ranges(N, active))
    ranges = np.concatenate(([0], np.cumsum(sizes)))
    return Layout(ranges, comm)._trusted(), first, active


def coarse_layout(local_count: int, comm, min_rows_per_rank: int) -> tuple[Layout, int]:
    """The layout of the next level and this rank's first coarse id, with
    no limit on the rank reduction and every rank of ``comm`` counted:
    :func:`plan_coarse_level` with ``max_reduction=None``.
    Collective on ``comm`` (one ``allgather``).
    """
    layout, first, _ = plan_coarse_level(local_count, comm, min_rows_per_rank,
                                         max_reduction=None)
    return layout, first


# Sub-communicators are cached as an MPI attribute of their parent: a dict
# {ranks (a tuple of the parent's ranks): sub-communicator, or None on the
# ranks outside}. The keyval is created on first use (no MPI at import time).
_SUB_KEYVAL = None


def _sub_cache(comm, create: bool) -> dict | None:
    global _SUB_KEYVAL
    if _SUB_KEYVAL is None:
        if not create:
            return None
        _SUB_KEYVAL = MPI.Comm.Create_keyval()
    cache = comm.Get_attr(_SUB_KEYVAL)
    if cache is None and create:
        cache = {}
        comm.Set_attr(_SUB_KEYVAL, cache)
    return cache


def _cached_split(comm, ranks: tuple):
    """The communicator of ``ranks`` (ascending ranks of ``comm``, numbered
    in that order), or None on the other ranks; made by one ``comm.Split``
    the first time and cached on ``comm``. Collective on ``comm`` the first
    time for given ``ranks``."""
    if len(ranks) == comm.Get_size():
        return comm
    cache = _sub_cache(comm, create=True)
    if ranks not in cache:
        inside = comm.Get_rank() in ranks
        sub = comm.Split(0 if inside else MPI.UNDEFINED, comm.Get_rank())
        cache[ranks] = sub if inside else None
    return cache[ranks]


def sub_communicator(comm, count: int, start: int = 0):
    """The communicator of ranks ``start, ..., start + count - 1`` of ``comm``
    (ranks numbered alike), or None on the other ranks; ``comm`` itself when
    that is every rank.

    One ``comm.Split`` the first time a set of ranks is asked for; the result
    is cached on ``comm`` (an MPI attribute) and returned again by later
    calls, so repeated AMG set-ups create no new communicators. Cached
    communicators live as long as ``comm``: :func:`free_sub_communicators`
    frees them (call it before freeing ``comm``).

    Collective on ``comm`` the first time for a given ``(start, count)``
    (every rank of ``comm`` must ask for the same one), not collective
    afterwards.
    """
    size = comm.Get_size()
    start, count = int(start), int(count)
    if not (0 <= start and 1 <= count and start + count <= size):
        raise ValueError("sub_communicator: ranks %d..%d are not ranks of a communicator of "
                         "%d" % (start, start + count - 1, size))
    return _cached_split(comm, tuple(range(start, start + count)))


def level_communicator(comm, active: int):
    """The communicator of the ``active`` ranks of ``comm`` that
    :func:`active_ranks` names (in their order in ``comm``), or None on the
    other ranks; ``comm`` itself when ``active`` is its size. Cached on
    ``comm`` as :func:`sub_communicator`'s are.

    Collective on ``comm`` the first time for a given ``active`` (every rank
    of ``comm`` must ask for the same one), not collective afterwards.
    """
    ranks = active_ranks(comm.Get_size(), active)
    return _cached_split(comm, tuple(int(r) for r in ranks))


def free_sub_communicators(comm) -> int:
    """Free the communicators :func:`sub_communicator` and
    :func:`level_communicator` cached on ``comm`` (and, first, those cached
    on them, and dmsolve's private duplicates of them); return how many this
    rank freed.

    Call it when nothing built on them (an AMG hierarchy of a matrix on
    ``comm``) is used any more: their halo exchanges and coarse solves would
    fail. A later set-up creates them again. ``comm`` itself is not freed.

    Collective on ``comm`` (``MPI_Comm_free`` of each sub-communicator is
    collective on it; every rank of ``comm`` holds the same cache keys).
    """
    cache = _sub_cache(comm, create=False)
    if not cache:
        return 0
    freed = 0
    for key in sorted(cache):
        sub = cache.pop(key)
        if sub is not None:
            freed += free_sub_communicators(sub)
            free_inner_comm(sub)
            sub.Free()
            freed += 1
    return freed


def sub_layout(layout: Layout, sub) -> Layout | None:
    """``layout`` relabelled onto ``sub``, a communicator of some of
    ``layout.comm``'s ranks in their order there (:func:`sub_communicator`,
    :func:`level_communicator`), or None where ``sub`` is None. Pure
    relabelling: the ranks outside ``sub`` must own nothing, so every global
    index keeps its owner. Not collective.
    """
    if sub is None:
        if layout.local_size:
            raise RuntimeError("sub_layout: a rank outside the sub-communicator owns %d rows"
                               % layout.local_size)
        return None
    if sub is layout.comm:
        return layout
    mine, theirs = sub.Get_group(), layout.comm.Get_group()
    ranks = np.array(MPI.Group.Translate_ranks(mine, list(range(sub.Get_size())), theirs),
                     dtype=np.int64)
    mine.Free()
    theirs.Free()
    ranges = np.concatenate((layout.ranges[ranks], [layout.global_size]))
    inside = int(layout.local_sizes[ranks].sum())
    if inside != layout.global_size:
        raise RuntimeError("sub_layout: the ranks outside the sub-communicator own %d rows"
                           % (layout.global_size - inside))
    out = Layout(ranges, sub)
    return out._trusted() if layout.agreed else out


def redistribute_rows(values: np.ndarray, first: int, layout: Layout) -> np.ndarray:
    """Move rows ``first, first+1, ...`` (this rank's ``values``) to their owners
    in ``layout``; return this rank's owned rows in order.
    Collective on ``layout.comm`` (one BSP superstep)."""
    ids = first + np.arange(values.shape[0], dtype=np.int64)
    ctx = BSP(layout.comm)
    tag = ctx.tags("ids", "values")
    dests = layout.owner(ids) if ids.size else np.zeros(0, np.int64)
    ctx.send_rows(dests, ids, tag.ids)
    ctx.send_rows(dests, np.ascontiguousarray(values), tag.values)
    inbox = ctx.sync("redistribute")
    got = inbox.concat(tag.ids, dtype=np.int64)
    vals = inbox.concat(tag.values, dtype=values.dtype, shape=values.shape[1:])
    out = np.empty((layout.local_size,) + values.shape[1:], dtype=values.dtype)
    out[got - layout.start] = vals
    return out


class CoarseSolver:
    """A redundant dense solve at the coarsest level: every rank gathers the
    whole coarse matrix and keeps its own rows of the (pseudo-)inverse.

    The pseudo-inverse (from a symmetric eigendecomposition when the matrix
    is symmetric) also serves singular consistent problems (Neumann, graph
    Laplacians): it returns the minimum-norm solution. It is meant for small
    matrices only: the set-up holds a few dense ``n x n`` arrays and costs
    ``O(n^3)`` on every rank, so :class:`SmoothedAggregation` uses it up to
    ``max_dense_coarse`` rows and relaxes above (:class:`RelaxationCoarseSolver`).
    Set-up is collective on ``A.comm``; :meth:`solve` is collective (one
    ``Allgatherv``).
    """

    kind = "dense"

    def __init__(self, A):
        import scipy.linalg as sla
        S = A.to_scipy().toarray()
        self.n = S.shape[0]
        self.layout = A.row_layout
        start, stop = self.layout.owned_range
        if self.n and np.allclose(S, S.T, rtol=1e-12, atol=0):
            w, V = np.linalg.eigh(S)
            tol = np.abs(w).max() * self.n * np.finfo(float).eps
            winv = np.where(np.abs(w) > tol, 1.0 / np.where(w == 0, 1, w), 0.0)
            # only this rank's rows of (V winv V^T) are needed: the n x n
            # inverse itself is never formed
            self._rows = (V[start:stop] * winv) @ V.T
        else:
            self._rows = sla.pinv(S)[start:stop] if self.n else np.zeros((0, 0))
        self._b = np.zeros(self.n)
        self._counts = self.layout.local_sizes.astype(np.int64)
        self._displs = self.layout.ranges[:-1].astype(np.int64)
        self.nnz = int(np.count_nonzero(S))

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank after set-up (its rows of the inverse and a
        gather buffer). Not collective."""
        return int(self._rows.nbytes + self._b.nbytes)

    def single(self) -> "CoarseSolver":
        """This solve with its rows of the inverse rounded to float32, for
        float32 vectors (``amg(precision="single")``). Not collective."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._rows = self._rows.astype(np.float32)
        new._b = np.zeros(self.n, np.float32)
        return new

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x = A^+ b`` on this rank's rows (local arrays of the solver's
        dtype: float64, or float32 after :meth:`single`). Collective on
        ``A.comm`` (one ``Allgatherv`` of ``b``)."""
        t = MPI.FLOAT if self._b.dtype == np.float32 else MPI.DOUBLE
        self.layout.comm.Allgatherv([b, t], [self._b, (self._counts, self._displs), t])
        np.dot(self._rows, self._b, out=x)


class RelaxationCoarseSolver:
    """The coarsest level relaxed instead of solved: from a zero guess,
    ``sweeps`` applications of the level's presmoother, then ``sweeps`` of
    its postsmoother.

    For a coarsest level too large for :class:`CoarseSolver` (AMG that
    cannot coarsen: ``max_levels=1``, ``max_coarse`` at least the size of
    ``A``, a diagonal or otherwise uncoupled matrix). Storage is that of the
    smoothers, proportional to this rank's rows; with adjoint pre- and
    postsmoothers (:func:`preconditioners.smoothers.adjoint_smoother`) the
    operator is symmetric when ``A`` is. Construction is not collective (the
    smoothers are built by the caller); :meth:`solve` is collective among
    neighbouring ranks, as the smoothers are.
    """

    kind = "relax"

    def __init__(self, presmoother, postsmoother, sweeps: int):
        self.presmoother, self.postsmoother = presmoother, postsmoother
        self.sweeps = int(sweeps)
        self.nnz = 0

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank besides the smoothers' (which are
        proportional to this rank's rows): none. Not collective."""
        return 0

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x ~= A^-1 b`` by relaxation from zero. Collective among
        neighbouring ranks (the smoothers' halo exchanges)."""
        for k in range(self.sweeps):
            self.presmoother.smooth(b, x, zero_guess=(k == 0))
        for _ in range(self.sweeps):
            self.postsmoother.smooth(b, x, False)


class DoubleCoarseSolver:
    """A relaxed coarsest level (``solver``, on the float64 coarsest
    operator) inside a float32 cycle (``amg(precision="single")``): ``b`` and
    ``x`` are rounded to and from float64 through kept buffers of this rank's
    ``n`` rows. (A dense coarsest solve is rounded instead:
    :meth:`CoarseSolver.single`.) Construction is not collective;
    :meth:`solve` is collective as ``solver.solve`` is.
    """

    def __init__(self, solver, n: int):
        self.solver = solver
        self.kind = solver.kind
        self.nnz = solver.nnz
        self._b, self._x = np.zeros(n), np.zeros(n)

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank: the solver's and the two buffers. Not collective."""
        return int(self.solver.nbytes + self._b.nbytes + self._x.nbytes)

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """``x ~= A^-1 b`` in float64, ``b`` and ``x`` float32. Collective as
        the wrapped solver's :meth:`solve`."""
        np.copyto(self._b, b)
        self.solver.solve(self._b, self._x)
        np.copyto(x, self._x, casting="same_kind")


class IdleCoarseSolver:
    """The coarsest level's solve on a rank outside the coarsest level's
    communicator: it owns no rows of that level, so there is nothing to
    solve and nobody to talk to. ``kind`` is the real solver's (the same in
    every rank's summary). Not collective; :meth:`solve` does nothing.
    """

    nnz = 0

    def __init__(self, kind: str):
        self.kind = kind

    @property
    def nbytes(self) -> int:
        """Bytes kept on this rank: none. Not collective."""
        return 0

    def solve(self, b: np.ndarray, x: np.ndarray) -> None:
        """Nothing (``b`` and ``x`` are empty here). Not collective."""
