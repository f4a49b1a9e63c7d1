"""Registered neighbour exchanges: the halo exchange of a matrix or a mesh.

A pattern is planned once (who sends which local entries to whom, who
receives how many) and then exchanged many times with no allocation and no
set-up collective: the per-call work is one ``take`` into a preallocated send
buffer and one round of persistent requests (or one ``Neighbor_alltoallv`` on
a distributed-graph communicator).

A pattern carries entries of one dtype; :meth:`NeighborExchange.for_dtype`
gives the same pattern for another (complex values through a real matrix's
halo), built once, with no communication.
"""

from __future__ import annotations

import time
import weakref

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from .._errors import (PeerFailed, agree, left_a_wait, on_announce, on_recovery, open_channel,
                       wait_watching)
from .._interop import csr_matvec, mpi_datatype
from ._comm import existing_inner_comm, inner_comm, next_tag

__all__ = ["NeighborExchange"]


class NeighborExchange:
    """A fixed sparse exchange between neighbouring ranks.

    Rank ``r`` sends ``values[send_indices[i]]`` to ``send_ranks[i]`` and
    receives ``recv_counts[j]`` entries from ``recv_ranks[j]``, stored one
    block after another (in the order of ``recv_ranks``) in :attr:`recvbuf`.

    Parameters
    ----------
    comm : MPI.Comm
        Communicator of the ranks.
    send_ranks, send_indices : sequence of int, sequence of int arrays
        Destinations and, per destination, the local indices sent there.
    recv_ranks, recv_counts : sequence of int
        Sources and how many entries come from each, in receive-buffer order.
    dtype : numpy dtype, optional
        Entry type (float64). This and the options after it are keyword
        only.
    method : {"p2p", "graph"}
        ``"p2p"`` (default): persistent ``Send_init``/``Recv_init`` requests on
        dmsolve's private duplicate of ``comm``; creates no communicator.
        ``"graph"``: a distributed-graph communicator from
        ``Create_dist_graph_adjacent`` and ``Ineighbor_alltoallv`` with explicit
        counts; it costs one MPI context id per pattern, so call
        :meth:`free` when done with it.
    ledger : Ledger, optional
        Records bytes, messages and seconds of every exchange.
    name : str
        Label for the ledger.

    Notes
    -----
    Construction is collective on ``comm`` (the two sides must match: what
    ``a`` sends to ``b`` is what ``b`` receives from ``a``; see
    :meth:`from_ghosts` for the usual way to build a consistent pattern).
    :meth:`start`, :meth:`finish` and :meth:`exchange` are collective among
    neighbours only.

    A ``"p2p"`` :meth:`finish` that waits watches ``comm``'s error channel
    (:mod:`dmsolve._errors`): when a rank it receives from announces a
    failure, stopped before it sent its part of this exchange, it cancels
    its receives and raises :class:`~dmsolve._errors.PeerFailed`, which the
    solve that called it takes to the failing rank's agreement. The pattern then stays active
    until that agreement, which receives the messages the abandoned
    exchange left in flight, so that no later exchange on the same tag
    matches one. A ``"graph"`` exchange is a neighbourhood collective,
    which cannot be abandoned: it waits.

    One exchange of a pattern (or of its :meth:`for_dtype` variants, which
    share its message tag) can be active at a time: :meth:`start` while one
    is active raises ``RuntimeError`` instead of restarting active MPI
    requests, which MPI refuses and whose buffers would be freed under it.
    Code that does work between :meth:`start` and :meth:`finish` calls
    :meth:`finish` in a ``finally`` clause, so that an exception there never
    leaves the exchange active.
    """

    def __init__(self, comm, send_ranks, send_indices, recv_ranks, recv_counts, *,
                 dtype=np.float64, method: str = "p2p", ledger=None, name: str = "halo"):
        if method not in ("p2p", "graph"):
            raise ValueError("method must be 'p2p' or 'graph', got %r" % (method,))
        self.comm = comm
        self.dtype = np.dtype(dtype)
        self.method = method
        self.ledger = ledger
        self.name = name
        self.send_ranks = np.asarray(send_ranks, dtype=np.intc)
        self.recv_ranks = np.asarray(recv_ranks, dtype=np.intc)
        send_indices = [np.asarray(s, dtype=np.intp) for s in send_indices]
        self.send_counts = np.array([s.size for s in send_indices], dtype=np.intc)
        self.recv_counts = np.asarray(recv_counts, dtype=np.intc)
        self.send_displs = _displs(self.send_counts)
        self.recv_displs = _displs(self.recv_counts)
        self.send_index = (np.concatenate(send_indices) if send_indices
                           else np.zeros(0, dtype=np.intp))
        self._graph = None
        self._owns_graph = method == "graph"
        self._tag = None
        self._state = _State()
        open_channel(comm)
        self._variants: dict = {}
        self._parent = None
        self._reverse = None
        if method == "graph":
            self._graph = comm.Create_dist_graph_adjacent(
                self.recv_ranks.tolist(), self.send_ranks.tolist(), reorder=False)
        else:
            self._tag = next_tag(comm)
            _LIVE[(inner_comm(comm).handle, self._tag)] = self
        self._plan_buffers()

    def _plan_buffers(self) -> None:
        # buffers, MPI datatype and persistent requests of self.dtype, for the
        # pattern, tag and graph communicator already set
        self.sendbuf = np.empty(self.send_index.size, dtype=self.dtype)
        self.recvbuf = np.empty(int(self.recv_counts.sum()), dtype=self.dtype)
        self._mpitype = mpi_datatype(self.dtype)
        self._t0 = 0.0
        self._requests: list = []
        self._request = None
        if self._graph is None:
            inner = inner_comm(self.comm)
            mt = self._mpitype
            for r, c, d in zip(self.recv_ranks, self.recv_counts, self.recv_displs):
                self._requests.append(inner.Recv_init(
                    [self.recvbuf[d:d + c], mt], source=int(r), tag=self._tag))
            for r, c, d in zip(self.send_ranks, self.send_counts, self.send_displs):
                self._requests.append(inner.Send_init(
                    [self.sendbuf[d:d + c], mt], dest=int(r), tag=self._tag))

    @classmethod
    def from_ghosts(cls, layout, ghosts, **kwargs) -> "NeighborExchange":
        """Plan the exchange that fills ``ghosts`` (sorted global indices owned
        by other ranks of ``layout``) from their owners.

        The receive buffer then holds the ghost values in the order of
        ``ghosts``. Collective on ``layout.comm`` (one ``Alltoall`` of counts
        and one ``Alltoallv`` of the requested indices, plus the one
        ``allreduce`` of :meth:`Layout.verify <dmsolve.Layout.verify>` if
        ``layout`` is not yet agreed).

        Raises
        ------
        ValueError, IndexError
            On every rank, for ghosts that are out of range, unsorted or owned
            by this rank, or a layout whose ranges differ between ranks.
        """
        comm = layout.comm
        layout.verify()     # ranges that differ between ranks would mismatch the plan
        ghosts = np.asarray(ghosts, dtype=np.int64).ravel()
        exc = None
        if ghosts.size and (ghosts[0] < 0 or ghosts[-1] >= layout.global_size):
            exc = IndexError("ghost index out of range [0, %d)" % layout.global_size)
        elif ghosts.size and np.any(np.diff(ghosts) <= 0):
            exc = ValueError("ghosts must be sorted and unique")
        elif np.any(layout.is_local(ghosts)):
            exc = ValueError("ghosts must be owned by other ranks")
        agree(comm, exc)
        owners = layout.owner(ghosts) if ghosts.size else np.zeros(0, dtype=np.int64)
        size = comm.Get_size()
        want = np.bincount(owners, minlength=size).astype(np.int64)
        # ghosts are sorted, so the requests to each owner are contiguous
        offer = np.empty(size, dtype=np.int64)
        comm.Alltoall(want, offer)
        requests = np.empty(int(offer.sum()), dtype=np.int64)
        comm.Alltoallv([ghosts, (want, _displs(want)), MPI.INT64_T],
                       [requests, (offer, _displs(offer)), MPI.INT64_T])
        recv_ranks = np.flatnonzero(want)
        send_ranks = np.flatnonzero(offer)
        displs = _displs(offer)
        start = layout.start
        send_indices = [requests[displs[r]:displs[r] + offer[r]] - start for r in send_ranks]
        return cls(comm, send_ranks, send_indices, recv_ranks, want[recv_ranks], **kwargs)

    # -- properties --------------------------------------------------------------------
    @property
    def neighbours(self) -> np.ndarray:
        """Ranks this rank exchanges with (sources and destinations)."""
        return np.union1d(self.send_ranks, self.recv_ranks)

    @property
    def bytes_sent(self) -> int:
        return self.sendbuf.nbytes

    @property
    def bytes_received(self) -> int:
        return self.recvbuf.nbytes

    @property
    def active(self) -> bool:
        """Whether an exchange of this pattern (or of a :meth:`for_dtype`
        variant) has started and not yet finished."""
        return self._state.owner is not None

    # -- the same pattern for another dtype ----------------------------------------------
    def for_dtype(self, dtype) -> "NeighborExchange":
        """This pattern for entries of ``dtype`` (``self`` if it is the pattern's).

        Built on first use and cached: new buffers and persistent requests on
        the same message tag (and graph communicator), so it costs no
        communication and keeps tags in step on every rank even when only
        some patterns meet another dtype. A variant and its pattern share
        one exchange at a time (see the class notes). Every rank must use the
        same dtype in an exchange. Not collective.
        """
        dtype = np.dtype(dtype)
        root = self._parent or self
        if dtype == root.dtype:
            return root
        var = root._variants.get(dtype)
        if var is None:
            var = NeighborExchange.__new__(NeighborExchange)
            for name in ("comm", "method", "ledger", "name", "send_ranks", "recv_ranks",
                         "send_counts", "recv_counts", "send_displs", "recv_displs",
                         "send_index", "_graph", "_tag", "_state"):
                setattr(var, name, getattr(root, name))
            if hasattr(root, "_scatter"):
                var._scatter = root._scatter
                var._scatter_matrix = None
            var.dtype = dtype
            var._owns_graph = False
            var._variants = {}
            var._parent = root
            var._reverse = None
            var._plan_buffers()
            root._variants[dtype] = var
        return var

    # -- forward exchange: owners -> ghosts -------------------------------------------
    def start(self, values: np.ndarray) -> None:
        """Begin sending ``values[send_index]``; pair with :meth:`finish`.

        The values are copied into :attr:`sendbuf` here, so ``values`` may
        change before :meth:`finish`. Collective on ``comm``: call it on every
        rank (under ``"p2p"`` only neighbours communicate; under ``"graph"``
        it starts a neighbourhood collective).

        Raises
        ------
        RuntimeError
            If an exchange of this pattern is active (started, not finished).
        TypeError
            If ``values`` are not of the pattern's dtype (:meth:`for_dtype`
            gives the pattern for another). Nothing has started then.
        """
        if self._state.owner is not None:
            raise RuntimeError("%s: start() while an exchange of this pattern is active; "
                               "call finish() first" % self.name)
        if values.dtype != self.dtype:
            raise TypeError("%s: values of dtype %s for a pattern of dtype %s; use "
                            "for_dtype(%s)" % (self.name, values.dtype, self.dtype,
                                               values.dtype))
        if self.ledger is not None:
            self._t0 = time.perf_counter()
        np.take(values, self.send_index, out=self.sendbuf, mode="clip")  # "raise" buffers out
        if self._graph is not None:
            mt = self._mpitype
            self._request = self._graph.Ineighbor_alltoallv(
                [self.sendbuf, (self.send_counts, self.send_displs), mt],
                [self.recvbuf, (self.recv_counts, self.recv_displs), mt])
        elif self._requests:
            MPI.Prequest.Startall(self._requests)
        self._state.owner = self
        self._state.started += 1

    def finish(self) -> np.ndarray:
        """Complete the exchange; returns :attr:`recvbuf` (the ghost values).

        Collective on ``comm``, like :meth:`start`: it waits for the
        neighbours' messages.

        Raises
        ------
        RuntimeError
            If no exchange of this pattern (of this dtype) was started.
        """
        if self._state.owner is not self:
            raise RuntimeError("%s: finish() without start() (of this dtype: %s)"
                               % (self.name, self.dtype))
        if self._graph is not None:
            self._request.Wait()
            self._request = None
        elif self._requests:
            try:
                wait_watching(self.comm, self._requests, self._blocked)
            except PeerFailed:
                self._leave()
                raise
        self._state.owner = None
        self._state.finished += 1
        if self.ledger is not None:
            self.ledger.record_exchange(self.name, time.perf_counter() - self._t0,
                                        self.sendbuf.nbytes, self.recvbuf.nbytes,
                                        len(self.send_ranks), len(self.recv_ranks))
        return self.recvbuf

    def _blocked(self, announced: dict) -> bool:
        # whether a source this exchange receives from announced that it had
        # sent fewer messages of this pattern than this exchange needs
        started = self._state.started
        for src in self.recv_ranks.tolist():
            sent = announced.get(src)
            if sent is not None and sent.get("halo", {}).get(self._tag, 0) < started:
                return True
        return False

    def _leave(self) -> None:
        # Another rank failed: cancel the receives still pending, and note
        # which ones completed all the same; the sends stay active until the
        # agreement's recovery (_recover) has received what they carry.
        state = self._state
        status = MPI.Status()
        for src, req in zip(self.recv_ranks.tolist(), self._requests):
            req.Cancel()
            req.Wait(status)
            if not status.Is_cancelled():
                state.partial.append(src)
        state.left = True
        left_a_wait(self.comm)

    def exchange(self, values: np.ndarray) -> np.ndarray:
        """:meth:`start` then :meth:`finish`. Collective on ``comm``, like them."""
        self.start(values)
        return self.finish()

    # -- reverse exchange: ghosts -> owners, with accumulation ------------------------
    def reverse(self) -> "NeighborExchange":
        """The transposed pattern (ghost contributions back to their owners).

        Built on first use and cached; collective on ``comm`` the first time.
        Use :meth:`accumulate` to add the received contributions into owned
        entries. The reverse of a :meth:`for_dtype` variant is the variant of
        the reverse.
        """
        if self._parent is not None:
            return self._parent.reverse().for_dtype(self.dtype)
        if self._reverse is None:
            rev = NeighborExchange.__new__(NeighborExchange)
            n_recv = int(self.recv_counts.sum())
            NeighborExchange.__init__(
                rev, self.comm, self.recv_ranks,
                [np.arange(d, d + c) for c, d in zip(self.recv_counts, self.recv_displs)],
                self.send_ranks, self.send_counts, dtype=self.dtype, method=self.method,
                ledger=self.ledger, name=self.name + ":reverse")
            assert rev.send_index.size == n_recv
            rev._scatter = self.send_index
            rev._scatter_matrix = None
            self._reverse = rev
        return self._reverse

    def accumulate(self, target: np.ndarray) -> None:
        """Add the received buffer of a reverse pattern into ``target`` at the
        owner's indices (``target[idx] += recvbuf``, duplicates summed).

        The scatter is a 0/1 CSR matrix built on first use and applied with
        scipy's accumulating ``csr_matvec``: ``np.add.at`` would allocate a
        buffer on every call. Not collective (call it after :meth:`finish`).
        """
        S = self._scatter_matrix
        if S is None:
            n = int(self._scatter.max()) + 1 if self._scatter.size else 0
            S = sp.csr_matrix((np.ones(self._scatter.size, dtype=self.recvbuf.dtype),
                               (self._scatter, np.arange(self._scatter.size))),
                              shape=(n, self._scatter.size))
            self._scatter_matrix = S
        if S.shape[0] > target.shape[0]:
            raise ValueError("accumulate: target has %d entries, the pattern scatters to %d"
                             % (target.shape[0], S.shape[0]))
        if target.dtype != self.recvbuf.dtype:
            np.add.at(target, self._scatter, self.recvbuf)
        elif S.nnz:
            csr_matvec(S.shape[0], S.shape[1], S.indptr, S.indices, S.data, self.recvbuf,
                       target)

    def free(self) -> None:
        """Release the MPI requests and communicator (of the :meth:`for_dtype`
        variants and the reverse pattern too). Not collective for
        ``"p2p"``; collective for ``"graph"``.

        Raises
        ------
        RuntimeError
            If an exchange is active: MPI would keep writing into buffers that
            are about to be released. Call :meth:`finish` first.
        """
        if self._state.owner is not None:
            raise RuntimeError("%s: free() while an exchange is active; call finish() first"
                               % self.name)
        for var in self._variants.values():
            var.free()
        self._variants = {}
        for req in self._requests:
            req.Free()
        self._requests = []
        if self._graph is not None:
            if self._owns_graph:
                self._graph.Free()
            self._graph = None
        if self._reverse is not None:
            self._reverse.free()
            self._reverse = None


