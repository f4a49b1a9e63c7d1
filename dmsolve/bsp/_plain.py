"""Supersteps at one processor per rank: queue messages, then one sync.

:class:`PlainBSP` queues typed numpy messages per destination and tag during
local work (with combiners for keyed messages, aggregators and halt votes);
:meth:`PlainBSP.sync` delivers all of them at once through one of the two
exchanges of :mod:`._exchange`. :class:`dmsolve.bsp.BSP` is this class with
a constructor that builds a :class:`VirtualBSP` when asked for virtual
processors; a VirtualBSP runs its real supersteps on a PlainBSP.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

import numpy as np
from mpi4py import MPI

from .._errors import agree
from ._combine import COMBINERS, estimate_distinct_fraction, reduce_by_key
from ._exchange import Outgoing, deliver_own, dense_sync, pack, sparse_sync
from ._inbox import TAG_LIMIT, Inbox, key_tag
from ._ledger import Ledger
from ._tags import TagAllocator
from ._unique import stable_argsort

__all__ = ["PlainBSP", "until_halt", "EXCHANGES", "SPARSE_MIN_RANKS"]

# dtypes a message may carry (numeric and bool); object arrays are refused
_DTYPE_CHARS = "?bBhHiIlLqQefdgFDG"
_AGG_OPS = ("sum", "min", "max", "any", "all")

#: Exchanges of :class:`BSP` (the ``exchange`` keyword and the
#: ``DMSOLVE_BSP_EXCHANGE`` environment variable).
EXCHANGES = ("auto", "dense", "sparse")
#: Under ``exchange="auto"`` the sparse exchange (NBX) is used from this many
#: ranks up, the dense one (Alltoall + Alltoallv) below. In
#: bench/bench_bsp_exchange.py on 2 cores, the dense exchange is 1.7x (2
#: ranks) to 12x (4 ranks, two loaded cores) faster for ring and all-to-all
#: patterns alike, and its O(p) header is a few hundred bytes; from 8 ranks
#: the header is what grows (192 bytes per rank and peer).
SPARSE_MIN_RANKS = 8


class PlainBSP:
    """A bulk-synchronous superstep context on ``comm``, one processor per
    rank: :class:`dmsolve.bsp.BSP` without the choice of kind its
    constructor makes. The parameters and the rules of collectiveness are
    :class:`dmsolve.bsp.BSP`'s. Not collective to construct.
    """

    #: virtual processors per rank (:class:`VirtualBSP` has more)
    virtual = 1

    def __init__(self, comm: MPI.Comm, *, debug: bool = False, ledger: Ledger | None = None,
                 exchange: str | None = None):
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm")
        source = "exchange"
        if exchange is None:
            exchange = os.environ.get("DMSOLVE_BSP_EXCHANGE", "").strip() or "auto"
            source = "DMSOLVE_BSP_EXCHANGE"
        if exchange not in EXCHANGES:
            raise ValueError("%s must be one of %s, got %r" % (source, EXCHANGES, exchange))
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        if exchange == "auto":
            exchange = "sparse" if self.size >= SPARSE_MIN_RANKS else "dense"
        #: the exchange :meth:`sync` uses: ``"dense"`` or ``"sparse"``
        self.exchange = exchange
        self.debug = debug
        self.ledger = ledger if ledger is not None else Ledger(comm)
        self.step = 0
        self._tags = TagAllocator(TAG_LIMIT // 2, TAG_LIMIT)
        self._reset()
        self._t_last = time.perf_counter()
        self._vp_state: dict = {}
        self._vp_inbox = Inbox({}, {}, True, 0)

    def _reset(self) -> None:
        # dest -> list of (tag, array, private): private arrays are copies only
        # the queue holds (send_rows'), the others the caller's (send's)
        self._out = defaultdict(list)
        self._aggs: list[tuple[str, str, np.ndarray]] = []
        self._active = False
        self._error: BaseException | None = None

    def tags(self, *names: str):
        """Fresh message tags, one per name, as a namedtuple.

        ``t = ctx.tags("edges", "records")``, then ``ctx.send_rows(dests,
        rows, tag=t.edges)`` and ``inbox.concat(t.edges)``. Each call hands
        out tags this context has not handed out before, from the upper half
        of the tag range, ``[2**29, 2**30)``, so they never meet the plain
        integer tags a program picks by hand below ``2**29`` (which keep
        working).

        Not collective, but every rank must ask for tags in the same order
        (as SPMD code does), so that the numbers agree across ranks.

        ``ctx.tags(*names)`` with a list of names computed at run time (one
        per column, say) works alike, and gives an empty namedtuple for none.

        Raises
        ------
        TypeError
            If a name is not a string.
        ValueError
            If a name is not an identifier, starts with an underscore or is
            given twice.
        RuntimeError
            Once the range is used up (after ``2**29`` tags).
        """
        return self._tags.take(names)

    # -- queueing (not collective) ---------------------------------------------------
    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc

    def _check_payload(self, payload):
        if not isinstance(payload, np.ndarray):
            self._fail(TypeError("BSP payload must be a numpy array, got %s"
                                 % type(payload).__name__))
            return None
        if payload.dtype.char not in _DTYPE_CHARS:
            self._fail(TypeError("BSP payload dtype %s is not a numeric or bool type"
                                 % payload.dtype))
            return None
        return payload

    def _check_tag(self, tag) -> bool:
        if not isinstance(tag, (int, np.integer)) or isinstance(tag, bool) or \
                not 0 <= tag < TAG_LIMIT:
            self._fail(ValueError("BSP tag must be an int in [0, 2**30), got %r" % (tag,)))
            return False
        return True

    def send(self, dest: int, payload: np.ndarray, tag: int = 0) -> None:
        """Queue ``payload`` for rank ``dest``, delivered at the next sync.

        Not collective. A bad rank, tag or payload is raised by the next
        :meth:`sync`, on every rank.
        """
        if not isinstance(dest, (int, np.integer)) or not 0 <= dest < self.size:
            self._fail(ValueError("BSP send to rank %r, but the communicator has %d ranks"
                                  % (dest, self.size)))
            return
        if self._check_tag(tag) and self._check_payload(payload) is not None:
            self._out[int(dest)].append((int(tag), payload, False))

    def send_rows(self, dests, rows: np.ndarray, tag: int = 0) -> None:
        """Send row ``i`` of ``rows`` to rank ``dests[i]``: one message per
        destination, rows kept in their given order.

        Not collective: the rows are queued, delivered at the next
        :meth:`sync` (which raises any misuse on every rank).
        """
        if self._check_payload(rows) is None or not self._check_tag(tag):
            return
        self._send_rows(dests, rows, tag)

    def _send_rows(self, dests, rows: np.ndarray, tag: int) -> None:
        dests = np.asarray(dests)
        if dests.ndim != 1 or rows.ndim == 0 or dests.shape[0] != rows.shape[0]:
            self._fail(ValueError("send_rows needs one destination per row: %s rows, "
                                  "dests of shape %s" % (rows.shape[:1], dests.shape)))
            return
        if dests.size and (dests.min() < 0 or dests.max() >= self.size):
            self._fail(ValueError("BSP send_rows to a rank outside [0, %d)" % self.size))
            return
        if dests.size == 0:
            return
        if dests[0] == dests.min() == dests.max():
            # one destination (every message at one rank): no sort of the rows
            self._out[int(dests[0])].append((int(tag), rows.copy(), True))
            return
        # a stable sort of 16-bit destinations is numpy's radix sort, O(n)
        small = dests.astype(np.int16) if self.size <= 2 ** 15 else dests
        order = stable_argsort(small)
        counts = np.bincount(dests, minlength=self.size)
        sorted_rows = rows[order]
        offsets = np.concatenate(([0], np.cumsum(counts)))
        for d in np.flatnonzero(counts):
            self._out[int(d)].append((int(tag), sorted_rows[offsets[d]:offsets[d + 1]], True))

    def send_keyed(self, tag: int, keys, values, owner, op: str = "sum",
                   combine: str | bool = "auto") -> None:
        """Send ``(key, value)`` pairs to the owner of each key, combining
        pairs with equal keys with ``op``.

        Parameters
        ----------
        tag : int
            Message tag; the keys travel under a companion tag.
        keys : int array, shape (n,)
        values : array, shape (n, ...)
        owner : Layout or callable
            Maps keys to ranks (``owner.owner(keys)`` or ``owner(keys)``).
        op : str
            One of :data:`COMBINERS` (``sum``, ``min``, ``max``, ``prod``,
            ``any``, ``all``, ``first``, ``last``).
        combine : "auto", True or False
            Whether to reduce equal keys on this rank before sending. Under
            ``"auto"`` the local combine is skipped when it cannot pay: the
            fraction of distinct keys is estimated from a sample of 1024 keys
            (the mean of ``1/multiplicity`` of the sampled keys, an unbiased
            estimate of distinct/total), and when more than 80% of the keys
            are distinct the sort and the extra pass over the values cost more
            than the bytes they save. Rows for this rank itself are never
            pre-combined (the owner-side combine does that work once).

        The owner reads the result with ``inbox.reduced(tag, op)``. Not
        collective: the pairs are queued, delivered at the next :meth:`sync`
        (which raises any misuse on every rank).
        """
        try:
            op = COMBINERS.canonical(op)
        except (TypeError, ValueError) as e:
            self._fail(e)
            return
        keys = np.asarray(keys)
        if keys.dtype.kind not in "iu" or keys.ndim != 1:
            self._fail(TypeError("keys must be a 1-D integer array"))
            return
        if self._check_payload(values) is None or not self._check_tag(tag):
            return
        if values.shape[:1] != keys.shape:
            self._fail(ValueError("need one value per key: %d keys, values of shape %s"
                                  % (keys.size, values.shape)))
            return
        keys = keys.astype(np.int64, copy=False)
        try:
            dests = owner.owner(keys) if hasattr(owner, "owner") else np.asarray(owner(keys))
        except (IndexError, ValueError) as e:
            self._fail(ValueError("send_keyed: %s" % e))
            return
        if combine == "auto":
            combine = keys.size >= 2 and estimate_distinct_fraction(keys) <= 0.8
        if combine:
            remote = dests != self.rank
            if remote.any():
                rk, rv = reduce_by_key(keys[remote], values[remote], op)
                rd = owner.owner(rk) if hasattr(owner, "owner") else np.asarray(owner(rk))
                keys = np.concatenate((keys[~remote], rk))
                values = np.concatenate((values[~remote], rv))
                dests = np.concatenate((dests[~remote], rd))
        self._send_rows(dests, keys, key_tag(tag))
        self._send_rows(dests, values, tag)

    def aggregate(self, name: str, op: str, value) -> None:
        """Contribute ``value`` (a scalar or small array) to a global reduction
        delivered with the next sync as ``inbox.aggregates[name]``.

        ``op`` is one of ``sum``, ``min``, ``max``, ``any``, ``all``. Every rank
        must register the same aggregators, in the same order, with the same
        shapes and dtypes. Not collective: the reduction happens in the next
        :meth:`sync`.
        """
        if op not in _AGG_OPS:
            self._fail(ValueError("aggregator op must be one of %s, got %r" % (_AGG_OPS, op)))
            return
        arr = np.array(value)
        if op in ("any", "all"):
            arr = arr.astype(np.bool_)
        if arr.dtype.char not in _DTYPE_CHARS:
            self._fail(TypeError("aggregator %r: value must be numeric" % name))
            return
        self._aggs.append((str(name), op, arr))

    def vote(self, active: bool = True) -> None:
        """Vote to stay active in this superstep (Pregel's vote to halt is
        simply not voting). Read the outcome as ``inbox.any_active``.

        Not collective: the votes are counted in the next :meth:`sync`.
        """
        self._active = self._active or bool(active)

    # -- synchronisation (collective) --------------------------------------------
    def sync(self, label: str = "") -> Inbox:
        """Deliver every queued message and reduce every aggregator.

        Collective on ``comm``. Under the dense exchange: one ``Alltoall`` of
        a small fixed-size header and one ``Alltoallv`` of payload bytes
        (skipped when no rank sends anything). Under the sparse exchange: one
        ``Iallreduce`` of a small fixed-size record, which also serves as
        the nonblocking barrier of NBX on dmsolve's private duplicate of
        ``comm``. Raises on every rank if any rank queued something invalid;
        then nothing is delivered and no rank is left in the exchange.
        From :data:`~dmsolve.bsp.ROUTED_MIN_RANKS` ranks up, a rank that
        sends to more than 2 sqrt(p) ranks routes its messages through two
        hops (so it talks to O(sqrt p) peers, for twice the bytes); the same
        messages arrive in the same order.
        """
        t_start = time.perf_counter()
        work = t_start - self._t_last
        if self.debug:
            self._check_sequence(label)
        buf, counts, nmsgs, own, own_bytes = pack(self._out, self.rank, self.size)
        out = Outgoing(self.rank, buf, counts, nmsgs, self._aggs, self._active,
                       self._error is not None, self.step, label)
        got = (dense_sync if self.exchange == "dense" else sparse_sync)(self.comm, out)
        if got.failed:
            self._raise_collective()
        if got.mismatch:
            self._reset()
            self.step += 1
            raise RuntimeError("BSP sync %r: ranks registered different aggregators "
                               "(names, ops, shapes or dtypes); every rank must register "
                               "the same ones in the same order" % label)
        by_tag = deliver_own(got.by_tag, own, self.rank)
        # the ledger counts a message to itself as if it had travelled
        nbytes_recv = sum(segment.size for _, segment in got.segments) + own_bytes
        t_end = time.perf_counter()
        others = np.arange(self.size) != self.rank
        self.ledger.record_superstep(
            label or "step %d" % self.step, work, t_end - t_start,
            int(counts.sum()) + own_bytes,
            nbytes_recv, nmsgs, sum(len(pairs) for pairs in by_tag.values()),
            ctrl_sent=got.ctrl_sent, ctrl_recv=got.ctrl_recv,
            peers_sent=int(np.count_nonzero(counts[others])),
            peers_recv=sum(1 for src, _ in got.segments if src != self.rank))
        self.step += 1
        self._reset()
        self._t_last = time.perf_counter()
        return Inbox(by_tag, got.aggregates, got.active, got.messages)

    def run(self, compute, max_steps: int | None = None, label: str = "") -> int:
        """Pregel-style driver: call ``compute(ctx, inbox)`` once per superstep
        until no rank voted to stay active and no message is in flight.

        ``compute`` queues messages and calls :meth:`vote` to stay active; the
        first call gets an empty inbox. Returns the number of supersteps.
        Collective on ``comm``. Raises ``RuntimeError`` on every rank if
        ``max_steps`` is reached first. An exception in ``compute`` on some
        ranks is raised on every rank by the superstep's sync (see
        :func:`dmsolve.agree`); a ``BaseException`` that is not an
        ``Exception`` (``KeyboardInterrupt``) is re-raised unchanged on its
        rank, and the others raise :class:`~dmsolve.CollectiveError`.
        """
        inbox = Inbox({}, {}, True, 0)

        def step():
            nonlocal inbox
            try:
                compute(self, inbox)
            except BaseException as e:  # noqa: BLE001 - raised on every rank by the sync
                self._fail(e)
            inbox = self.sync(label)
            return inbox
        return until_halt(self.comm, step, max_steps)

    # -- the virtual-processor interface at one processor per rank -------------------
    @property
    def processors(self) -> range:
        """This rank's (virtual) processor ids: ``range(rank, rank + 1)``. Not collective."""
        return range(self.rank, self.rank + 1)

    @property
    def nprocs(self) -> int:
        """Processors in all: the number of ranks. Not collective."""
        return self.size

    def set_state(self, vp: int, **arrays) -> None:
        """The state :meth:`superstep` passes to ``compute`` (``vp`` is this
        rank). Not collective."""
        if vp != self.rank:
            raise ValueError("processor %r is not this rank's (%d)" % (vp, self.rank))
        self._vp_state = dict(arrays)

    def state(self, vp: int) -> dict:
        """The state of this rank's processor ``vp``. Not collective."""
        if vp != self.rank:
            raise ValueError("processor %r is not this rank's (%d)" % (vp, self.rank))
        return self._vp_state

    def superstep(self, compute, label: str = "") -> Inbox:
        """``compute(vp, state, inbox)`` for this rank's processor, then :meth:`sync`.

        The program of a :class:`VirtualBSP` superstep, at one processor per
        rank: ``vp`` is the rank, ``state`` the dict :meth:`set_state` gave,
        ``inbox`` the previous superstep's. Returns the sync's Inbox.
        Collective on ``comm``: one sync; an exception in ``compute`` is
        raised on every rank (as in :meth:`run`).
        """
        try:
            compute(self.rank, self._vp_state, self._vp_inbox)
        except BaseException as e:  # noqa: BLE001 - raised on every rank by the sync
            self._fail(e)
        self._vp_inbox = Inbox({}, {}, True, 0)
        self._vp_inbox = self.sync(label)
        return self._vp_inbox

    def run_supersteps(self, compute, max_steps: int | None = None, label: str = "") -> int:
        """:meth:`superstep` until no rank voted to stay active and no message
        is in flight; returns their number. Collective on ``comm``. Raises
        ``RuntimeError`` on every rank if ``max_steps`` is reached first."""
        return until_halt(self.comm, lambda: self.superstep(compute, label), max_steps)

    def close(self) -> None:
        """Nothing to release at one processor per rank (see VirtualBSP.close).
        Not collective."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------
    def _raise_collective(self) -> None:
        exc = self._error
        self._reset()
        self.step += 1
        agree(self.comm, exc)

    def _check_sequence(self, label: str) -> None:
        mine = (self.step, label, [(n, o, a.shape, a.dtype.str) for n, o, a in self._aggs],
                self.exchange)
        everyone = self.comm.allgather(mine)
        if any(e != everyone[0] for e in everyone):
            diff = ", ".join("rank %d at step %d %r (%s exchange)" % (r, e[0], e[1], e[3])
                             for r, e in enumerate(everyone))
            raise RuntimeError("BSP ranks disagree on the superstep sequence "
                               "(or their aggregators): " + diff)


def until_halt(comm: MPI.Comm, step, max_steps: int | None, on_limit=None) -> int:
    """Call ``step()`` (one superstep, returning its Inbox) until no rank voted
    to stay active and no message is in flight; returns the number of
    supersteps. Collective on ``comm``: after ``max_steps`` of them, calls
    ``on_limit()`` and raises the same ``RuntimeError`` on every rank."""
    steps = 0
    while True:
        res = step()
        steps += 1
        if not res.any_active and res.global_messages == 0:
            return steps
        if max_steps is not None and steps >= max_steps:
            if on_limit is not None:
                on_limit()
            agree(comm, RuntimeError("BSP run did not halt within %d supersteps" % max_steps))
