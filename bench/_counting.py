"""A communicator that counts what goes through it: bytes sent and received
by this rank, collectives, point-to-point messages (for bench/scale.py).

mpi4py has no PMPI hook, so the counting is done in Python: :class:`CountingComm`
is an ``MPI.Intracomm`` whose buffer and pickle methods tally their payload
and then call mpi4py's. Hand it to dmsolve as the ``comm`` of a case; dmsolve's
``Dup`` (the inner communicator of dmsolve.bsp._comm), ``Split`` and
``Create_dist_graph_adjacent`` return counting communicators too, and
:func:`install` makes the persistent requests of ``NeighborExchange`` (started
with ``MPI.Prequest.Startall``) counted at every start.

What a rank "sends" and "receives" is the logical payload, counted once per
rank and independent of the MPI library's algorithm:

- point to point (``Send``, ``Isend``, ``send``, persistent starts, ...): the
  message, at the sender and at the receiver;
- ``Alltoall(v/w)``, neighbourhood collectives: the blocks addressed to other
  ranks (sent) and from other ranks (received); the block to oneself is not
  traffic;
- ``Allgather(v)``, ``allgather``: one's own block (sent, once) and the other
  ranks' blocks (received);
- ``Allreduce``, ``Iallreduce``, ``Reduce``, ``Scan``, ``Exscan``,
  ``allreduce``...: the vector, sent once and received once (``Reduce``: the
  root receives, the others send);
- ``Bcast``/``bcast``: the root sends the message once, every other rank
  receives it; ``Gather(v)``/``Scatter(v)``: the blocks of the other ranks
  at the root, one's own block elsewhere;
- pickle methods: the pickled size (``pickle.dumps`` at mpi4py's protocol).

Nothing here communicates by itself; counting is per process (one case at
a time), in :data:`TALLY`.
"""

from __future__ import annotations

import pickle

import numpy as np
from mpi4py import MPI

__all__ = ["Tally", "TALLY", "CountingComm", "CountingGraphComm", "counting", "install",
           "spec_nbytes", "spec_counts"]


class Tally:
    """Counters of one process. Not collective."""

    FIELDS = ("bytes_sent", "bytes_recv", "collectives", "p2p_sent", "p2p_recv",
              "persistent_starts", "supersteps")

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        for f in self.FIELDS:
            setattr(self, f, 0)
        self.by_call: dict[str, list[int]] = {}

    def add(self, call: str, sent: int = 0, recv: int = 0, collective: bool = True) -> None:
        sent, recv = int(sent), int(recv)
        self.bytes_sent += sent
        self.bytes_recv += recv
        if collective:
            self.collectives += 1
        row = self.by_call.setdefault(call, [0, 0, 0])
        row[0] += 1
        row[1] += sent
        row[2] += recv

    def as_dict(self) -> dict:
        d = {f: int(getattr(self, f)) for f in self.FIELDS}
        d["by_call"] = {k: list(v) for k, v in sorted(self.by_call.items())}
        return d


#: The counters of this process.
TALLY = Tally()


# -- buffer specifications -----------------------------------------------------------------
def _extent(datatype) -> int:
    if isinstance(datatype, MPI.Datatype):
        return datatype.Get_extent()[1]
    if isinstance(datatype, str):         # a typechar: 'd', 'i', ...
        return np.dtype(datatype).itemsize
    raise TypeError("unknown datatype %r" % (datatype,))


def _buffer_nbytes(buf) -> int:
    if buf is None or buf is MPI.BOTTOM:
        return 0
    if isinstance(buf, np.ndarray):
        return buf.nbytes
    return memoryview(buf).nbytes


def _itemsize(buf) -> int:
    if isinstance(buf, np.ndarray):
        return buf.itemsize
    return memoryview(buf).itemsize