class _State:
    """Which plan's exchange is active (None: none), and how many exchanges
    were started and finished; shared by a pattern and its dtype variants,
    which share its message tag. ``left``: the active exchange was
    abandoned (:meth:`NeighborExchange.finish` learned of a failure);
    ``partial``: the sources whose message it received all the same."""

    __slots__ = ("owner", "started", "finished", "left", "partial")

    def __init__(self):
        self.owner = None
        self.started = 0
        self.finished = 0
        self.left = False
        self.partial: list = []


# The "p2p" patterns alive, by (inner communicator handle, tag), for the
# recovery after a fault. A pattern is registered by its collective
# construction, so every rank holds the same ones.
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _recover(comm) -> None:
    """Receive, on every rank, the messages that exchanges abandoned on
    ``comm`` after a failure left in flight, and complete those exchanges.

    Registered with :func:`dmsolve._errors.on_recovery`: run by the
    agreement after which some rank left an exchange. A message of an
    abandoned exchange may sit unreceived at a rank (that never started the
    exchange, or cancelled its receive) and would match the next exchange
    on the same tag. Every message of a pattern is counted: rank ``s`` has
    sent ``started`` messages to each of its destinations, rank ``r`` has
    received ``finished`` from each source (plus those an abandoned
    exchange received). So one ``allgather`` of the abandoned tags and one
    ``Alltoall`` of the counts tell each rank how many messages it still
    has to receive from whom; it receives and drops them, then completes
    its own abandoned sends. Collective on ``comm``.
    """
    inner = existing_inner_comm(comm)
    if inner is None:                   # no p2p pattern on comm, on any rank
        return
    mine = [tag for (handle, tag), plan in list(_LIVE.items())
            if handle == inner.handle and plan._state.left]
    tags = sorted(set().union(*comm.allgather(mine)))
    if not tags:
        return
    size = comm.Get_size()
    plans = [_LIVE.get((inner.handle, tag)) for tag in tags]
    sent = np.zeros((size, len(tags)), dtype=np.int64)
    received = np.zeros((size, len(tags)), dtype=np.int64)
    for j, plan in enumerate(plans):
        if plan is not None:
            state = plan._state
            sent[plan.send_ranks, j] = state.started
            received[plan.recv_ranks, j] = state.finished
            for src in state.partial:
                received[src, j] += 1
    sent_here = np.empty_like(sent)       # row s: what rank s sent to this rank
    comm.Alltoall(sent, sent_here)
    status = MPI.Status()
    for src, j in zip(*np.nonzero(sent_here > received)):
        for _ in range(int(sent_here[src, j] - received[src, j])):
            inner.Probe(source=int(src), tag=tags[j], status=status)
            inner.Recv([np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8), MPI.BYTE],
                       source=int(src), tag=tags[j])
    for plan in plans:
        state = None if plan is None else plan._state
        if state is not None and state.left:
            MPI.Prequest.Waitall(state.owner._requests)     # its sends, received now
            state.owner, state.left, state.partial = None, False, []
            state.finished = state.started


def _sent(comm) -> dict:
    """``{tag: exchanges started}`` of this rank's patterns on ``comm``,
    which an announcement of a failure carries. Not collective."""
    inner = existing_inner_comm(comm)
    if inner is None:
        return {}
    return {tag: plan._state.started for (handle, tag), plan in list(_LIVE.items())
            if handle == inner.handle}


on_announce("halo", _sent)
on_recovery(_recover)


def _displs(counts) -> np.ndarray:
    counts = np.asarray(counts)
    out = np.zeros(counts.size, dtype=counts.dtype if counts.size else np.intc)
    if counts.size > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out
