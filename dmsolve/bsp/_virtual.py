"""Virtual processors in external memory (PEMS2): v BSP processors per rank.

A :class:`VirtualBSP` runs a BSP program written for ``p * v`` processors
on ``p`` ranks. Virtual processor ``rank * v + j`` has a *state* (named
numpy arrays) and an inbox; a superstep gives each of a rank's virtual
processors a *turn* in the order ``j = 0 .. v - 1``, during which its state
and inbox are in memory. Between turns, under a memory budget, states and
the messages staged for the next superstep live in spill files, written
once and read once (PEMS2's direct delivery: a message goes straight to
its destination's file, not through the sender's disk).

The messages of turn ``j`` are exchanged right after it, in one real
superstep of the underlying :class:`BSP` (``v`` real supersteps per
virtual one, so that no more than one turn's messages are in flight at a
time); aggregators and halt votes are combined over the turns and reduced
in the last of them. With ``v = 1`` and no budget, :class:`BSP` itself runs
the same programs (``BSP.superstep``) at today's cost.

References
----------
F. Dehne, W. Dittrich, D. Hutchinson and A. Maheshwari, "Bulk synchronous
parallel algorithms for the external memory model", Theory Comput. Syst.
35, 2002.
M. Robillard, "PEMS2: parallel external memory system", MSc thesis,
Carleton University, 2007.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import weakref

import numpy as np
from mpi4py import MPI

from .._errors import agree
from ._combine import estimate_distinct_fraction, reduce_by_key
from ._inbox import TAG_LIMIT, Inbox
from ._ledger import Ledger
from ._plain import _DTYPE_CHARS, PlainBSP, until_halt
from ._tags import TagAllocator
from ._unique import stable_argsort

__all__ = ["VirtualBSP", "parse_bytes", "check_spill_dir"]

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 10**3, "KIB": 2**10, "M": 2**20, "MB": 10**6,
          "MIB": 2**20, "G": 2**30, "GB": 10**9, "GIB": 2**30, "T": 2**40, "TB": 10**12,
          "TIB": 2**40}
_AGG_COMBINE = {"sum": np.add, "min": np.minimum, "max": np.maximum,
                "any": np.logical_or, "all": np.logical_and}


def parse_bytes(value, name: str = "memory_budget") -> int:
    """Bytes from an int or a string such as ``"512MiB"``, ``"2 GB"``. Not collective.

    Raises ``TypeError``/``ValueError`` for anything else or a value below 1.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("%s must be a number of bytes or a string like '512MiB', got %r"
                        % (name, value))
    if isinstance(value, (int, np.integer)):
        n = int(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", value)
        if m is None or m.group(2).upper() not in _UNITS:
            raise ValueError("%s: cannot read %r as a size (e.g. '512MiB', '2GB', 1048576)"
                             % (name, value))
        n = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    else:
        raise TypeError("%s must be a number of bytes or a string like '512MiB', got %s"
                        % (name, type(value).__name__))
    if n < 1:
        raise ValueError("%s must be at least 1 byte, got %r" % (name, value))
    return n


def check_spill_dir(spill_dir, need: int | None = None) -> str:
    """The spill directory ``spill_dir`` (default: the system's temporary
    directory) as a path, after checking that it is a writable directory
    with at least ``need`` bytes free. Not collective (call it in
    :func:`dmsolve.validate.agreed`).

    Raises
    ------
    ValueError
        If it is not a directory, not writable, or has less space free.
    """
    base = tempfile.gettempdir() if spill_dir is None else os.fspath(spill_dir)
    if not os.path.isdir(base):
        raise ValueError("spill_dir %r is not a directory" % base)
    if not os.access(base, os.W_OK | os.X_OK):
        raise ValueError("spill_dir %r is not writable" % base)
    free = shutil.disk_usage(base).free
    if need is not None and free < need:
        raise ValueError("spill_dir %r has %d bytes free, less than the %d bytes needed (the "
                         "memory budget)" % (base, free, need))
    return base


class VirtualBSP:
    """``v`` virtual BSP processors per rank, their states and messages
    spilled to disk beyond a memory budget.

    Parameters
    ----------
    comm : MPI.Comm
    virtual : int
        Virtual processors per rank (the same on every rank); processor
        ``rank * virtual + j`` is the ``j``-th of rank ``rank``.
    spill_dir : str, optional
        Where the spill files go (a fresh subdirectory per rank, removed by
        :meth:`close`); default the system's temporary directory. It must
        exist, be writable and have at least ``memory_budget`` bytes free.
    memory_budget : int or str, optional
        Bytes of states and staged messages a rank keeps in memory (e.g.
        ``"512MiB"``); beyond it they go to the spill files. Default: no
        limit (everything stays in memory).
    debug, ledger, exchange
        As for :class:`BSP` (the underlying real supersteps).

    Notes
    -----
    Collective on ``comm`` to construct, and in :meth:`superstep` and
    :meth:`run_supersteps`. Bad arguments raise the same error on every rank.
    Queueing calls made during a turn (:meth:`send`, :meth:`send_rows`,
    :meth:`send_keyed`, :meth:`aggregate`, :meth:`vote`) are not collective;
    their misuse is raised by the superstep on every rank. Tags must be
    below ``2**29 // virtual``. A float sum aggregator may round differently
    for different ``virtual`` (the additions are grouped by rank, then
    turn); integer and min/max aggregators do not.

    The ledger (:attr:`ledger`) gets one row per virtual superstep: the
    payload of its ``v`` real exchanges and, in ``io_read`` / ``io_written``,
    the spill-file bytes this rank read and wrote.

    Use it as a context manager, or call :meth:`close`: the spill files are
    removed then, and on any error a superstep raises.
    """

    def __init__(self, comm: MPI.Comm, *, virtual: int = 1, spill_dir=None,
                 memory_budget=None, debug: bool = False, ledger: Ledger | None = None,
                 exchange: str | None = None):
        if not isinstance(comm, MPI.Comm):
            raise TypeError("comm must be an mpi4py MPI.Comm")
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._dir = None
        exc = None
        try:
            if isinstance(virtual, bool) or not isinstance(virtual, (int, np.integer)):
                raise TypeError("virtual must be an int, got %r" % (virtual,))
            if virtual < 1:
                raise ValueError("virtual must be at least 1, got %d" % virtual)
            budget = None if memory_budget is None else parse_bytes(memory_budget)
            base = check_spill_dir(spill_dir, budget)
        except (TypeError, ValueError, OSError) as e:
            exc = e
        agree(comm, exc)
        vs = comm.allgather(int(virtual))
        agree(comm, None if len(set(vs)) == 1 else ValueError(
            "virtual must be the same on every rank, got %s" % sorted(set(vs))))
        #: virtual processors per rank
        self.virtual = int(virtual)
        #: bytes of states and staged messages kept in memory (None: no limit)
        self.memory_budget = budget
        self._inner = PlainBSP(comm, debug=debug, ledger=Ledger(comm), exchange=exchange)
        self.exchange = self._inner.exchange
        self.ledger = ledger if ledger is not None else Ledger(comm)
        exc = None
        try:
            if budget is not None:
                self._dir = tempfile.mkdtemp(prefix="dmsolve-bsp-r%d-" % self.rank, dir=base)
        except OSError as e:
            exc = e
        agree(comm, exc)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._dir, True) \
            if self._dir else None
        v = self.virtual
        self._states = [dict() for _ in range(v)]       # in memory, or {} when spilled
        self._spilled = [None] * v                      # j -> [(name, dtype, shape)] on disk
        # messages that arrive in superstep s wait in buffer s % 2 for s + 1:
        # buf -> j -> [(tag, source, array)] in memory, and bytes in the file
        self._staged = [[[] for _ in range(v)] for _ in range(2)]
        self._staged_disk = [[0] * v for _ in range(2)]
        self._resident = 0
        self._io = [0, 0]                               # read, written this superstep
        self.step = 0
        self._closed = False
        # real tags ((2 * tag + key) * virtual + j) stay below BSP's 2**30
        self._tag_limit = 2**29 // self.virtual
        self._tags = TagAllocator(self._tag_limit // 2, self._tag_limit)

    # -- processors and states (not collective) -------------------------------------
    @property
    def processors(self) -> range:
        """This rank's virtual processor ids. Not collective."""
        return range(self.rank * self.virtual, (self.rank + 1) * self.virtual)

    @property
    def nprocs(self) -> int:
        """Virtual processors on all ranks (``size * virtual``). Not collective."""
        return self.size * self.virtual

    def _local(self, vp) -> int:
        if isinstance(vp, bool) or not isinstance(vp, (int, np.integer)) or \
                vp not in self.processors:
            raise ValueError("virtual processor %r is not one of this rank's (%d..%d)"
                             % (vp, self.processors.start, self.processors.stop - 1))
        return int(vp) - self.rank * self.virtual

    def set_state(self, vp: int, **arrays) -> None:
        """Give virtual processor ``vp`` (one of :attr:`processors`) its
        state: named numpy arrays, kept by reference until spilled. Replaces
        the previous state. Written to its spill file at once if the budget
        is exceeded, so that a rank can build states larger than its memory
        one processor at a time. Not collective."""
        j = self._local(vp)
        for name, a in arrays.items():
            if not isinstance(a, np.ndarray) or a.dtype.char not in _DTYPE_CHARS:
                raise TypeError("state %r must be a numeric numpy array" % name)
        self._drop_state(j)
        self._states[j] = dict(arrays)
        self._resident += _nbytes(self._states[j])
        if self.memory_budget is not None and self._resident > self.memory_budget:
            self._spill_state(j)            # counted in the next superstep's io_written

    def state(self, vp: int) -> dict:
        """The state of ``vp`` (read back from its spill file if it was
        spilled; it then stays in memory until the next turn ends). Not
        collective."""
        j = self._local(vp)
        self._load_state(j)
        return self._states[j]

    def _drop_state(self, j: int) -> None:
        self._resident -= _nbytes(self._states[j])
        self._states[j] = {}
        if self._spilled[j] is not None:
            os.remove(self._path("state", j))
            self._spilled[j] = None

    def _load_state(self, j: int) -> None:
        meta = self._spilled[j]
        if meta is None:
            return
        out = {}
        with open(self._path("state", j), "rb") as f:
            for name, dtype, shape in meta:
                a = np.empty(shape, dtype=dtype)
                if a.nbytes:
                    f.readinto(memoryview(a).cast("B"))
                out[name] = a
                self._io[0] += a.nbytes
        os.remove(self._path("state", j))
        self._spilled[j] = None
        self._states[j] = out
        self._resident += _nbytes(out)

    def _spill_state(self, j: int) -> None:
        st = self._states[j]
        if not st or self._dir is None:
            return
        meta = []
        with open(self._path("state", j), "wb") as f:
            for name, a in st.items():
                a = np.ascontiguousarray(a)
                meta.append((name, a.dtype, a.shape))
                f.write(memoryview(a).cast("B") if a.nbytes else b"")
                self._io[1] += a.nbytes
        self._resident -= _nbytes(st)
        self._states[j] = {}
        self._spilled[j] = meta

    def _path(self, kind: str, j: int) -> str:
        return os.path.join(self._dir, "%s-%d.bin" % (kind, j))

    def _evict(self, keep: int) -> None:
        """Spill other processors' states, then their staged messages, until
        the budget holds (or nothing else is left in memory)."""
        budget = self.memory_budget
        for j in range(self.virtual):
            if self._resident <= budget:
                return
            if j != keep:
                self._spill_state(j)
        for b in range(2):
            for j in range(self.virtual):
                if self._resident <= budget:
                    return
                if self._staged[b][j] and not (b == (self.step + 1) % 2 and j == keep):
                    self._spill_messages(b, j, self._staged[b][j])
                    self._resident -= _msg_bytes(self._staged[b][j])
                    self._staged[b][j] = []

    def _spill_messages(self, b: int, j: int, msgs) -> None:
        self._io[1] += _append_messages(self._path("msgs%d" % b, j), msgs)
        self._staged_disk[b][j] += sum(a.nbytes for _, _, a in msgs)

    def tags(self, *names: str):
        """Fresh message tags, one per name, as a namedtuple (see
        :meth:`BSP.tags`), from the upper half of this context's tag range,
        ``[2**28 // virtual, 2**29 // virtual)``. Not collective, but
        every rank must ask for tags in the same order.

        Raises
        ------
        TypeError, ValueError
            As :meth:`BSP.tags`, for bad names.
        RuntimeError
            Once the range is used up.
        """
        return self._tags.take(names)

    # -- queueing during a turn (not collective) ------------------------------------
    def _dest(self, dest):
        v = self.virtual
        return dest // v, dest % v

    def _check_tag(self, tag) -> bool:
        if isinstance(tag, bool) or not isinstance(tag, (int, np.integer)) or \
                not 0 <= tag < self._tag_limit:
            self._inner._fail(ValueError("a tag of a virtual BSP with virtual=%d must be an "
                                         "int in [0, %d), got %r"
                                         % (self.virtual, self._tag_limit, tag)))
            return False
        return True

    def _real_tag(self, tag: int, key: bool, j: int) -> int:
        return ((2 * int(tag) + key) * self.virtual) + j

    def send(self, dest: int, payload: np.ndarray, tag: int = 0) -> None:
        """Queue ``payload`` for virtual processor ``dest``, delivered at the
        next superstep. Not collective (misuse is raised by the superstep)."""
        if isinstance(dest, bool) or not isinstance(dest, (int, np.integer)) or \
                not 0 <= dest < self.nprocs:
            self._inner._fail(ValueError("send to virtual processor %r, but there are %d"
                                         % (dest, self.nprocs)))
            return
        if self._check_tag(tag):
            r, j = self._dest(int(dest))
            self._inner.send(r, payload, self._real_tag(tag, False, j))

    def send_rows(self, dests, rows: np.ndarray, tag: int = 0) -> None:
        """Row ``i`` of ``rows`` to virtual processor ``dests[i]``, one message
        per destination. Not collective."""
        if self._check_tag(tag):
            self._send_rows(dests, rows, tag, False)

    def _send_rows(self, dests, rows, tag, key):
        dests = np.asarray(dests)
        if not isinstance(rows, np.ndarray) or dests.ndim != 1 or rows.ndim == 0 or \
                dests.shape[0] != rows.shape[0] or dests.dtype.kind not in "iu":
            self._inner._fail(ValueError("send_rows needs a numpy array and one integer "
                                         "destination per row"))
            return
        if dests.size == 0:
            return
        if dests.min() < 0 or dests.max() >= self.nprocs:
            self._inner._fail(ValueError("send_rows to a virtual processor outside [0, %d)"
                                         % self.nprocs))
            return
        order = stable_argsort(dests)
        ds, rs = dests[order], rows[order]
        cuts = np.flatnonzero(np.diff(ds)) + 1
        for lo, hi in zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [ds.size]))):
            r, j = self._dest(int(ds[lo]))
            self._inner.send(r, rs[lo:hi], self._real_tag(tag, key, j))

    def send_keyed(self, tag: int, keys, values, owner, op: str = "sum",
                   combine: str | bool = "auto") -> None:
        """As :meth:`BSP.send_keyed`, with ``owner`` mapping keys to virtual
        processors; the destination reads ``inbox.reduced(tag, op)``. Not
        collective."""
        if not self._check_tag(tag):
            return
        keys = np.asarray(keys)
        if keys.dtype.kind not in "iu" or keys.ndim != 1 or not isinstance(values, np.ndarray) \
                or values.shape[:1] != keys.shape:
            self._inner._fail(ValueError("send_keyed needs 1-D integer keys and one value "
                                         "per key"))
            return
        keys = keys.astype(np.int64, copy=False)
        def owners(k):
            return owner.owner(k) if hasattr(owner, "owner") else np.asarray(owner(k))
        try:
            dests = owners(keys)
            if combine == "auto":
                combine = keys.size >= 2 and estimate_distinct_fraction(keys) <= 0.8
            remote = dests // self.virtual != self.rank
            if combine and remote.any():
                # as BSP.send_keyed: rows for this rank are combined at the owner only
                rk, rv = reduce_by_key(keys[remote], values[remote], op)
                keys = np.concatenate((keys[~remote], rk))
                values = np.concatenate((values[~remote], rv))
                dests = np.concatenate((dests[~remote], owners(rk)))
        except (TypeError, ValueError, IndexError) as e:
            self._inner._fail(ValueError("send_keyed: %s" % e))
            return
        self._send_rows(dests, keys, tag, True)
        self._send_rows(dests, values, tag, False)

    def aggregate(self, name: str, op: str, value) -> None:
        """Contribute to a reduction over all virtual processors, read in the
        superstep's result as ``aggregates[name]``. Not collective."""
        if op not in _AGG_COMBINE:
            self._inner._fail(ValueError("aggregator op must be one of %s, got %r"
                                         % (tuple(_AGG_COMBINE), op)))
            return
        arr = np.array(value)
        if op in ("any", "all"):
            arr = arr.astype(np.bool_)
        old = self._aggs.get(name)
        if old is None:
            self._aggs[name] = (op, arr)
        elif old[0] != op or old[1].shape != arr.shape:
            self._inner._fail(ValueError("aggregator %r given with different ops or shapes "
                                         "by this rank's virtual processors" % name))
        else:
            self._aggs[name] = (op, _AGG_COMBINE[op](old[1], arr))

    def vote(self, active: bool = True) -> None:
        """Vote to stay active (not voting is the vote to halt). Not collective."""
        self._active = self._active or bool(active)

    # -- supersteps (collective) ----------------------------------------------------
    def superstep(self, compute, label: str = "") -> Inbox:
        """Give every virtual processor its turn, ``compute(vp, state, inbox)``,
        then deliver the messages they queued.

        ``state`` is the processor's dict of arrays (change it in place or
        assign new entries: what it holds after the turn is the new state);
        ``inbox`` its :class:`Inbox` from the previous superstep, with
        virtual processor ids as sources. Returns an Inbox with only the
        ``aggregates``, ``any_active`` and ``global_messages`` of the
        superstep. Collective on ``comm``: ``virtual`` real supersteps. An
        exception in any turn is raised on every rank, after the spill files
        are removed.
        """
        if self._closed:
            raise RuntimeError("this VirtualBSP is closed")
        t0 = time.perf_counter()
        self._aggs, self._active = {}, False
        base = self._inner.ledger.steps.__len__()
        messages = 0
        v = self.virtual
        try:
            for j in range(v):
                vp = self.rank * v + j
                try:
                    self._load_state(j)
                    inbox = self._take_inbox(j)
                    if self.memory_budget is not None and self._resident > self.memory_budget:
                        self._evict(j)
                        if self._resident > self.memory_budget:
                            raise ValueError(
                                "memory_budget of %d bytes is too small for virtual processor "
                                "%d: its state and messages take %d bytes"
                                % (self.memory_budget, vp, self._resident))
                    compute(vp, self._states[j], inbox)
                    del inbox
                except BaseException as e:  # noqa: BLE001 - raised on every rank by the sync
                    self._inner._fail(e)
                self._recount()
                if self.memory_budget is not None and self._resident > self.memory_budget:
                    self._spill_state(j)
                if j == v - 1:
                    for name, (op, arr) in self._aggs.items():
                        self._inner.aggregate(name, op, arr)
                    self._inner.vote(self._active)
                got = self._inner.sync("%s[%d]" % (label, j) if label else "")
                messages += got.global_messages
                self._stage(got, j)
        except BaseException:
            self.close()
            raise
        rows = [r for _, r in self._inner.ledger.steps[base:]]
        tot = np.sum(rows, axis=0) if rows else np.zeros(len(Ledger.STEP_FIELDS))
        self.ledger.record_superstep(
            label or "step %d" % self.step, time.perf_counter() - t0 - tot[1], tot[1],
            int(tot[2]), int(tot[3]), int(tot[4]), int(tot[5]), ctrl_sent=int(tot[6]),
            ctrl_recv=int(tot[7]), peers_sent=int(tot[8]), peers_recv=int(tot[9]),
            io_read=self._io[0], io_written=self._io[1])
        del self._inner.ledger.steps[base:]
        self._io = [0, 0]
        self.step += 1
        return Inbox({}, got.aggregates, got.any_active, messages)

    def run_supersteps(self, compute, max_steps: int | None = None, label: str = "") -> int:
        """Supersteps of ``compute(vp, state, inbox)`` until no virtual
        processor voted to stay active and no message is in flight; returns
        their number. Collective on ``comm``. Raises ``RuntimeError`` on every
        rank if ``max_steps`` is reached first."""
        return until_halt(self.comm, lambda: self.superstep(compute, label), max_steps,
                          on_limit=self.close)

    def _recount(self) -> None:
        self._resident = sum(_nbytes(s) for s in self._states) + \
            sum(_msg_bytes(msgs) for buf in self._staged for msgs in buf)

    def _take_inbox(self, j: int) -> Inbox:
        """The messages sent to processor ``j`` in the previous superstep."""
        b = (self.step + 1) % 2
        msgs = self._staged[b][j]
        self._staged[b][j] = []
        self._resident -= _msg_bytes(msgs)
        if self._staged_disk[b][j]:
            msgs = msgs + _read_messages(self._path("msgs%d" % b, j))
            self._io[0] += self._staged_disk[b][j]
            os.remove(self._path("msgs%d" % b, j))
            self._staged_disk[b][j] = 0
        msgs.sort(key=lambda m: m[1])                  # by source processor (stable)
        by_tag: dict = {}
        for tag, src, a in msgs:
            by_tag.setdefault(tag, []).append((src, a))
        self._resident += _msg_bytes(msgs)    # in memory for the turn
        return Inbox(by_tag, {}, True, 0)

    def _stage(self, got: Inbox, j: int) -> None:
        """File the messages of turn ``j`` (from processors ``r * v + j``) with
        their destinations, in memory under the budget, else on disk."""
        v = self.virtual
        per = [[] for _ in range(v)]
        for real in got.tags():
            jd, rest = real % v, real // v
            tag = rest // 2 + (TAG_LIMIT if rest % 2 else 0)
            for src, a in got.messages(real):
                per[jd].append((tag, src * v + j, a))
        exc = None
        b = self.step % 2
        for jd, msgs in enumerate(per):
            if not msgs:
                continue
            nbytes = _msg_bytes(msgs)
            if self.memory_budget is None or self._resident + nbytes <= self.memory_budget:
                self._staged[b][jd].extend((t, s, a.copy()) for t, s, a in msgs)
                self._resident += nbytes
                continue
            try:
                self._spill_messages(b, jd, msgs)
            except OSError as e:
                exc = exc or e
        agree(self.comm, exc)

    def close(self) -> None:
        """Remove the spill files (states and messages not yet read are lost).
        Not collective; safe to call twice."""
        self._closed = True
        if self._cleanup is not None:
            self._cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return "VirtualBSP(%d ranks x %d virtual, budget=%s, step %d)" % (
            self.size, self.virtual, self.memory_budget, self.step)


