"""How one synchronisation moves a superstep's messages: the two exchanges.

Both start from the same packed bytes (:func:`pack`) and deliver the same
messages in the same order (:func:`unpack`, :func:`deliver_own`):

- ``"dense"`` (:func:`dense_sync`): one small ``Alltoall`` (byte counts,
  aggregators, halt votes and error flags all ride in the same fixed-size
  header) and one ``Alltoallv`` of the payload bytes: O(p) words per rank
  per superstep;
- ``"sparse"`` (:func:`sparse_sync`): one small ``Allreduce`` (aggregators,
  votes, error flags and the message count) and a sparse dynamic exchange,
  NBX (synchronous sends, probes, a nonblocking barrier): per rank, words in
  proportion to the ranks it really talks to, plus O(log p) for the two
  collectives. From :data:`ROUTED_MIN_RANKS` ranks up, a rank that sends to
  many ranks (a sort's exchange) routes its messages through two hops: the
  ranks form a grid of about sqrt(p) x sqrt(p), a message goes first to the
  rank of its destination's row in the sender's column, then to its
  destination, so that a rank talks to O(sqrt p) peers instead of p - 1 (MPI
  keeps buffers per peer it has talked to: docs/bsp.md) for twice the bytes.

References
----------
T. Hoefler, C. Siebert and A. Lumsdaine, "Scalable communication protocols
for dynamic sparse data exchange", PPoPP 2010 (NBX).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from ._comm import NBX_TAGS, ROUTE_TAGS, inner_comm

__all__ = ["Outgoing", "Delivered", "pack", "unpack", "deliver_own", "dense_sync",
           "sparse_sync", "route_width", "ROUTED_MIN_RANKS"]

#: From this many ranks up, a rank that sends to more than 2 sqrt(p) ranks in
#: one sparse sync routes its messages through two hops. Measured here
#: (MPICH 5, shared memory): a rank's resident memory grows by about 100 KiB
#: per peer it has exchanged a message with; at 64 ranks, 14 peers cost
#: 2.4 MiB and 62 peers 7.4 MiB (docs/bsp.md, "Routed exchanges").
ROUTED_MIN_RANKS = 32
#: ... and routes when it sends to more than ``ROUTE_PEERS * route_width(p)``
#: other ranks (what the two hops cost it in peers).
ROUTE_PEERS = 2

# header words: payload bytes, active, error code, step, label hash, messages,
# aggregator signature, aggregator bytes; then the inline aggregator block
_HEADER_WORDS = 8
_AGG_INLINE_WORDS = 16  # aggregators up to 128 bytes ride in the header

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


@dataclass(slots=True)
class Outgoing:
    """What one rank brings to a sync. Not collective."""

    rank: int
    buf: np.ndarray             #: messages to other ranks, packed by destination
    counts: np.ndarray          #: bytes of ``buf`` per destination
    nmsgs: int                  #: messages queued, to this rank too
    aggs: list                  #: ``(name, op, array)`` aggregators
    active: bool                #: this rank's vote
    failed: bool                #: this rank queued something invalid
    step: int
    label: str


@dataclass(slots=True)
class Delivered:
    """What one sync delivered to this rank. Not collective."""

    by_tag: dict                #: tag -> [(source, array)]
    aggregates: dict
    active: bool                #: some rank voted to stay active
    messages: int               #: messages sent by all ranks
    ctrl_sent: int              #: bytes of the sync's collectives
    ctrl_recv: int
    segments: list              #: ``(source, bytes)`` received
    failed: bool = False        #: some rank failed: nothing was delivered
    mismatch: bool = False      #: ranks registered different aggregators


def _refused(ctrl: int, failed: bool) -> Delivered:
    """The outcome of a sync that delivers nothing: some rank failed, or
    the ranks' aggregators differ."""
    return Delivered({}, {}, False, 0, ctrl, ctrl, [], failed=failed, mismatch=not failed)


def pack(queues: dict, rank: int, size: int):
    """The messages to other ranks packed in one byte buffer, by
    destination; the messages to this rank apart (``own``, with their
    would-be packed size), delivered without packing. ``queues`` maps a
    destination to its ``(tag, array, private)`` messages. Returns ``(buf,
    counts, nmsgs, own, own_bytes)``. Not collective."""
    counts = np.zeros(size, dtype=np.int64)
    plans = {}
    nmsgs = 0
    for dest, msgs in queues.items():
        nbytes = 0
        for tag, arr, _ in msgs:
            nbytes += 8 * (4 + arr.ndim) + _pad8(arr.nbytes)
        counts[dest] = nbytes
        plans[dest] = msgs
        nmsgs += len(msgs)
    own = plans.pop(rank, [])
    own_bytes = int(counts[rank])
    counts[rank] = 0
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