def _split_spec(spec):
    """``(buffer, count-or-counts, displs, datatype)`` of an mpi4py message
    specification; missing parts are None."""
    if spec is None or spec is MPI.IN_PLACE:
        return None, None, None, None
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    spec = list(spec)
    buf = spec[0]
    dtype = spec[-1] if len(spec) > 1 and isinstance(spec[-1], (MPI.Datatype, str)) else None
    mid = spec[1:-1] if dtype is not None else spec[1:]
    counts = displs = None
    if len(mid) == 1:
        m = mid[0]
        if isinstance(m, tuple) and len(m) == 2 and not np.isscalar(m[0]):
            counts, displs = m
        elif isinstance(m, tuple) and len(m) == 2:      # (count, displ) of a single block
            counts = m[0]
        else:
            counts = m
    elif len(mid) >= 2:
        counts, displs = mid[0], mid[1]
    return buf, counts, displs, dtype


def _unit(buf, dtype) -> int:
    return _extent(dtype) if dtype is not None else _itemsize(buf)


def spec_nbytes(spec) -> int:
    """Bytes described by a (non-vector) message specification."""
    buf, count, _, dtype = _split_spec(spec)
    if buf is None:
        return 0
    if count is None:
        if dtype is None:
            return _buffer_nbytes(buf)
        return (_buffer_nbytes(buf) // _extent(dtype)) * _extent(dtype)
    return int(count) * _unit(buf, dtype)


def spec_counts(spec, size: int) -> np.ndarray | None:
    """Bytes per rank of a vector (``v``) message specification; ``None`` for
    ``IN_PLACE``. A spec without counts is split into ``size`` equal blocks."""
    buf, counts, _, dtype = _split_spec(spec)
    if buf is None:
        return None
    unit = _unit(buf, dtype)
    if counts is None:
        per = spec_nbytes(spec) // max(size, 1)
        return np.full(size, per, dtype=np.int64)
    if np.isscalar(counts):
        return np.full(size, int(counts) * unit, dtype=np.int64)
    return np.asarray(counts, dtype=np.int64) * unit


def _psize(obj) -> int:
    return len(pickle.dumps(obj, protocol=MPI.pickle.PROTOCOL))


def _others(per: np.ndarray | None, rank: int) -> int:
    if per is None:
        return 0
    return int(per.sum() - per[rank])


# -- the counting methods ------------------------------------------------------------------
class _Counting:
    """The overrides, shared by the intra- and the graph communicator."""

    def _add(self, call, sent=0, recv=0, collective=True):
        # a collective on one rank moves nothing to another rank
        if collective and self.Get_size() == 1:
            sent = recv = 0
        TALLY.add(call, sent, recv, collective)

    # ---- reductions (the vector once each way) ----
    def Allreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        n = spec_nbytes(recvbuf)
        self._add("Allreduce", n, n)
        return super().Allreduce(sendbuf, recvbuf, op)

    def Iallreduce(self, sendbuf, recvbuf, op=MPI.SUM):
        n = spec_nbytes(recvbuf)
        self._add("Iallreduce", n, n)
        return super().Iallreduce(sendbuf, recvbuf, op)

    def Reduce(self, sendbuf, recvbuf, op=MPI.SUM, root=0):
        n = spec_nbytes(recvbuf if sendbuf is MPI.IN_PLACE else sendbuf)
        me = self.Get_rank() == root
        self._add("Reduce", 0 if me else n, n if me else 0)
        return super().Reduce(sendbuf, recvbuf, op, root)

    def Scan(self, sendbuf, recvbuf, op=MPI.SUM):
        n = spec_nbytes(recvbuf)
        self._add("Scan", n, n)
        return super().Scan(sendbuf, recvbuf, op)

    def Exscan(self, sendbuf, recvbuf, op=MPI.SUM):
        n = spec_nbytes(recvbuf)
        self._add("Exscan", n, n)
        return super().Exscan(sendbuf, recvbuf, op)

    def Barrier(self):
        self._add("Barrier")
        return super().Barrier()

    def Ibarrier(self):
        self._add("Ibarrier")
        return super().Ibarrier()

    def Bcast(self, buf, root=0):
        n = spec_nbytes(buf)
        me = self.Get_rank() == root
        self._add("Bcast", n if me else 0, 0 if me else n)
        return super().Bcast(buf, root)

    # ---- all-to-all ----
    def _a2a(self, name, sendbuf, recvbuf):
        size, rank = self.Get_size(), self.Get_rank()
        s = spec_counts(sendbuf, size)
        r = spec_counts(recvbuf, size)
        if s is None:           # IN_PLACE: the receive layout is the send layout
            s = r
        self._add(name, _others(s, rank), _others(r, rank))

    def Alltoall(self, sendbuf, recvbuf):
        self._a2a("Alltoall", sendbuf, recvbuf)
        return super().Alltoall(sendbuf, recvbuf)

    def Alltoallv(self, sendbuf, recvbuf):
        self._a2a("Alltoallv", sendbuf, recvbuf)
        return super().Alltoallv(sendbuf, recvbuf)

    def Ialltoall(self, sendbuf, recvbuf):
        self._a2a("Ialltoall", sendbuf, recvbuf)
        return super().Ialltoall(sendbuf, recvbuf)

    def Ialltoallv(self, sendbuf, recvbuf):
        self._a2a("Ialltoallv", sendbuf, recvbuf)
        return super().Ialltoallv(sendbuf, recvbuf)

    def Alltoallw(self, sendbuf, recvbuf):
        size, rank = self.Get_size(), self.Get_rank()

        def per(spec):
            counts, types = spec[1], spec[-1]
            return np.array([int(c) * _extent(t) for c, t in zip(counts, types)], np.int64)
        s = per(sendbuf) if sendbuf is not MPI.IN_PLACE else per(recvbuf)
        self._add("Alltoallw", _others(s, rank), _others(per(recvbuf), rank))
        return super().Alltoallw(sendbuf, recvbuf)

    # ---- gathers and scatters ----
    def _allgather(self, name, sendbuf, recvbuf):
        size, rank = self.Get_size(), self.Get_rank()
        r = spec_counts(recvbuf, size)
        s = int(r[rank]) if sendbuf is MPI.IN_PLACE else spec_nbytes(sendbuf)
        self._add(name, s if size > 1 else 0, _others(r, rank))

    def Allgather(self, sendbuf, recvbuf):
        self._allgather("Allgather", sendbuf, recvbuf)
        return super().Allgather(sendbuf, recvbuf)

    def Allgatherv(self, sendbuf, recvbuf):
        self._allgather("Allgatherv", sendbuf, recvbuf)
        return super().Allgatherv(sendbuf, recvbuf)

    def Iallgather(self, sendbuf, recvbuf):
        self._allgather("Iallgather", sendbuf, recvbuf)
        return super().Iallgather(sendbuf, recvbuf)

    def Iallgatherv(self, sendbuf, recvbuf):
        self._allgather("Iallgatherv", sendbuf, recvbuf)
        return super().Iallgatherv(sendbuf, recvbuf)

    def _gather(self, name, sendbuf, recvbuf, root):
        size, rank = self.Get_size(), self.Get_rank()
        if rank == root:
            self._add(name, 0, _others(spec_counts(recvbuf, size), rank))
        else:
            self._add(name, spec_nbytes(sendbuf), 0)

    def Gather(self, sendbuf, recvbuf, root=0):
        self._gather("Gather", sendbuf, recvbuf, root)
        return super().Gather(sendbuf, recvbuf, root)

    def Gatherv(self, sendbuf, recvbuf, root=0):
        self._gather("Gatherv", sendbuf, recvbuf, root)
        return super().Gatherv(sendbuf, recvbuf, root)

    def _scatter(self, name, sendbuf, recvbuf, root):
        size, rank = self.Get_size(), self.Get_rank()
        if rank == root:
            self._add(name, _others(spec_counts(sendbuf, size), rank), 0)
        else:
            self._add(name, 0, spec_nbytes(recvbuf))

    def Scatter(self, sendbuf, recvbuf, root=0):
        self._scatter("Scatter", sendbuf, recvbuf, root)
        return super().Scatter(sendbuf, recvbuf, root)

    def Scatterv(self, sendbuf, recvbuf, root=0):
        self._scatter("Scatterv", sendbuf, recvbuf, root)
        return super().Scatterv(sendbuf, recvbuf, root)

    # ---- point to point (buffers) ----
    def _p2p_send(self, name, buf, dest):
        n = spec_nbytes(buf) if dest != MPI.PROC_NULL else 0
        self._add(name, n, 0, collective=False)
        TALLY.p2p_sent += 1

    def Send(self, buf, dest, tag=0):
        self._p2p_send("Send", buf, dest)
        return super().Send(buf, dest, tag)

    def Ssend(self, buf, dest, tag=0):
        self._p2p_send("Ssend", buf, dest)
        return super().Ssend(buf, dest, tag)

    def Isend(self, buf, dest, tag=0):
        self._p2p_send("Isend", buf, dest)
        return super().Isend(buf, dest, tag)

    def Issend(self, buf, dest, tag=0):
        self._p2p_send("Issend", buf, dest)
        return super().Issend(buf, dest, tag)

    def Recv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        st = status if status is not None else MPI.Status()
        out = super().Recv(buf, source, tag, st)
        self._add("Recv", 0, st.Get_count(MPI.BYTE) if st.Get_source() != MPI.PROC_NULL else 0,
                  collective=False)
        TALLY.p2p_recv += 1
        return out

    def _matched(self, name, message, st):
        # a matched probe is a receive of exactly the probed message (BSP's NBX
        # path receives by Improbe + Message.Recv)
        if message is not None and st.Get_source() != MPI.PROC_NULL:
            self._add(name, 0, st.Get_count(MPI.BYTE), collective=False)
            TALLY.p2p_recv += 1
        return message

    def Mprobe(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        st = status if status is not None else MPI.Status()
        return self._matched("Mprobe", super().Mprobe(source, tag, st), st)

    def Improbe(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        st = status if status is not None else MPI.Status()
        return self._matched("Improbe", super().Improbe(source, tag, st), st)

    def Irecv(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        # counted at posting, as the posted buffer's size (an upper bound)
        self._add("Irecv", 0, spec_nbytes(buf) if source != MPI.PROC_NULL else 0,
                  collective=False)
        TALLY.p2p_recv += 1
        return super().Irecv(buf, source, tag)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=MPI.ANY_SOURCE,
                 recvtag=MPI.ANY_TAG, status=None):
        self._add("Sendrecv", spec_nbytes(sendbuf), spec_nbytes(recvbuf), collective=False)
        TALLY.p2p_sent += 1
        TALLY.p2p_recv += 1
        return super().Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status)

    # persistent requests: the bytes are counted at every start (see install())
    def Send_init(self, buf, dest, tag=0):
        req = super().Send_init(buf, dest, tag)
        _PERSISTENT[req.handle] = (spec_nbytes(buf) if dest != MPI.PROC_NULL else 0, 0)
        return req

    def Recv_init(self, buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG):
        req = super().Recv_init(buf, source, tag)
        _PERSISTENT[req.handle] = (0, spec_nbytes(buf) if source != MPI.PROC_NULL else 0)
        return req

    # ---- pickle methods ----
    def send(self, obj, dest, tag=0):
        self._add("send", _psize(obj), 0, collective=False)
        TALLY.p2p_sent += 1
        return super().send(obj, dest, tag)

    def ssend(self, obj, dest, tag=0):
        self._add("ssend", _psize(obj), 0, collective=False)
        TALLY.p2p_sent += 1
        return super().ssend(obj, dest, tag)

    def isend(self, obj, dest, tag=0):
        self._add("isend", _psize(obj), 0, collective=False)
        TALLY.p2p_sent += 1
        return super().isend(obj, dest, tag)

    def recv(self, buf=None, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=None):
        obj = super().recv(buf, source, tag, status)
        self._add("recv", 0, _psize(obj), collective=False)
        TALLY.p2p_recv += 1
        return obj

    def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=MPI.ANY_SOURCE,
                 recvtag=MPI.ANY_TAG, status=None):
        obj = super().sendrecv(sendobj, dest, sendtag, recvbuf, source, recvtag, status)
        self._add("sendrecv", _psize(sendobj), _psize(obj), collective=False)
        TALLY.p2p_sent += 1
        TALLY.p2p_recv += 1
        return obj

    def bcast(self, obj, root=0):
        out = super().bcast(obj, root)
        n = _psize(out)
        me = self.Get_rank() == root
        self._add("bcast", n if me else 0, 0 if me else n)
        return out

    def allreduce(self, sendobj, op=MPI.SUM):
        out = super().allreduce(sendobj, op)
        self._add("allreduce", _psize(sendobj), _psize(out))
        return out

    def reduce(self, sendobj, op=MPI.SUM, root=0):
        out = super().reduce(sendobj, op, root)
        me = self.Get_rank() == root
        self._add("reduce", 0 if me else _psize(sendobj), _psize(out) if me else 0)
        return out

    def scan(self, sendobj, op=MPI.SUM):
        out = super().scan(sendobj, op)
        self._add("scan", _psize(sendobj), _psize(out))
        return out

    def exscan(self, sendobj, op=MPI.SUM):
        out = super().exscan(sendobj, op)
        self._add("exscan", _psize(sendobj), _psize(out) if out is not None else 0)
        return out

    def allgather(self, sendobj):
        out = super().allgather(sendobj)
        rank = self.Get_rank()
        recv = sum(_psize(o) for i, o in enumerate(out) if i != rank)
        self._add("allgather", _psize(sendobj) if len(out) > 1 else 0, recv)
        return out

    def gather(self, sendobj, root=0):
        out = super().gather(sendobj, root)
        rank = self.Get_rank()
        if rank == root:
            self._add("gather", 0, sum(_psize(o) for i, o in enumerate(out) if i != rank))
        else:
            self._add("gather", _psize(sendobj), 0)
        return out

    def scatter(self, sendobj, root=0):
        rank = self.Get_rank()
        out = super().scatter(sendobj, root)
        if rank == root:
            self._add("scatter", sum(_psize(o) for i, o in enumerate(sendobj) if i != rank), 0)
        else:
            self._add("scatter", 0, _psize(out))
        return out

    def alltoall(self, sendobj):
        out = super().alltoall(sendobj)
        rank = self.Get_rank()
        self._add("alltoall", sum(_psize(o) for i, o in enumerate(sendobj) if i != rank),
                  sum(_psize(o) for i, o in enumerate(out) if i != rank))
        return out

    # ---- new communicators stay counted (collective calls themselves) ----
    def Dup(self, info=None):
        self._add("Dup")
        new = super().Dup() if info is None else super().Dup(info)
        return new if isinstance(new, _Counting) else CountingComm(new)

    def Split(self, color=0, key=0):
        self._add("Split")
        return CountingComm(super().Split(color, key))

    def Split_type(self, split_type, key=0, info=MPI.INFO_NULL):
        self._add("Split_type")
        return CountingComm(super().Split_type(split_type, key, info))

    def Create_dist_graph_adjacent(self, sources, destinations, sourceweights=None,
                                   destweights=None, info=MPI.INFO_NULL, reorder=False):
        self._add("Create_dist_graph_adjacent")
        g = super().Create_dist_graph_adjacent(sources, destinations, sourceweights,
                                               destweights, info, reorder)
        return CountingGraphComm(g)


class CountingComm(_Counting, MPI.Intracomm):
    """An ``MPI.Intracomm`` that tallies its traffic in :data:`TALLY`.

    ``CountingComm(comm)`` shares ``comm``'s handle (no communication); use
    :func:`counting` for a private duplicate.
    """


class CountingGraphComm(_Counting, MPI.Distgraphcomm):
    """A distributed-graph communicator that tallies its traffic, including the
    neighbourhood collectives (blocks to and from the neighbours)."""

    def _neigh(self, name, sendbuf, recvbuf):
        indeg, outdeg, _ = self.Get_dist_neighbors_count()
        s = spec_counts(sendbuf, outdeg)
        r = spec_counts(recvbuf, indeg)
        self._add(name, 0 if s is None else int(s.sum()), 0 if r is None else int(r.sum()))

    def Neighbor_alltoallv(self, sendbuf, recvbuf):
        self._neigh("Neighbor_alltoallv", sendbuf, recvbuf)
        return super().Neighbor_alltoallv(sendbuf, recvbuf)

    def Ineighbor_alltoallv(self, sendbuf, recvbuf):
        self._neigh("Ineighbor_alltoallv", sendbuf, recvbuf)
        return super().Ineighbor_alltoallv(sendbuf, recvbuf)

    def Neighbor_alltoall(self, sendbuf, recvbuf):
        self._neigh("Neighbor_alltoall", sendbuf, recvbuf)
        return super().Neighbor_alltoall(sendbuf, recvbuf)

    def Neighbor_allgather(self, sendbuf, recvbuf):
        indeg, outdeg, _ = self.Get_dist_neighbors_count()
        n = spec_nbytes(sendbuf)
        r = spec_counts(recvbuf, indeg)
        self._add("Neighbor_allgather", n * outdeg, int(r.sum()))
        return super().Neighbor_allgather(sendbuf, recvbuf)

    def Neighbor_allgatherv(self, sendbuf, recvbuf):
        indeg, outdeg, _ = self.Get_dist_neighbors_count()
        n = spec_nbytes(sendbuf)
        r = spec_counts(recvbuf, indeg)
        self._add("Neighbor_allgatherv", n * outdeg, int(r.sum()))
        return super().Neighbor_allgatherv(sendbuf, recvbuf)


# persistent request handle -> (bytes sent, bytes received) per start
_PERSISTENT: dict[int, tuple[int, int]] = {}


class _CountingPrequest(MPI.Prequest):
    """``Startall``/``Start`` that tally the persistent requests made on a
    counting communicator."""

    @classmethod
    def Startall(cls, requests):
        for r in requests:
            _count_start(r)
        return MPI.Prequest.Startall(requests)


def _count_start(req) -> None:
    row = _PERSISTENT.get(req.handle)
    if row is None:
        return
    TALLY.add("persistent", row[0], row[1], collective=False)
    TALLY.persistent_starts += 1
    if row[0]:
        TALLY.p2p_sent += 1
    if row[1]:
        TALLY.p2p_recv += 1


class _MPIWithCountingPrequest:
    """``MPI`` as seen from dmsolve.bsp._pattern: the same module, except that
    ``MPI.Prequest.Startall`` tallies the starts."""

    Prequest = _CountingPrequest

    def __getattr__(self, name):
        return getattr(MPI, name)


_INSTALLED = []


def _count_superstep(orig):
    def record_superstep(self, *args, **kwargs):
        TALLY.supersteps += 1
        return orig(self, *args, **kwargs)
    record_superstep.__wrapped__ = orig
    return record_superstep


def install() -> None:
    """Make the persistent halo exchanges of dmsolve.bsp counted and count
    BSP supersteps (every ``Ledger.record_superstep``, which ``BSP.sync``
    calls once per superstep). Idempotent; not collective."""
    if _INSTALLED:
        return
    from dmsolve.bsp import _ledger, _pattern
    _pattern.MPI = _MPIWithCountingPrequest()
    _ledger.Ledger.record_superstep = _count_superstep(_ledger.Ledger.record_superstep)
    _INSTALLED.append(True)


def counting(comm: MPI.Comm) -> CountingComm:
    """A counting duplicate of ``comm``. Collective on ``comm`` (one ``Dup``,
    not counted); also calls :func:`install`."""
    install()
    return CountingComm(comm.Dup())
