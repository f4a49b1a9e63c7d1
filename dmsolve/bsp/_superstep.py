"""Supersteps: local work, queued messages, one synchronisation.

A :class:`BSP` context queues typed numpy messages per destination and tag
during local work; :meth:`BSP.sync` delivers all of them at once. Two
exchanges give the same result:

- ``"dense"``: one small ``Alltoall`` (byte counts, aggregators, halt votes and
  error flags all ride in the same fixed-size header) and one ``Alltoallv`` of
  the payload bytes: O(p) words per rank per superstep;
- ``"sparse"``: one small ``Allreduce`` (aggregators, votes, error flags and
  the message count) and a sparse dynamic exchange, NBX (synchronous sends,
  probes, a nonblocking barrier): per rank, words in proportion to the ranks
  it really talks to, plus O(log p) for the two collectives.

Combiners reduce messages to the same key before they leave the rank and
again at the owner (a distributed GROUP BY / reduce-by-key).

References
----------
L. G. Valiant, "A bridging model for parallel computation", CACM 33(8), 1990.
G. Malewicz et al., "Pregel: a system for large-scale graph processing",
SIGMOD 2010.
T. Hoefler, C. Siebert and A. Lumsdaine, "Scalable communication protocols
for dynamic sparse data exchange", PPoPP 2010 (NBX).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import defaultdict

import numpy as np
from mpi4py import MPI

from .._errors import agree
from .._registry import Registry
from ._comm import NBX_TAGS, inner_comm
from ._ledger import Ledger
from ._tags import TagAllocator
from ._unique import sorted_unique, stable_argsort

__all__ = ["BSP", "Inbox", "COMBINERS", "EXCHANGES", "SPARSE_MIN_RANKS"]

# dtypes a message may carry (numeric and bool); object arrays are refused
_DTYPE_CHARS = "?bBhHiIlLqQefdgFDG"

#: Combiners of ``send_keyed`` by name: the ufunc whose ``reduceat`` combines
#: the values of equal keys; ``first``/``last`` keep the first/last value seen
#: (in source order, then send order).
COMBINERS = Registry("combiner")
for _name, _ufunc in [("sum", np.add), ("min", np.minimum), ("max", np.maximum),
                      ("prod", np.multiply), ("any", np.logical_or), ("all", np.logical_and),
                      ("first", None), ("last", None)]:
    COMBINERS.register(_name, _ufunc)
del _name, _ufunc
_AGG_OPS = ("sum", "min", "max", "any", "all")
#: Tags are ints in ``[0, _TAG_LIMIT)``; :meth:`BSP.tags` hands out the upper
#: half, so that they never meet the small ints a program picks by hand.
_TAG_LIMIT = 2**30

# header words: payload bytes, active, error code, step, label hash, messages,
# aggregator signature, aggregator bytes; then the inline aggregator block
_HEADER_WORDS = 8
_AGG_INLINE_WORDS = 16  # aggregators up to 128 bytes ride in the header

#: Exchanges of :class:`BSP` (the ``exchange`` keyword and the
#: ``DMSOLVE_BSP_EXCHANGE`` environment variable).
EXCHANGES = ("auto", "dense", "sparse")
#: Under ``exchange="auto"`` the sparse exchange (NBX) is used from this many
#: ranks up, the dense one (Alltoall + Alltoallv) below. Measured on this
#: machine (bench/bench_bsp_exchange.py): at 2 and 4 ranks the dense exchange
#: was 1.7x (2 ranks) to 12x (4 ranks, two loaded cores) faster for ring and
#: all-to-all patterns alike, and its O(p) header is a few hundred bytes;
#: from 8 ranks the header is what grows (192 bytes per rank and peer).
SPARSE_MIN_RANKS = 8
# BSP's NBX payload messages go on dmsolve's private duplicate of the
# user's communicator, with _comm.NBX_TAGS[s % 2] in its s-th sparse sync:
# two tags, because a rank that has seen sync s complete may already send
# the messages of sync s + 1 to a rank still receiving in s (never those of
# s + 2: s + 1 cannot complete without that rank). No other message on that
# communicator has those tags (see _comm), so the wildcard-source probes
# match nothing else.
# sparse syncs so far per private communicator (by handle): the same on
# every rank, since every rank makes the same syncs on it in the same order
_SYNCS: dict[int, int] = {}


class Inbox:
    """Messages delivered by one :meth:`BSP.sync`. Not collective."""

    def __init__(self, by_tag: dict, aggregates: dict, active: bool, messages: int):
        self._by_tag = by_tag                 # tag -> list of (source, array)
        self.aggregates = aggregates          #: name -> reduced numpy array
        self.any_active = active              #: whether some rank voted to go on
        self.global_messages = messages       #: messages sent by all ranks this step

    def tags(self) -> list[int]:
        """Tags for which something arrived. Not collective."""
        return sorted(self._by_tag)

    def messages(self, tag: int = 0) -> list[tuple[int, np.ndarray]]:
        """``(source, array)`` pairs with this tag, in source order. Not collective."""
        return self._by_tag.get(tag, [])

    def sources(self, tag: int = 0) -> list[int]:
        """Ranks that sent something with this tag, ascending. Not collective."""
        return sorted({s for s, _ in self._by_tag.get(tag, [])})

    def from_source(self, source: int, tag: int = 0) -> list[np.ndarray]:
        """Arrays received from ``source`` with ``tag``, in send order. Not collective."""
        return [a for s, a in self._by_tag.get(tag, []) if s == source]

    def concat(self, tag: int = 0, dtype=None, shape=()) -> np.ndarray:
        """All arrays with ``tag`` concatenated along axis 0 in source order.

        ``dtype`` and ``shape`` (trailing shape of a row) give the result when
        nothing arrived. Not collective.
        """
        arrays = [a for _, a in self._by_tag.get(tag, [])]
        if not arrays:
            return np.zeros((0,) + tuple(shape), dtype=dtype or np.float64)
        if len(arrays) == 1:
            return arrays[0]
        return np.concatenate(arrays, axis=0)

    def concat_with_sources(self, tag: int = 0, dtype=None, shape=()):
        """Like :meth:`concat`, plus the source rank of every row. Not collective."""
        pairs = self._by_tag.get(tag, [])
        data = self.concat(tag, dtype, shape)
        src = np.repeat(np.array([s for s, _ in pairs], dtype=np.int64),
                        [a.shape[0] if a.ndim else 1 for _, a in pairs])
        return data, src

    def reduced(self, tag: int, op: str | None = None, value_shape=(), dtype=None):
        """Owner-side reduce-by-key of keyed messages (see :meth:`BSP.send_keyed`).

        Returns ``(keys, values)``: sorted unique keys and their combined values.
        Not collective (the messages arrived with the sync).
        """
        keys = self.concat(_key_tag(tag), dtype=np.int64)
        values = self.concat(tag, dtype=dtype, shape=value_shape)
        return reduce_by_key(keys, values, op or "sum")


class BSP:
    """A bulk-synchronous superstep context on a communicator.

    Parameters
    ----------
    comm : MPI.Comm
        The ranks taking part. Every rank must call :meth:`sync` the same
        number of times.
    debug : bool
        Check at every sync that all ranks are at the same superstep with the
        same label and the same aggregators (one extra ``allgather``), and
        raise the same ``RuntimeError`` on every rank if not.
    ledger : Ledger, optional
        Where supersteps are recorded. A new one by default (:attr:`ledger`).
    exchange : {"auto", "dense", "sparse"}, optional
        How :meth:`sync` moves messages (docs/bsp.md, "What one
        synchronisation costs"). ``"dense"``: one ``Alltoall`` of a fixed
        header per pair of ranks and one ``Alltoallv``, O(p) words per rank.
        ``"sparse"``: one small ``Allreduce`` and NBX (``Issend`` to the ranks
        really sent to, ``Improbe``/``Mrecv`` of whatever arrives, an
        ``Ibarrier`` once the own sends completed) on dmsolve's private
        duplicate of ``comm`` (so it never matches the user's messages).
        ``"auto"``: sparse from :data:`SPARSE_MIN_RANKS` ranks up, dense
        below. Default: the environment variable
        ``DMSOLVE_BSP_EXCHANGE`` if set (read here, at construction), else
        ``"auto"``. Both deliver the same messages in the same order; every
        rank must use the same exchange. The chosen one is :attr:`exchange`.

    Notes
    -----
    Queueing (:meth:`send`, :meth:`send_rows`, :meth:`send_keyed`,
    :meth:`aggregate`, :meth:`vote`) is not collective. :meth:`sync` is
    collective on ``comm``. Misuse in a queueing call (a bad rank, a payload
    that is not a numeric array) is remembered and raised by the next
    :meth:`sync` on every rank, so that no rank is left waiting.

    Examples
    --------
    >>> ctx = BSP(comm)
    >>> ctx.send((comm.rank + 1) % comm.size, np.arange(3))
    >>> ctx.aggregate("n", "sum", 1)
    >>> inbox = ctx.sync()
    >>> inbox.concat(), inbox.aggregates["n"]  # doctest: +SKIP
    """

    #: virtual processors per rank (:class:`VirtualBSP` has more)
    virtual = 1

    def __new__(cls, comm=None, *, virtual=None, spill_dir=None, memory_budget=None, **kw):
        plain = virtual is None or (isinstance(virtual, (int, np.integer))
                                    and not isinstance(virtual, bool) and virtual == 1)
        if cls is BSP and not (plain and spill_dir is None and memory_budget is None):
            from ._virtual import VirtualBSP
            return VirtualBSP(comm, virtual=1 if virtual is None else virtual,
                              spill_dir=spill_dir, memory_budget=memory_budget, **kw)
        return super().__new__(cls)

    def __init__(self, comm: MPI.Comm, *, debug: bool = False, ledger: Ledger | None = None,
                 exchange: str | None = None, virtual=None, spill_dir=None, memory_budget=None):
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
        self._tags = TagAllocator(_TAG_LIMIT // 2, _TAG_LIMIT)
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
                not 0 <= tag < _TAG_LIMIT:
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
        self._send_rows(dests, keys, _key_tag(tag))
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
        """
        t_start = time.perf_counter()
        work = t_start - self._t_last
        if self.debug:
            self._check_sequence(label)
        sendbufs, sendcounts, nmsgs, own, own_bytes = self._pack()
        if self.exchange == "dense":
            by_tag, aggregates, active, messages, ctrl = self._sync_dense(
                label, sendbufs, sendcounts, nmsgs)
        else:
            by_tag, aggregates, active, messages, ctrl = self._sync_sparse(
                label, sendbufs, sendcounts, nmsgs)
        by_tag = self._deliver_own(by_tag, own)
        # the ledger counts a message to itself as if it had travelled
        nbytes_recv = sum(segment.size for _, segment in ctrl["segments"]) + own_bytes
        t_end = time.perf_counter()
        others = np.arange(self.size) != self.rank
        self.ledger.record_superstep(
            label or "step %d" % self.step, work, t_end - t_start,
            int(sendcounts.sum()) + own_bytes,
            nbytes_recv, nmsgs, sum(len(pairs) for pairs in by_tag.values()),
            ctrl_sent=ctrl["sent"], ctrl_recv=ctrl["recv"],
            peers_sent=int(np.count_nonzero(sendcounts[others])),
            peers_recv=sum(1 for src, _ in ctrl["segments"] if src != self.rank))
        self.step += 1
        self._reset()
        self._t_last = time.perf_counter()
        return Inbox(by_tag, aggregates, active, messages)

    def _sync_dense(self, label, sendbufs, sendcounts, nmsgs):
        comm, size = self.comm, self.size
        # The header has a fixed width on every rank whatever it queued, so a
        # rank that registered other aggregators (or failed before doing so)
        # cannot derail the Alltoall: mismatches are detected from the
        # headers and raised on every rank.
        agg_bytes = b"".join(a.tobytes() for _, _, a in self._aggs)
        err_code = 0 if self._error is None else 1

        header = np.zeros((size, _HEADER_WORDS + _AGG_INLINE_WORDS), dtype=np.int64)
        header[:, 0] = sendcounts
        header[:, 1] = int(self._active)
        header[:, 2] = err_code
        header[:, 3] = self.step
        header[:, 4] = _label_hash(label)
        header[:, 5] = nmsgs
        header[:, 6] = self._agg_signature()
        header[:, 7] = len(agg_bytes)
        if 0 < len(agg_bytes) <= 8 * _AGG_INLINE_WORDS:
            block = np.zeros(8 * _AGG_INLINE_WORDS, dtype=np.uint8)
            block[:len(agg_bytes)] = np.frombuffer(agg_bytes, dtype=np.uint8)
            header[:, _HEADER_WORDS:] = block.view(np.int64)
        incoming = np.empty_like(header)
        comm.Alltoall(header, incoming)
        ctrl_sent = ctrl_recv = header.nbytes   # one row to every rank, one from every rank

        if incoming[:, 2].any():
            self._raise_collective()
        if np.any(incoming[:, 6] != incoming[0, 6]) or np.any(incoming[:, 7] != incoming[0, 7]):
            self._reset()
            self.step += 1
            raise RuntimeError("BSP sync %r: ranks registered different aggregators "
                               "(names, ops, shapes or dtypes); every rank must register "
                               "the same ones in the same order" % label)

        recvcounts = incoming[:, 0].copy()
        active = bool(incoming[:, 1].any())
        messages = int(incoming[:, 5].sum())
        nagg = int(incoming[0, 7])
        if nagg <= 8 * _AGG_INLINE_WORDS:
            blocks = np.ascontiguousarray(incoming[:, _HEADER_WORDS:]).view(np.uint8)
        else:
            # large aggregators cost one extra collective (documented)
            blocks = np.empty((size, nagg), dtype=np.uint8)
            comm.Allgather(np.frombuffer(agg_bytes, dtype=np.uint8), blocks)
            ctrl_sent += nagg
            ctrl_recv += blocks.nbytes
        aggregates = self._reduce_aggregates(blocks.reshape(size, -1))

        by_tag: dict = {}
        segments = []
        if messages:
            recvbuf = np.empty(int(recvcounts.sum()), dtype=np.uint8)
            sdispl = _displs(sendcounts)
            rdispl = _displs(recvcounts)
            comm.Alltoallv([sendbufs, (sendcounts, sdispl), MPI.BYTE],
                           [recvbuf, (recvcounts, rdispl), MPI.BYTE])
            segments = [(int(src), recvbuf[rdispl[src]:rdispl[src] + recvcounts[src]])
                        for src in np.flatnonzero(recvcounts)]
            by_tag = _unpack(segments)
        return by_tag, aggregates, active, messages, {
            "sent": ctrl_sent, "recv": ctrl_recv, "segments": segments}

    def _sync_sparse(self, label, sendbufs, sendcounts, nmsgs):
        comm = self.comm
        inner = inner_comm(comm)        # collective once per communicator, on every rank
        count = _SYNCS.get(inner.handle, 0)
        _SYNCS[inner.handle] = count + 1
        tag = NBX_TAGS[count % 2]
        dests = np.flatnonzero(sendcounts)
        # One Allreduce of a fixed-size record: error flags, votes and the
        # message count reduce like the dense header's columns, and the
        # aggregators (in their reduction dtypes) reduce in place. A rank whose
        # aggregator signature differs makes the reduction flag a mismatch
        # (see _reduce_records), so ranks that registered different
        # aggregators, or failed before registering theirs, cannot derail it.
        # It is nonblocking and doubles as NBX's barrier (see _nbx).
        layout, agg_len = _agg_layout(self._aggs)
        sig = self._agg_signature()
        if len(_LAYOUTS) > 256:
            _LAYOUTS.clear()
        _LAYOUTS[sig] = layout
        record = np.zeros(8 * (_HEADER_WORDS + _AGG_INLINE_WORDS), dtype=np.uint8)
        head = record[:8 * _HEADER_WORDS].view(np.int64)
        head[:] = (0 if self._error is None else 1, int(self._active), nmsgs, 0, sig,
                   agg_len, dests.size, 0)
        values = _agg_values(self._aggs, layout, agg_len)
        if agg_len <= 8 * _AGG_INLINE_WORDS:
            record[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len] = values
        result = np.empty_like(record)
        # A rank that failed still takes part in the exchange (its messages
        # are dropped with everybody's below), so no rank waits in NBX for it.
        segments = _nbx(inner, tag, self.rank, sendbufs, sendcounts, dests,
                        lambda: comm.Iallreduce([record, 1, _record_type(record.size)],
                                                [result, 1, _record_type(record.size)],
                                                op=_record_op()))
        ctrl_bytes = record.nbytes
        err, active, messages, mismatch = result[:8 * _HEADER_WORDS].view(np.int64)[:4]

        if err:
            self._raise_collective()
        if mismatch:
            self._reset()
            self.step += 1
            raise RuntimeError("BSP sync %r: ranks registered different aggregators "
                               "(names, ops, shapes or dtypes); every rank must register "
                               "the same ones in the same order" % label)
        if agg_len <= 8 * _AGG_INLINE_WORDS:
            reduced = result[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len]
        else:
            # large aggregators cost one extra Allreduce, of a record as long
            # as they are (every rank's agg_len is the same: checked above)
            big = np.zeros(8 * _HEADER_WORDS + _pad8(agg_len), dtype=np.uint8)
            big[:8 * _HEADER_WORDS].view(np.int64)[4:6] = (sig, agg_len)
            big[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len] = values
            out = np.empty_like(big)
            comm.Allreduce([big, 1, _record_type(big.size)],
                           [out, 1, _record_type(big.size)], op=_record_op())
            ctrl_bytes += big.nbytes
            reduced = out[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len]
        aggregates = _read_aggregates(self._aggs, layout, reduced)
        return _unpack(segments), aggregates, bool(active), int(messages), {
            "sent": ctrl_bytes, "recv": ctrl_bytes, "segments": segments}

    def run(self, compute, max_steps: int | None = None, label: str = "") -> int:
        """Pregel-style driver: call ``compute(ctx, inbox)`` once per superstep
        until no rank voted to stay active and no message is in flight.

        ``compute`` queues messages and calls :meth:`vote` to stay active; the
        first call gets an empty inbox. Returns the number of supersteps.
        Collective on ``comm``. Raises ``RuntimeError`` on every rank if
        ``max_steps`` is reached first.
        """
        inbox = Inbox({}, {}, True, 0)

        def step():
            nonlocal inbox
            try:
                compute(self, inbox)
            except Exception as e:  # noqa: BLE001 - raised on every rank by the sync
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
        raised on every rank.
        """
        try:
            compute(self.rank, self._vp_state, self._vp_inbox)
        except Exception as e:  # noqa: BLE001 - raised on every rank by the sync
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
    def _pack(self):
        """The messages to other ranks packed in one byte buffer, by
        destination; the messages to this rank apart (``own``, with their
        would-be packed size), delivered without packing."""
        size = self.size
        counts = np.zeros(size, dtype=np.int64)
        plans = {}
        nmsgs = 0
        for dest, msgs in self._out.items():
            nbytes = 0
            for tag, arr, _ in msgs:
                nbytes += 8 * (4 + arr.ndim) + _pad8(arr.nbytes)
            counts[dest] = nbytes
            plans[dest] = msgs
            nmsgs += len(msgs)
        own = plans.pop(self.rank, [])
        own_bytes = int(counts[self.rank])
        counts[self.rank] = 0
        buf = np.empty(int(counts.sum()), dtype=np.uint8)
        offsets = _displs(counts)
        for dest, msgs in plans.items():
            pos = int(offsets[dest])
            for tag, arr, _ in msgs:
                if not arr.dtype.isnative:
                    # the receiver rebuilds the dtype from its char code, which
                    # carries no byte order: ship native bytes
                    arr = arr.astype(arr.dtype.newbyteorder("="))
                head = np.array([tag, ord(arr.dtype.char), arr.ndim, arr.nbytes]
                                + list(arr.shape), dtype=np.int64)
                hb = head.view(np.uint8)
                buf[pos:pos + hb.size] = hb
                pos += hb.size
                if arr.nbytes:
                    buf[pos:pos + arr.nbytes] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
                pos += _pad8(arr.nbytes)
        return buf, counts, nmsgs, own, own_bytes

    def _deliver_own(self, by_tag: dict, own: list) -> dict:
        """Add the messages this rank sent itself to ``by_tag``, in source
        order (after lower ranks', before higher ranks'), in send order. Each
        is handed over as an array of its own, as if unpacked: rows queued by
        :meth:`send_rows` already are (a private copy), others are copied
        here (once, where the packed exchange copied three times)."""
        if not own:
            return by_tag
        mine: dict = {}
        for tag, arr, private in own:
            if not private:
                arr = arr.astype(arr.dtype.newbyteorder("="), order="C", copy=True)
            elif not arr.dtype.isnative:
                arr = arr.astype(arr.dtype.newbyteorder("="))
            mine.setdefault(tag, []).append((self.rank, arr))
        for tag, pairs in mine.items():
            got = by_tag.get(tag, [])
            at = sum(1 for src, _ in got if src < self.rank)
            by_tag[tag] = got[:at] + pairs + got[at:]
        return by_tag

    def _reduce_aggregates(self, blocks: np.ndarray) -> dict:
        out = {}
        if not self._aggs:
            return out
        raw = blocks
        pos = 0
        for name, op, arr in self._aggs:
            vals = raw[:, pos:pos + arr.nbytes].copy().view(arr.dtype).reshape(
                (self.size,) + arr.shape)
            pos += arr.nbytes
            red = {"sum": np.sum, "min": np.min, "max": np.max,
                   "any": np.any, "all": np.all}[op](vals, axis=0)
            out[name] = red
        return out

    def _agg_signature(self) -> int:
        text = ";".join("%s/%s/%s/%s" % (n, o, a.shape, a.dtype.str) for n, o, a in self._aggs)
        return _label_hash(text)

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


def _key_tag(tag: int) -> int:
    return tag + _TAG_LIMIT


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def _label_hash(label: str) -> int:
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=7).digest(), "little")


def _displs(counts: np.ndarray) -> np.ndarray:
    out = np.zeros_like(counts)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


# -- the sparse exchange ------------------------------------------------------------

def _nbx(inner: MPI.Comm, tag: int, rank: int, sendbuf: np.ndarray, sendcounts: np.ndarray,
         dests: np.ndarray, start_barrier) -> list:
    """NBX (Hoefler, Siebert & Lumsdaine 2010): deliver each rank's packed
    segment to its destinations, learning the sources and sizes on the way.

    Every rank sends its segments with ``Issend`` to the ranks it sends to
    and then, until done, receives whatever arrives (``Improbe`` + ``Mrecv``,
    the size from the probe's status). A synchronous send completes only once
    it is matched, so a rank whose sends have all completed has delivered
    everything; it then starts the nonblocking collective ``start_barrier()``
    returns (NBX's ``Ibarrier``; here the sync's ``Iallreduce``, which cannot
    complete before every rank has entered it either), and keeps receiving
    until that completes, which happens once every rank has delivered
    everything: nothing is in flight any more, and all messages of this
    superstep have been received before any rank leaves. A rank may leave
    earlier than another notices, and send its next sync's messages to a rank
    still here: those carry the other of the two :data:`._comm.NBX_TAGS`,
    which this loop does not probe for. Collective on ``inner`` (and on the barrier's
    communicator). Returns the ``(source, bytes)`` segments received (this
    rank's own segment included, without a message), in ascending source order.
    """
    offsets = _displs(sendcounts)
    received = {}
    requests = []
    for d in dests.tolist():
        segment = sendbuf[offsets[d]:offsets[d] + sendcounts[d]]
        if d == rank:
            received[rank] = segment        # fresh from _pack: no copy needed
        else:
            requests.append(inner.Issend([segment, MPI.BYTE], d, tag))
    status = MPI.Status()
    barrier = None
    while True:
        message = inner.Improbe(MPI.ANY_SOURCE, tag, status)
        if message is not None:
            buf = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
            source = status.Get_source()
            message.Recv([buf, MPI.BYTE])
            received[source] = buf
            continue
        if barrier is None:
            if MPI.Request.Testall(requests):
                barrier = start_barrier()
        elif barrier.Test():
            break
    return sorted(received.items())


def _sum_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype ``np.sum`` accumulates ``dtype`` in (so both exchanges agree)."""
    return np.add.reduce(np.zeros(1, dtype=dtype)).dtype


def _agg_layout(aggs) -> tuple[tuple, int]:
    """Where each aggregator sits in the sparse record: ``(op, dtype, shape,
    offset, nbytes)`` per aggregator, with ``dtype`` the reduction's own
    (``sum`` of int8 accumulates in int64, like ``np.sum``), and the length."""
    layout = []
    pos = 0
    for _, op, arr in aggs:
        dt = _sum_dtype(arr.dtype) if op == "sum" else arr.dtype
        nbytes = dt.itemsize * arr.size
        layout.append((op, dt, arr.shape, pos, nbytes))
        pos += nbytes
    return tuple(layout), pos


def _agg_values(aggs, layout, length: int) -> np.ndarray:
    out = np.zeros(length, dtype=np.uint8)
    for (_, _, arr), (_, dt, _, pos, nbytes) in zip(aggs, layout):
        out[pos:pos + nbytes] = np.ascontiguousarray(arr, dtype=dt).reshape(-1).view(np.uint8)
    return out


def _read_aggregates(aggs, layout, reduced: np.ndarray) -> dict:
    out = {}
    for (name, _, _), (_, dt, shape, pos, nbytes) in zip(aggs, layout):
        value = reduced[pos:pos + nbytes].copy().view(dt).reshape(shape)
        out[name] = value[()] if value.ndim == 0 else value   # 0-d: a scalar, as np.sum gives
    return out


# Aggregator layouts by signature, for the reduction operator: an operator
# is called with two records and no other context, and both records carry
# their signature. Bounded: cleared when it grows past a few hundred entries.
_LAYOUTS: dict[int, tuple] = {}
_AGG_UFUNCS = {"sum": np.add, "min": np.minimum, "max": np.maximum,
               "any": np.logical_or, "all": np.logical_and}
_TYPES: dict[int, MPI.Datatype] = {}
_OP: list = []


def _reduce_records(inbuf, inoutbuf, datatype) -> None:
    """``inout = in (+) inout`` on two sparse-sync records (a user MPI op).

    Header words: error flag (max), active vote (max), message count (sum),
    mismatch flag (max), aggregator signature and length (must be equal:
    else the mismatch flag is set and the aggregators are left alone),
    destinations (max), unused. Then the aggregators, each with its own op,
    if the record is long enough to hold them (the large-aggregator record
    of the second Allreduce; in the first one they ride inline only when
    they fit). Not collective.
    """
    a = np.frombuffer(inbuf, dtype=np.uint8)
    b = np.frombuffer(inoutbuf, dtype=np.uint8)
    ha = a[:8 * _HEADER_WORDS].view(np.int64)
    hb = b[:8 * _HEADER_WORDS].view(np.int64)
    hb[0] = max(ha[0], hb[0])
    hb[1] = max(ha[1], hb[1])
    hb[2] += ha[2]
    hb[6] = max(ha[6], hb[6])
    if ha[3] or hb[3] or ha[4] != hb[4] or ha[5] != hb[5]:
        hb[3] = 1
        return
    length = int(hb[5])
    if length == 0 or b.size < 8 * _HEADER_WORDS + length:
        return
    layout = _LAYOUTS.get(int(hb[4]))
    if layout is None:
        # this rank registered other aggregators than the two records: the
        # full reduction, which includes this rank's record, is a mismatch
        hb[3] = 1
        return
    ra = a[8 * _HEADER_WORDS:]
    rb = b[8 * _HEADER_WORDS:]
    for op, dt, _, pos, nbytes in layout:
        x = ra[pos:pos + nbytes].view(dt)
        y = rb[pos:pos + nbytes].view(dt)
        _AGG_UFUNCS[op](x, y, out=y)


def _record_op() -> MPI.Op:
    """The MPI operator of :func:`_reduce_records`, created on first use
    (never at import) and kept for the life of the process. Not collective."""
    if not _OP:
        _OP.append(MPI.Op.Create(_reduce_records, commute=True))
    return _OP[0]


def _record_type(nbytes: int) -> MPI.Datatype:
    """A contiguous MPI type of ``nbytes`` bytes, so that MPI treats a whole
    record as one element and never hands the operator a piece of one.
    Created on first use, cached. Not collective."""
    t = _TYPES.get(nbytes)
    if t is None:
        t = _TYPES[nbytes] = MPI.BYTE.Create_contiguous(nbytes).Commit()
    return t


def _unpack(segments) -> dict:
    """Messages by tag from ``(source, bytes)`` segments in ascending source order."""
    by_tag: dict = defaultdict(list)
    for src, buf in segments:
        pos = 0
        end = buf.size
        while pos < end:
            tag, code, ndim, nbytes = buf[pos:pos + 32].view(np.int64)
            shape = tuple(buf[pos + 32:pos + 32 + 8 * ndim].view(np.int64))
            pos += 32 + 8 * int(ndim)
            dtype = np.dtype(chr(code))
            arr = buf[pos:pos + nbytes].view(dtype).reshape(shape)
            pos += _pad8(int(nbytes))
            by_tag[int(tag)].append((int(src), arr))
    return dict(by_tag)


def estimate_distinct_fraction(keys: np.ndarray, sample: int = 1024, seed: int = 0) -> float:
    """Estimate (number of distinct keys) / (number of keys).

    Draws ``sample`` keys at random positions and averages ``1/m`` over
    them, ``m`` being each sampled key's multiplicity in the whole array: an
    unbiased estimate, since the distinct count is the sum over all keys of
    ``1/m``. Costs ``O(n log sample)``. Not collective.
    """
    n = keys.size
    if n <= sample:
        return sorted_unique(keys).size / max(n, 1)
    rng = np.random.default_rng(seed)
    picked = keys[rng.integers(0, n, size=sample)]
    uniq = sorted_unique(picked)
    pos = np.searchsorted(uniq, keys)
    pos[pos == uniq.size] = 0
    hit = uniq[pos] == keys
    mult = np.bincount(pos[hit], minlength=uniq.size)
    return float(np.mean(1.0 / mult[np.searchsorted(uniq, picked)]))


def reduce_by_key(keys: np.ndarray, values: np.ndarray, op: str = "sum"):
    """Sorted unique keys and the values combined per key with ``op``.

    Stable: for ``first``/``last``, order among equal keys is the input order.
    Not collective.
    """
    op = COMBINERS.canonical(op)
    keys = np.asarray(keys, dtype=np.int64)
    if keys.size == 0:
        return keys, values
    order = stable_argsort(keys)
    sk = keys[order]
    sv = values[order]
    starts = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
    uk = sk[starts]
    if op == "first":
        return uk, sv[starts]
    if op == "last":
        ends = np.concatenate((starts[1:], [sk.size])) - 1
        return uk, sv[ends]
    ufunc = COMBINERS[op]
    if op in ("any", "all"):
        sv = sv.astype(np.bool_)
    return uk, ufunc.reduceat(sv, starts, axis=0)