def deliver_own(by_tag: dict, own: list, rank: int) -> dict:
    """Add the messages this rank sent itself to ``by_tag``, in source
    order (after lower ranks', before higher ranks'), in send order. Each
    is handed over as an array of its own, as if unpacked: rows queued by
    ``send_rows`` already are (a private copy), others are copied here
    (once, where the packed exchange copied three times). Not collective."""
    if not own:
        return by_tag
    mine: dict = {}
    for tag, arr, private in own:
        if not private:
            arr = arr.astype(arr.dtype.newbyteorder("="), order="C", copy=True)
        elif not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        mine.setdefault(tag, []).append((rank, arr))
    for tag, pairs in mine.items():
        got = by_tag.get(tag, [])
        at = sum(1 for src, _ in got if src < rank)
        by_tag[tag] = got[:at] + pairs + got[at:]
    return by_tag


def agg_signature(aggs) -> int:
    """A hash of the aggregators' names, ops, shapes and dtypes. Not collective."""
    text = ";".join("%s/%s/%s/%s" % (n, o, a.shape, a.dtype.str) for n, o, a in aggs)
    return _label_hash(text)


def dense_sync(comm: MPI.Comm, out: Outgoing) -> Delivered:
    """The dense exchange: one ``Alltoall`` of fixed-size headers, then one
    ``Alltoallv`` of the payload if some rank sends something. Collective on
    ``comm``. If some rank failed, or the ranks' aggregators differ, returns
    at once with ``failed`` or ``mismatch`` set (the same on every rank),
    nothing delivered."""
    size = comm.Get_size()
    # The header has a fixed width on every rank whatever it queued, so a
    # rank that registered other aggregators (or failed before doing so)
    # cannot derail the Alltoall: mismatches are detected from the
    # headers and raised on every rank.
    agg_bytes = b"".join(a.tobytes() for _, _, a in out.aggs)

    header = np.zeros((size, _HEADER_WORDS + _AGG_INLINE_WORDS), dtype=np.int64)
    header[:, 0] = out.counts
    header[:, 1] = int(out.active)
    header[:, 2] = int(out.failed)
    header[:, 3] = out.step
    header[:, 4] = _label_hash(out.label)
    header[:, 5] = out.nmsgs
    header[:, 6] = agg_signature(out.aggs)
    header[:, 7] = len(agg_bytes)
    if 0 < len(agg_bytes) <= 8 * _AGG_INLINE_WORDS:
        block = np.zeros(8 * _AGG_INLINE_WORDS, dtype=np.uint8)
        block[:len(agg_bytes)] = np.frombuffer(agg_bytes, dtype=np.uint8)
        header[:, _HEADER_WORDS:] = block.view(np.int64)
    incoming = np.empty_like(header)
    comm.Alltoall(header, incoming)
    ctrl_sent = ctrl_recv = header.nbytes   # one row to every rank, one from every rank

    if incoming[:, 2].any():
        return _refused(ctrl_sent, failed=True)
    if np.any(incoming[:, 6] != incoming[0, 6]) or np.any(incoming[:, 7] != incoming[0, 7]):
        return _refused(ctrl_sent, failed=False)

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
    aggregates = _reduce_aggregates(out.aggs, blocks.reshape(size, -1))

    by_tag: dict = {}
    segments = []
    if messages:
        recvbuf = np.empty(int(recvcounts.sum()), dtype=np.uint8)
        sdispl = _displs(out.counts)
        rdispl = _displs(recvcounts)
        comm.Alltoallv([out.buf, (out.counts, sdispl), MPI.BYTE],
                       [recvbuf, (recvcounts, rdispl), MPI.BYTE])
        segments = [(int(src), recvbuf[rdispl[src]:rdispl[src] + recvcounts[src]])
                    for src in np.flatnonzero(recvcounts)]
        by_tag = unpack(segments)
    return Delivered(by_tag, aggregates, active, messages, ctrl_sent, ctrl_recv, segments)


