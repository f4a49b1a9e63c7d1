"""Exact splitters of :func:`dmsolve.bsp.psort`: where each rank's sorted
items cut into the blocks of the global order, found by a search led by the
blocks' ranks (with a histogram round first when the boundaries are
crowded), without any rank holding more than its items and a few samples.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ._ledger import Ledger
from ._superstep import BSP
from ._unique import stable_argsort

__all__ = ["Local", "splitters", "SAMPLES", "ALL_CANDIDATES", "SAMPLE_SPACING",
           "HISTOGRAM_SAMPLES", "HISTOGRAM_MEMBERS"]


class Local:
    """This rank's sorted items and the lexicographic search in them.

    An item travels in the search as its strict key ``(key row, gid, rank,
    position)``, ``position`` being its place in this rank's sorted items:
    within one rank, the positions of equal ``(key, gid)`` pairs are in the
    order of their input indices, so this is the order ``(key, gid, rank,
    index)``, and only the rank that owns an item needs its position."""

    def __init__(self, K, G, rank):
        self.K, self.G, self.rank = K, G, rank

    def count_less(self, lo: int, hi: int, key, ints) -> int:
        """Number of local items below the strict key (key, ints), given that
        the items before ``lo`` are below it and those from ``hi`` on are not
        (``ints``: gid, rank, position)."""
        if ints[1] == self.rank:        # one of mine: the items below it are its position
            return int(ints[2])
        a, b = lo, hi
        for c in range(self.K.shape[1]):
            col = self.K[a:b, c]
            a, b = (a + int(np.searchsorted(col, key[c], "left")),
                    a + int(np.searchsorted(col, key[c], "right")))
            if a == b:
                return a
        col = self.G[a:b]
        a, b = (a + int(np.searchsorted(col, ints[0], "left")),
                a + int(np.searchsorted(col, ints[0], "right")))
        return b if self.rank < ints[1] else a


@dataclass
class _Search:
    """The splitter search on this rank. Global: ``bounds`` (the blocks'
    first positions), ``counts`` (every rank's items) and the position table
    of :func:`_position_bounds` (``table``, ``last_pos``, ``first_pos``).
    Per boundary ``j``, changed as the search goes: this rank's candidates
    are its items ``lo[j] .. hi[j]-1``, ``below[j]`` items of all ranks lie
    below the members' candidates, and ``split[j]`` is the boundary's place
    in this rank's items once known. Not collective."""

    bounds: np.ndarray
    counts: np.ndarray
    table: np.ndarray
    last_pos: np.ndarray
    first_pos: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    below: np.ndarray
    split: np.ndarray


def splitters(local: Local, bounds: np.ndarray, counts: np.ndarray, comm: MPI.Comm,
               ledger):
    """Local split positions ``split[0..p]`` such that the items below
    ``split[j]`` on all ranks are exactly the first ``bounds[j]`` of the
    global order. Collective on ``comm``; returns ``(split, rounds)``.

    Boundary ``j`` (0 < j < p) is led by rank ``j``. Every rank that still
    holds candidates for it (a *member*: its items ``lo[j] .. hi[j]-1``) sends
    the leader one message a round: ``[lo, hi]`` and evenly spaced samples
    of its candidates, each standing for the items up to the next: all of
    them up to :data:`ALL_CANDIDATES`, else one per :data:`SAMPLE_SPACING`
    (at least :data:`SAMPLES`; :func:`_sample_count`). From the samples the
    leader bounds the count below any key to within ``E`` (the members'
    largest weights, less one each) and takes two pivots that bracket the
    target for certain: the last sample estimated at or below it, and the
    first one at or above it even after ``E``. Members count below both and
    keep what lies between, so the target never leaves the bracket, and a
    round leaves about ``2 SAMPLE_SPACING`` candidates a member when the
    members are few (fewer than ``4/SAMPLES`` of them plus two in any case):
    the next round sends them whole and the leader places the boundary. A
    member left with nothing drops out with its final count.
    The leader places the boundary (one message per member with its split)
    when the counts hit the target, when one member remains, or when every
    member sent all its candidates (then it sorts them and counts off the
    target).

    Before the search, the ranks' first and last items (one ``Allgather``)
    bound every rank's positions in the global order (:func:`_position_bounds`):
    a rank whose items all lie below a boundary, or all at or above it, is
    settled for that boundary and never joins its search. For keys already
    near their place (a block-partitioned mesh, a slab's vertex order) that
    leaves a few members per boundary, so a rank talks to a few leaders, not
    to every rank. For keys spread over every block it settles nothing, and
    the first round is then a histogram (:func:`_histogram`): a regular sample
    of every rank's items is gathered by all, and one ``Allreduce`` of the
    ranks' counts below the samples gives each sample's exact global
    position, so that every boundary starts between two consecutive samples
    with no search messages at all; the members of what is left are few, and
    hold few candidates each.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    if ledger is None:            # the histogram's collectives are recorded too
        ledger = Ledger(comm)
    n = local.K.shape[0]
    total = int(bounds[-1])
    split = np.zeros(size + 1, dtype=np.int64)
    split[size] = n
    open_ = [j for j in range(1, size) if 0 < bounds[j] < total]
    for j in range(1, size):
        if bounds[j] >= total:
            split[j] = n
    if not open_:                 # the same on every rank: bounds are global
        return split, 0
    table, last_pos, first_pos = _position_bounds(local, counts, comm)
    nmembers, settled_below = _members(bounds, counts, last_pos, first_pos)
    # this rank's candidates for boundary j: its items lo[j] .. hi[j]-1, and
    # the items of all ranks below the members' candidates: below[j]
    lo = np.zeros(size + 1, dtype=np.int64)
    hi = np.full(size + 1, n, dtype=np.int64)
    below = settled_below.copy()
    for j in open_:
        if last_pos[rank] < bounds[j]:       # all of this rank's items are below j
            split[j] = lo[j] = n
        elif first_pos[rank] >= bounds[j]:   # all at or above j
            split[j] = hi[j] = 0
        elif nmembers[j] == 1:               # the others are settled: j is in my items
            split[j] = lo[j] = hi[j] = bounds[j] - settled_below[j]
    searched = [j for j in open_ if nmembers[j] > 1]
    if not searched:              # the same on every rank: the table is global
        return split, 0
    rounds = 0
    if _crowded(nmembers[searched], size):   # the same on every rank
        rounds = 1
        search = _Search(bounds, counts, table, last_pos, first_pos, lo, hi, below, split)
        searched = _histogram(local, search, searched, comm, ledger)
        if not searched:
            return split, rounds
    ctx = BSP(comm, ledger=ledger)
    # member -> leader: its interval and samples; leader -> member: its
    # split, or two pivots
    tag = ctx.tags("candidates", "pivots")
    for j in searched:
        if lo[j] < hi[j]:
            _send_candidates(ctx, tag.candidates, local, j, int(lo[j]), int(hi[j]))
    inbox = ctx.sync("psort:candidates")
    leader = _Leader(int(bounds[rank]), int(below[rank]), local.K.shape[1], local.K.dtype,
                     tag) if rank in searched else None
    while True:
        rounds += 1
        # leaders -> their members: a split each, or two pivots
        searching = leader is not None and leader.decide(ctx, inbox)
        ctx.vote(searching)
        inbox = ctx.sync("psort:pivots")
        for j, msg in inbox.messages(tag.pivots):
            if msg[0] == _PLACE:
                split[j] = msg[1]
                continue
            # count below both pivots and keep the items between them
            a, b = int(lo[j]), int(hi[j])
            key1, key2 = _pivot_keys(msg, local.K.shape[1], local.K.dtype)
            new_lo = local.count_less(a, b, key1, msg[2:5])
            new_hi = local.count_less(new_lo, b, key2, msg[5:8]) if msg[1] else b
            lo[j], hi[j] = new_lo, new_hi
            if new_lo == new_hi:
                split[j] = new_lo   # the boundary lies past these items for good
            _send_candidates(ctx, tag.candidates, local, j, new_lo, new_hi)
        if not inbox.any_active:  # every open boundary was placed: the same on every rank
            break
        inbox = ctx.sync("psort:counts")
    return split, rounds


def _histogram(local: Local, search: _Search, searched, comm: MPI.Comm, ledger) -> list:
    """The first round of the search when its boundaries are crowded: the
    exact global position of a sample of the members' items.

    Every rank holding items on both sides of a searched boundary contributes
    its first and last items (already in ``table``) and
    :data:`HISTOGRAM_SAMPLES` evenly spaced ones at a phase of its own
    (:func:`_histogram_positions`; one ``Allgatherv`` of ``c + 1`` words
    each: the key and gid, the owner alone needs the position); every rank
    counts its items below every sample, and one ``Allreduce`` of the counts
    (int32 while ``N < 2**31``) gives each sample's global position. Each
    searched boundary then lies on a sample, or between two consecutive
    ones: the ``lo``, ``hi``, ``below`` and ``split`` of ``search`` are
    updated in place, and the boundaries still to search are returned (the
    same on every rank).
    The two collectives are recorded in the ledger as supersteps
    (``psort:samples``, ``psort:histogram``). Collective on ``comm``."""
    bounds, counts, table = search.bounds, search.counts, search.table
    last_pos, first_pos = search.last_pos, search.first_pos
    lo, hi, below, split = search.lo, search.hi, search.below, search.split
    size = comm.Get_size()
    n, ncols = local.K.shape
    width = ncols + 1
    t0 = time.perf_counter()
    # the senders: the ranks that are members of a searched boundary
    at = np.sort(bounds[searched])
    sender = (counts > 0) & (np.searchsorted(at, last_pos, "right")
                             > np.searchsorted(at, first_pos, "right"))
    nsamp = np.where(sender, np.minimum(counts, HISTOGRAM_SAMPLES), 0)
    rank = comm.Get_rank()
    pos = _histogram_positions(n, rank, size) if sender[rank] else np.zeros(0, np.int64)
    mine = np.empty((pos.size, width), dtype=np.int64)
    mine[:, :ncols] = np.ascontiguousarray(local.K[pos]).view(np.int64)
    mine[:, ncols] = local.G[pos]
    gathered = np.empty((int(nsamp.sum()), width), dtype=np.int64)
    t1 = time.perf_counter()
    comm.Allgatherv(mine, [gathered, nsamp * width, None, MPI.INT64_T])
    t2 = time.perf_counter()
    ledger.record_superstep("psort:samples", t1 - t0, t2 - t1, mine.nbytes,
                            gathered.nbytes - mine.nbytes, 0, 0)
    # the samples: the senders' first items, gathered ones and last items
    ends = np.flatnonzero(sender)
    rows = np.concatenate((table[ends, :width], gathered, table[ends, width:]))
    src = np.concatenate((ends, np.repeat(np.arange(size), nsamp), ends))
    place = np.full(src.size, -1, dtype=np.int64)   # the positions of my own samples
    if sender[rank]:
        place[src == rank] = np.concatenate(([0], pos, [n - 1]))
    keys = np.ascontiguousarray(rows[:, :ncols]).view(local.K.dtype)
    ints = np.column_stack((rows[:, ncols], src, place))
    below_here = _count_below(local, keys, ints)
    if int(bounds[-1]) < 2 ** 31:     # the same on every rank
        below_here = below_here.astype(np.int32)
    position = np.empty_like(below_here)
    t3 = time.perf_counter()
    comm.Allreduce(below_here, position, op=MPI.SUM)
    t4 = time.perf_counter()
    ledger.record_superstep("psort:histogram", t3 - t2, t4 - t3, position.nbytes,
                            position.nbytes, 0, 0)
    # a sample's global position is the count below it, so their order is
    # the samples' order (an item sampled twice, as first item and as a
    # sample, is there twice with the same counts, which does no harm)
    order = stable_argsort(position)
    position, below_here = position[order], below_here[order]
    target = bounds[searched]
    i = np.searchsorted(position, target, "right") - 1       # the last sample at or below
    left = np.where(i >= 0, below_here[np.maximum(i, 0)], 0)
    right = np.where(i + 1 < position.size,
                     below_here[np.minimum(i + 1, position.size - 1)], n)
    at_sample = (i >= 0) & (position[np.maximum(i, 0)] == target)
    rest = []
    for k, j in enumerate(searched):
        lo[j] = left[k]
        hi[j] = left[k] if at_sample[k] else right[k]
        below[j] = position[i[k]] if i[k] >= 0 else 0
        if lo[j] == hi[j]:
            split[j] = lo[j]
        if not at_sample[k]:
            rest.append(j)
    return rest


def _crowded(nmembers: np.ndarray, size: int) -> bool:
    """Whether the searched boundaries (``nmembers`` members each) start with
    a histogram round: when they have :data:`HISTOGRAM_MEMBERS` members on
    average, or every rank. Not collective."""
    return float(np.mean(nmembers)) >= min(HISTOGRAM_MEMBERS, size)


def _histogram_positions(m: int, rank: int, size: int) -> np.ndarray:
    """Positions of the :data:`HISTOGRAM_SAMPLES` evenly spaced samples of
    ``m`` sorted items (all of them when there are fewer), at a phase that
    depends on the rank: rank ``q`` samples its quantiles ``(k + (q + 1/2)
    / size) / HISTOGRAM_SAMPLES``, so that ranks whose keys are alike (random
    keys) sample different quantiles and the samples of all ranks, sorted,
    are about ``N / (size HISTOGRAM_SAMPLES)`` items apart, not clustered
    into ``HISTOGRAM_SAMPLES`` groups of ``size``."""
    s = HISTOGRAM_SAMPLES
    if m <= s:
        return np.arange(m, dtype=np.int64)
    phase = (2 * rank + 1) / (2 * size)
    return ((np.arange(s) + phase) * m / s).astype(np.int64)


def _count_below(local: Local, keys: np.ndarray, ints: np.ndarray) -> np.ndarray:
    """This rank's number of items below each strict key ``(keys[i],
    ints[i])`` (``ints``: gid, rank, index): a vectorised search of the first
    key column, then, for the keys it ties, one lexicographic sort of them
    with the local items they tie (a loop of searches when there are a few).
    Not collective."""
    col = local.K[:, 0]
    a = np.searchsorted(col, keys[:, 0], "left").astype(np.int64)
    b = np.searchsorted(col, keys[:, 0], "right")
    tied = np.flatnonzero(b > a)
    if tied.size <= _FEW_TIES:
        for i in tied:
            a[i] = local.count_less(int(a[i]), int(b[i]), keys[i], ints[i])
        return a
    own = tied[ints[tied, 1] == local.rank]
    a[own] = ints[own, 2]               # one of mine: the items below it are its position
    tied = tied[ints[tied, 1] != local.rank]
    if tied.size:
        a[tied] = _count_tied(local, keys[tied], ints[tied], a[tied], b[tied])
    return a


def _count_tied(local: Local, keys, ints, a, b) -> np.ndarray:
    """The local items below each strict key of another rank, given that the
    items before ``a`` are below it and those from ``b`` on are not: the
    local items of the ranges ``a .. b-1`` and the keys in one lexicographic
    sort by (key columns, gid, rank); a local item and a key never have the
    same rank, so the order between them is strict. Not collective."""
    n = local.K.shape[0]
    mark = np.zeros(n + 1, dtype=np.int64)
    np.add.at(mark, a, 1)
    np.add.at(mark, b, -1)
    items = np.flatnonzero(np.cumsum(mark[:n]) > 0)       # sorted local positions
    ncols = local.K.shape[1]
    K = np.concatenate((local.K[items], keys))
    G = np.concatenate((local.G[items], ints[:, 0]))
    rank = np.concatenate((np.full(items.size, local.rank, dtype=np.int64), ints[:, 1]))
    order = np.lexsort((rank, G) + tuple(K[:, c] for c in range(ncols - 1, -1, -1)))
    is_item = order < items.size
    items_up_to = np.cumsum(is_item)
    at = np.empty(order.size, dtype=np.int64)
    at[order] = np.arange(order.size)
    below_in_items = items_up_to[at[items.size:]]          # the key itself is no item
    # the items of the union below the key, less those before a (all below it)
    return a + below_in_items - np.searchsorted(items, a, "left")


def _position_bounds(local: Local, counts: np.ndarray, comm: MPI.Comm):
    """Bounds on every rank's positions in the global order, from the ranks'
    first and last items (one ``Allgather`` of ``2c + 2`` words per rank).

    Returns ``(table, last_pos, first_pos)``, the same on every rank:
    ``table[q]`` holds rank ``q``'s first and last items (key words and gid,
    twice; their positions are 0 and ``counts[q] - 1``), and rank ``q``'s
    last item is at a position at most ``last_pos[q]`` (the items of the
    ranks whose first item is not above it, less one), and its first item at
    a position at least ``first_pos[q]`` (the items of the ranks whose last
    item is below it). A rank without items gets ``-1`` and ``N``.
    Collective on ``comm``."""
    size = comm.Get_size()
    n, ncols = local.K.shape
    width = ncols + 1
    row = np.zeros(2 * width, dtype=np.int64)
    if n:
        for half, i in ((0, 0), (1, n - 1)):
            at = half * width
            row[at:at + ncols] = np.ascontiguousarray(local.K[i]).view(np.int64)
            row[at + ncols] = local.G[i]
    table = np.empty((size, 2 * width), dtype=np.int64)
    comm.Allgather(row, table)
    has = np.flatnonzero(counts > 0)
    last_pos = np.full(size, -1, dtype=np.int64)
    first_pos = np.full(size, int(counts.sum()), dtype=np.int64)
    if has.size == 0:
        return table, last_pos, first_pos
    # the 2m endpoints in the strict order (key, gid, rank, position); a
    # first item sorts before a last one with the same strict key (the same item)
    ends = np.concatenate((table[has, :width], table[has, width:]))
    keys = np.ascontiguousarray(ends[:, :ncols]).view(local.K.dtype)
    owner = np.concatenate((has, has))
    last = np.repeat([0, 1], has.size)
    order = np.lexsort((last, last * (counts[owner] - 1), owner, ends[:, ncols])
                       + tuple(keys[:, c] for c in range(ncols - 1, -1, -1)))
    w = counts[owner[order]]
    is_last = last[order] == 1
    firsts_upto = np.cumsum(np.where(is_last, 0, w))
    lasts_before = np.cumsum(np.where(is_last, w, 0)) - np.where(is_last, w, 0)
    last_pos[owner[order][is_last]] = firsts_upto[is_last] - 1
    first_pos[owner[order][~is_last]] = lasts_before[~is_last]
    return table, last_pos, first_pos


def _members(bounds, counts, last_pos, first_pos):
    """For each boundary ``j``: how many ranks may hold items on both sides
    of it (``first_pos < bounds[j] <= last_pos``; the others are settled), and
    how many items the ranks settled below it hold. Not collective; the same
    on every rank. O(p log p)."""
    size = counts.size
    member = counts > 0
    a = np.searchsorted(bounds, first_pos[member], "right")   # first j above first_pos
    b = np.searchsorted(bounds, last_pos[member], "right")    # j below b: bounds[j] <= last_pos
    diff = np.zeros(size + 2, dtype=np.int64)
    np.add.at(diff, a, 1)
    np.add.at(diff, b, -1)
    nmembers = np.cumsum(diff)[:size + 1]
    by_last = stable_argsort(last_pos)
    cum = np.concatenate(([0], np.cumsum(counts[by_last])))
    settled_below = cum[np.searchsorted(last_pos[by_last], bounds, "left")]
    return nmembers, settled_below


#: samples each member sends its leader per round, at least (a round keeps
#: fewer than 4/SAMPLES of the candidates, plus two)
SAMPLES = 16
#: a member holding at most this many candidates sends them all to the leader,
#: which then places the boundary at once
ALL_CANDIDATES = 64
#: a member holding more sends one sample per this many candidates (at least
#: SAMPLES samples)
SAMPLE_SPACING = 16
#: samples of every member's items in the histogram round, besides its first
#: and last item
HISTOGRAM_SAMPLES = 8
#: the histogram round is taken when the searched boundaries have at least
#: this many members on average, or every rank (keys spread over the blocks);
#: keys near their place (two or three members a boundary) skip it, as its
#: two collectives cost O(p) words per rank
HISTOGRAM_MEMBERS = 4
#: tied first key columns searched one by one, up to this many
_FEW_TIES = 8
_SEARCH, _PLACE = 0, 1


def _sample_count(m: int) -> int:
    """How many samples a member with ``m`` candidates sends its leader: all
    of them up to :data:`ALL_CANDIDATES`; else one per
    :data:`SAMPLE_SPACING` candidates (at least :data:`SAMPLES`), so that a
    round leaves a member about ``2 SAMPLE_SPACING`` candidates of the
    boundary when the members are few, which the next round sends whole;
    but no more than ``sqrt(SAMPLE_SPACING m)``, so that a member holding
    many candidates (keys near their place, whose first round starts with a
    rank's whole range) sends ``O(sqrt(m))`` rows, and a round leaves about
    ``sqrt(m)``. Not collective."""
    if m <= ALL_CANDIDATES:
        return m
    return max(SAMPLES, min(-(-m // SAMPLE_SPACING), math.isqrt(SAMPLE_SPACING * m)))


def _sample_positions(m: int) -> np.ndarray:
    """Positions (from the interval's start) of the samples of an interval of
    ``m`` items, and ``m`` last: sample ``i`` stands for the items from its
    position up to the next one's."""
    k = _sample_count(m)
    return (np.arange(k + 1, dtype=np.int64) * m) // k


def _send_candidates(ctx: BSP, tag: int, local: Local, j: int, a: int, b: int) -> None:
    """Queue for the leader of boundary ``j`` one message with ``tag``:
    ``a, b`` (this rank's candidates are its items ``a .. b-1``), then the
    key words and gid of each of their :func:`_sample_count` samples, evenly
    spaced (all of them when there are at most :data:`ALL_CANDIDATES`). The
    leader knows the source
    rank, and the samples' positions and weights follow from ``a`` and
    ``b``."""
    ncols = local.K.shape[1]
    at = a + _sample_positions(b - a)[:-1] if b > a else np.zeros(0, dtype=np.int64)
    msg = np.empty(2 + at.size * (ncols + 1), dtype=np.int64)
    msg[:2] = a, b
    rows = msg[2:].reshape(at.size, ncols + 1)
    rows[:, :ncols] = np.ascontiguousarray(local.K[at]).view(np.int64)
    rows[:, ncols] = local.G[at]
    ctx.send(j, msg, tag=tag)


def _pivot_keys(msg: np.ndarray, ncols: int, dtype):
    """The two pivot keys of a leader's search message."""
    keys = np.ascontiguousarray(msg[8:8 + 2 * ncols]).view(dtype)
    return keys[:ncols], keys[ncols:]


class _Leader:
    """A boundary leader's state: the target position, the items below the
    members' candidates on ranks that left the search (``base``), and the
    last round's members; ``tag``, the search's tags."""

    def __init__(self, target: int, below: int, ncols: int, dtype, tag):
        self.target, self.below, self.ncols, self.dtype = target, below, ncols, dtype
        self.tag = tag
        self.base = None
        self.done = False

    def decide(self, ctx: BSP, inbox) -> bool:
        """Read the members' messages and queue the next ones: a split for
        each member, or two pivots. Returns whether the search goes on."""
        if self.done:
            return False
        msgs = inbox.messages(self.tag.candidates)
        src = np.array([q for q, _ in msgs], dtype=np.int64)
        lo = np.array([int(a[0]) for _, a in msgs], dtype=np.int64)
        hi = np.array([int(a[1]) for _, a in msgs], dtype=np.int64)
        if self.base is None:           # the first round: below the members' lo
            self.base = self.below - int(lo.sum())
        below_lo = self.base + int(lo.sum())
        below_hi = self.base + int(hi.sum())
        left = lo < hi
        self.base += int(lo[~left].sum())  # members that dropped out keep their count
        t = self.target - below_lo
        if t == 0 or below_hi == self.target:
            self._place(ctx, src[left], lo[left] if t == 0 else hi[left])
            return False
        src, lo, hi = src[left], lo[left], hi[left]
        if src.size == 1:
            self._place(ctx, src, lo + t)
            return False
        keys, ints, owner = self._samples([a for (_, a), k in zip(msgs, left) if k], src,
                                          lo, hi)
        order = np.lexsort((ints[:, 3], ints[:, 2], ints[:, 1])
                           + tuple(keys[:, c] for c in range(self.ncols - 1, -1, -1)))
        w = ints[order, 0]
        if np.all(w == 1):                # every candidate is here: count off t of them
            taken = np.bincount(owner[order[:t]], minlength=src.size)
            self._place(ctx, src, lo + taken)
            return False
        # U: the weight of the samples strictly below each sample; the count
        # of candidates below it lies in [U - E, U]
        U = np.concatenate(([0], np.cumsum(w)[:-1]))
        heaviest = np.zeros(src.size, dtype=np.int64)
        np.maximum.at(heaviest, owner, ints[:, 0])
        E = int((heaviest - 1).sum())
        first = order[int(np.searchsorted(U, t, "right")) - 1]     # last with U <= t
        msg = np.zeros(8 + 2 * self.ncols, dtype=np.int64)
        msg[0] = _SEARCH
        msg[2:5] = ints[first, 1:]
        piv = np.zeros((2, self.ncols), dtype=self.dtype)
        piv[0] = keys[first]
        i = int(np.searchsorted(U - E, t, "left"))                 # first with U - E >= t
        if i < U.size:
            second = order[i]
            msg[1] = 1
            msg[5:8] = ints[second, 1:]
            piv[1] = keys[second]
        msg[8:] = piv.reshape(-1).view(np.int64)
        for dest in src:
            ctx.send(int(dest), msg, tag=self.tag.pivots)
        return True

    def _place(self, ctx: BSP, dests, splits) -> None:
        for dest, value in zip(dests, splits):
            ctx.send(int(dest), np.array([_PLACE, value], dtype=np.int64),
                     tag=self.tag.pivots)
        self.done = True

    def _samples(self, arrays, src, lo, hi):
        """The members' samples: keys, ``[weight, gid, rank, position]`` rows,
        and each sample's member (its index in ``src``)."""
        nc = self.ncols
        rows = [a[2:].reshape(-1, nc + 1) for a in arrays]
        keys = np.ascontiguousarray(np.concatenate([r[:, :nc] for r in rows])).view(
            self.dtype)
        ints, owner = [], []
        for k, (r, q, a, b) in enumerate(zip(rows, src, lo, hi)):
            at = _sample_positions(int(b - a))
            x = np.empty((r.shape[0], 4), dtype=np.int64)
            x[:, 0] = np.diff(at)
            x[:, 1] = r[:, nc]
            x[:, 2] = q
            x[:, 3] = a + at[:-1]
            ints.append(x)
            owner.append(np.full(r.shape[0], k, dtype=np.int64))
        return keys, np.concatenate(ints), np.concatenate(owner)