def _nbytes(state: dict) -> int:
    return sum(a.nbytes for a in state.values())


#: bytes a staged message costs in memory beyond its data (the array object,
#: its tuple and list slot), counted against the budget
MESSAGE_OVERHEAD = 160


def _msg_bytes(msgs) -> int:
    return sum(a.nbytes for _, _, a in msgs) + MESSAGE_OVERHEAD * len(msgs)


def _append_messages(path: str, msgs) -> int:
    """Append ``(tag, source, array)`` records; returns the payload bytes."""
    n = 0
    with open(path, "ab") as f:
        for tag, src, a in msgs:
            a = np.ascontiguousarray(a)
            head = np.array([tag, src, ord(a.dtype.char), a.ndim, a.nbytes] + list(a.shape),
                            dtype=np.int64)
            f.write(head.tobytes())
            if a.nbytes:
                f.write(memoryview(a).cast("B"))
            n += a.nbytes
    return n


def _read_messages(path: str) -> list:
    out = []
    with open(path, "rb") as f:
        while True:
            head = f.read(40)
            if not head:
                return out
            tag, src, code, ndim, nbytes = np.frombuffer(head, dtype=np.int64)
            shape = tuple(np.frombuffer(f.read(8 * int(ndim)), dtype=np.int64)) if ndim else ()
            a = np.empty(shape, dtype=np.dtype(chr(code)))
            if nbytes:
                f.readinto(memoryview(a).cast("B"))
            out.append((int(tag), int(src), a))