def sparse_sync(comm: MPI.Comm, out: Outgoing) -> Delivered:
    """The sparse exchange: NBX on dmsolve's private duplicate of ``comm``,
    with one ``Iallreduce`` of a fixed-size record as its barrier (and one
    more ``Allreduce`` for aggregators over 128 bytes). From
    :data:`ROUTED_MIN_RANKS` ranks up, a rank that sends to more ranks than
    two hops would cost routes its messages (:func:`_first_hop`), and a
    second NBX delivers them if any rank did. Collective on ``comm``. If
    some rank failed, or the ranks' aggregators differ, returns with
    ``failed`` or ``mismatch`` set (the same on every rank), nothing
    delivered."""
    inner = inner_comm(comm)        # collective once per communicator, on every rank
    count = _SYNCS.get(inner.handle, 0)
    _SYNCS[inner.handle] = count + 1
    tag = NBX_TAGS[count % 2]
    dests = np.flatnonzero(out.counts)
    size = inner.Get_size()
    routing = size >= ROUTED_MIN_RANKS
    routes = False
    own = None
    buf, counts, to = out.buf, out.counts, dests
    if routing:
        buf, counts, to, own, routes = _first_hop(out.rank, out.buf, out.counts, dests, size)
    layout, agg_len = _agg_layout(out.aggs)
    sig = agg_signature(out.aggs)
    if len(_LAYOUTS) > 256:
        _LAYOUTS.clear()
    _LAYOUTS[sig] = layout
    record = np.zeros(8 * (_HEADER_WORDS + _AGG_INLINE_WORDS), dtype=np.uint8)
    head = record[:8 * _HEADER_WORDS].view(np.int64)
    head[:] = (int(out.failed), int(out.active), out.nmsgs, 0, sig, agg_len, dests.size,
               int(routes))
    values = _agg_values(out.aggs, layout, agg_len)
    if agg_len <= 8 * _AGG_INLINE_WORDS:
        record[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len] = values
    result = np.empty_like(record)
    # A rank that failed still takes part in the exchange (its messages
    # are dropped with everybody's below), so no rank waits in NBX for it.
    segments = _nbx(inner, tag, out.rank, buf, counts, to,
                    lambda: comm.Iallreduce([record, 1, _record_type(record.size)],
                                            [result, 1, _record_type(record.size)],
                                            op=_record_op()))
    ctrl_bytes = record.nbytes
    err, active, messages, mismatch = result[:8 * _HEADER_WORDS].view(np.int64)[:4]
    if routing and not (err or mismatch):
        segments = _second_hop(inner, ROUTE_TAGS[count % 2], out.rank, segments, own,
                               bool(result[:8 * _HEADER_WORDS].view(np.int64)[7]))

    if err:
        return _refused(ctrl_bytes, failed=True)
    if mismatch:
        return _refused(ctrl_bytes, failed=False)
    if agg_len <= 8 * _AGG_INLINE_WORDS:
        reduced = result[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len]
    else:
        # large aggregators cost one extra Allreduce, of a record as long
        # as they are (every rank's agg_len is the same: checked above)
        big = np.zeros(8 * _HEADER_WORDS + _pad8(agg_len), dtype=np.uint8)
        big[:8 * _HEADER_WORDS].view(np.int64)[4:6] = (sig, agg_len)
        big[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len] = values
        total = np.empty_like(big)
        comm.Allreduce([big, 1, _record_type(big.size)],
                       [total, 1, _record_type(big.size)], op=_record_op())
        ctrl_bytes += big.nbytes
        reduced = total[8 * _HEADER_WORDS:8 * _HEADER_WORDS + agg_len]
    aggregates = _read_aggregates(out.aggs, layout, reduced)
    return Delivered(unpack(segments), aggregates, bool(active), int(messages), ctrl_bytes,
                     ctrl_bytes, segments)


def _reduce_aggregates(aggs, blocks: np.ndarray) -> dict:
    """The aggregators reduced over the ranks' rows of raw bytes ``blocks``."""
    out = {}
    pos = 0
    for name, op, arr in aggs:
        vals = blocks[:, pos:pos + arr.nbytes].copy().view(arr.dtype).reshape(
            (blocks.shape[0],) + arr.shape)
        pos += arr.nbytes
        red = {"sum": np.sum, "min": np.min, "max": np.max,
               "any": np.any, "all": np.all}[op](vals, axis=0)
        out[name] = red
    return out


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
            received[rank] = segment        # fresh from pack: no copy needed
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


def route_width(size: int) -> int:
    """Columns of the routed exchange's rank grid: ``ceil(sqrt(size))``.
    Not collective."""
    w = max(1, int(np.sqrt(size)))
    return w if w * w >= size else w + 1


def _hop(rank: int, dest: int, width: int, size: int) -> int:
    """The first hop of a message from ``rank`` to ``dest``: the rank of
    ``dest``'s row (``dest // width``) in ``rank``'s column, or ``dest``
    itself where the last, short row has no such rank."""
    mid = (dest // width) * width + rank % width
    return mid if mid < size else dest


def _bundle(heads: list, segments: list) -> np.ndarray:
    """Records ``(head, nbytes, bytes padded to 8)``, one per segment."""
    total = sum(16 + _pad8(s.size) for s in segments)
    out = np.zeros(total, dtype=np.uint8)
    pos = 0
    for h, seg in zip(heads, segments):
        out[pos:pos + 16].view(np.int64)[:] = (h, seg.size)
        out[pos + 16:pos + 16 + seg.size] = seg
        pos += 16 + _pad8(seg.size)
    return out


def _records(buf: np.ndarray):
    """The ``(head, bytes)`` records of a :func:`_bundle`."""
    pos = 0
    while pos < buf.size:
        head, n = buf[pos:pos + 16].view(np.int64)
        yield int(head), buf[pos + 16:pos + 16 + int(n)]
        pos += 16 + _pad8(int(n))


def _packed(parts: dict, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One send buffer with a bundle per destination, for :func:`_nbx`."""
    counts = np.zeros(size, dtype=np.int64)
    bufs = []
    for d in sorted(parts):
        heads, segs = parts[d]
        b = _bundle(heads, segs)
        counts[d] = b.size
        bufs.append(b)
    buf = np.concatenate(bufs) if bufs else np.zeros(0, dtype=np.uint8)
    return buf, counts, np.flatnonzero(counts)


def _first_hop(rank: int, sendbuf: np.ndarray, sendcounts: np.ndarray, dests: np.ndarray,
               size: int) -> tuple:
    """The first hop of a sparse sync at :data:`ROUTED_MIN_RANKS` ranks or
    more: every message a bundle of records headed by the destination. A
    rank that sends to more than ``2 route_width(size)`` other ranks sends
    each segment to :func:`_hop` (so it talks to O(sqrt p) peers), the others
    send directly. Returns the send buffer, counts and destinations of the
    hop, this rank's own segment (or None) and whether it routes."""
    width = route_width(size)
    offsets = _displs(sendcounts)
    others = dests[dests != rank]
    routes = others.size > ROUTE_PEERS * width
    own = None
    first: dict = {}
    for d in dests.tolist():
        segment = sendbuf[offsets[d]:offsets[d] + sendcounts[d]]
        if d == rank:
            own = segment
            continue
        mid = _hop(rank, d, width, size) if routes else d
        heads, segs = first.setdefault(mid, ([], []))
        heads.append(d)
        segs.append(segment)
    buf, counts, to = _packed(first, size)
    return buf, counts, to, own, routes


def _second_hop(inner: MPI.Comm, tag: int, rank: int, arrived: list, own, any_routes: bool) -> list:
    """Unpack the first hop's bundles: records for this rank are delivered,
    the others forwarded to their destination by a second NBX (run only if
    some rank routed: ``any_routes``, the same on every rank; an
    ``Ibarrier`` ends it). Returns the ``(source, bytes)`` segments in
    ascending source order, this rank's own included, as :func:`_nbx` does.
    Collective on ``inner`` when ``any_routes``."""
    final: dict = {}
    second: dict = {}
    for src, bundle in arrived:
        for d, segment in _records(bundle):
            if d == rank:
                final[src] = segment
            else:
                heads, segs = second.setdefault(d, ([], []))
                heads.append(src)
                segs.append(segment)
    if any_routes:
        buf, counts, to = _packed(second, inner.Get_size())
        for _, bundle in _nbx(inner, tag, rank, buf, counts, to, inner.Ibarrier):
            for src, segment in _records(bundle):
                final[src] = segment
    if own is not None:
        final[rank] = own
    return sorted(final.items())


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
    destinations (max), some rank routed its messages (max). Then the aggregators, each with its own op,
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
    hb[7] = max(ha[7], hb[7])
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


def unpack(segments) -> dict:
    """Messages by tag from ``(source, bytes)`` segments in ascending source
    order. Not collective."""
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
