"""Out-of-core assembly: COO triplet files larger than memory into a DistCSR.

A parallel GROUP BY in external memory on the virtual-processor BSP layer
(:class:`dmsolve.bsp.VirtualBSP`). Each rank's ``v`` virtual processors own
equal slices of the rank's rows. In the first superstep each reads its share
of the records in chunks, sums equal ``(row, col)`` keys within a chunk and
sends the sums to the processor owning the row; staged messages go to disk
beyond the memory budget. In the second each sums what it received and keeps
its rows as state. The rank's rows are then joined into the DistCSR, which
has to fit in memory: only the triplets need not.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ._assembly import Blocks, check_coo, split_rows
from ._errors import agree
from ._layout import Layout
from .bsp import BSP, parse_bytes, reduce_by_key
from .bsp._virtual import MESSAGE_OVERHEAD

__all__ = ["COO_RECORD", "write_coo_file", "coo_file_rows"]

#: Virtual processors per rank at most when they are chosen from the budget.
MAX_VIRTUAL = 1024
#: One triplet of a COO file: little-endian int64 row, int64 column, float64 value.
COO_RECORD = np.dtype([("row", "<i8"), ("col", "<i8"), ("val", "<f8")])


def write_coo_file(path, rows, cols, vals, *, append: bool = False) -> int:
    """Write (or append) triplets as :data:`COO_RECORD` records; returns
    their number. Not collective (each rank may write its own file)."""
    rows, cols, vals = np.asarray(rows), np.asarray(cols), np.asarray(vals)
    if not (rows.ndim == cols.ndim == vals.ndim == 1) or not (rows.size == cols.size
                                                              == vals.size):
        raise ValueError("rows, cols and vals must be 1-D of equal length")
    rec = np.empty(rows.size, dtype=COO_RECORD)
    rec["row"], rec["col"], rec["val"] = rows, cols, vals
    with open(os.fspath(path), "ab" if append else "wb") as f:
        rec.tofile(f)
    return rows.size


def _record_ranges(paths, comm):
    """Per file its record count, checked on every rank (a shared file system)."""
    counts, exc = [], None
    try:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise ValueError("give at least one COO file")
        for p in paths:
            if not os.path.isfile(p):
                raise ValueError("COO file %r does not exist" % p)
            nbytes = os.path.getsize(p)
            if nbytes % COO_RECORD.itemsize:
                raise ValueError("COO file %r has %d bytes, not a whole number of %d-byte "
                                 "(row, col, value) records" % (p, nbytes, COO_RECORD.itemsize))
            counts.append(nbytes // COO_RECORD.itemsize)
    except (TypeError, ValueError, OSError) as e:
        exc = e
    agree(comm, exc)
    everyone = comm.allgather((paths, counts))
    agree(comm, None if all(e == everyone[0] for e in everyone) else ValueError(
        "the ranks see different COO files or file sizes: %s" % everyone))
    return paths, np.array(counts, dtype=np.int64)


def _read(paths, counts, lo: int, hi: int) -> np.ndarray:
    """Records ``lo:hi`` of the concatenated files."""
    out = np.empty(hi - lo, dtype=COO_RECORD)
    starts = np.concatenate(([0], np.cumsum(counts)))
    pos = 0
    for i, p in enumerate(paths):
        a, b = max(lo, starts[i]), min(hi, starts[i + 1])
        if a >= b:
            continue
        with open(p, "rb") as f:
            f.seek(int(a - starts[i]) * COO_RECORD.itemsize)
            view = out[pos:pos + b - a]
            if f.readinto(memoryview(view).cast("B")) != view.nbytes:
                raise ValueError("COO file %r was shorter than at the start" % p)
        pos += b - a
    return out


def coo_file_rows(paths, shape, comm: MPI.Comm, layout: Layout | None = None,
                  col_layout: Layout | None = None, *, memory_budget=None, spill_dir=None,
                  virtual: int | None = None, check_finite: bool = True, ledger=None) -> Blocks:
    """The blocks of :meth:`DistCSR.from_coo_files
    <dmsolve.DistCSR.from_coo_files>`. Collective on ``comm``."""
    for lay in (layout, col_layout):
        if lay is not None:
            lay.verify()
    exc = None
    try:
        _, _, _, shape = check_coo(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                                    shape, "add", check_finite)
        budget = None if memory_budget is None else parse_bytes(memory_budget)
        if virtual is not None and (isinstance(virtual, bool) or
                                    not isinstance(virtual, (int, np.integer)) or virtual < 1):
            raise ValueError("virtual must be a positive int, got %r" % (virtual,))
    except (TypeError, ValueError) as e:
        exc = e
    agree(comm, exc)
    shapes = comm.allgather(shape)
    agree(comm, None if all(t == shapes[0] for t in shapes) else ValueError(
        "ranks passed different shapes: %s" % sorted(set(shapes))))
    if layout is not None and layout.global_size != shape[0]:
        agree(comm, ValueError("layout has %d rows, shape has %d"
                               % (layout.global_size, shape[0])))
    if col_layout is not None and col_layout.global_size != shape[1]:
        agree(comm, ValueError("col_layout has %d columns, shape has %d"
                               % (col_layout.global_size, shape[1])))
    paths, counts = _record_ranges(paths, comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    if layout is None:
        layout = Layout.block(shape[0], comm)._trusted()
    if col_layout is None:
        col_layout = layout if shape[0] == shape[1] else Layout.block(shape[1], comm)._trusted()
    total = int(counts.sum())
    share = np.linspace(0, total, size + 1).astype(np.int64)
    mine = int(share[rank + 1] - share[rank])
    # records a processor reads (and may queue, summed) in its turn: a
    # quarter of the budget, so that its messages, its inbox and the
    # buffers of the exchange fit together
    if virtual is None:
        need = 1 if budget is None else math.ceil(4 * mine * COO_RECORD.itemsize / budget)
        virtual = comm.allreduce(max(need, 1), op=MPI.MAX)
    v = int(virtual)
    if budget is not None:
        # a processor's inbox holds two messages from each of the size * v
        # processors: their bookkeeping may take a quarter of the budget
        small = v > MAX_VIRTUAL or 2 * MESSAGE_OVERHEAD * size * v > budget // 4
        agree(comm, None if not small else ValueError(
            "memory_budget of %d bytes is too small for %d records per rank on %d ranks: it "
            "would take %d virtual processors per rank, whose messages' bookkeeping alone "
            "needs %d bytes" % (budget, mine, size, v, 8 * MESSAGE_OVERHEAD * size * v)))
    if budget is not None:
        # the spill files hold at most the records' summed triplets
        base = tempfile.gettempdir() if spill_dir is None else os.fspath(spill_dir)
        exc = None
        try:
            free = shutil.disk_usage(base).free
            if free < mine * COO_RECORD.itemsize:
                raise ValueError("spill_dir %r has %d bytes free; this rank may spill up to %d"
                                 % (base, free, mine * COO_RECORD.itemsize))
        except OSError as e:
            exc = ValueError("spill_dir %r: %s" % (base, e))
        except ValueError as e:
            exc = e
        agree(comm, exc)
    chunk = mine if budget is None else max(1, budget // (8 * COO_RECORD.itemsize))
    width = max(shape[1], 1)
    ranges = np.asarray(layout.ranges, dtype=np.int64)

    def owner(keys):
        # the processor of a row: its rank's j-th of v equal slices of rows
        r = keys // width
        owner_rank = np.searchsorted(ranges, r, side="right") - 1
        lo, n = ranges[owner_rank], ranges[owner_rank + 1] - ranges[owner_rank]
        return owner_rank * v + ((r - lo) * v) // np.maximum(n, 1)

    def read_and_send(vp, state, inbox):
        j = vp - rank * v
        lo = int(share[rank]) + mine * j // v
        hi = int(share[rank]) + mine * (j + 1) // v
        parts = []
        for a in range(lo, hi, chunk):
            rec = _read(paths, counts, a, min(hi, a + chunk))
            rows, cols, vals = rec["row"], rec["col"], rec["val"]
            if rows.size and (rows.min() < 0 or rows.max() >= shape[0]):
                raise ValueError("row index out of range [0, %d) in records %d..%d"
                                 % (shape[0], a, a + rows.size - 1))
            if cols.size and (cols.min() < 0 or cols.max() >= shape[1]):
                raise ValueError("column index out of range [0, %d) in records %d..%d"
                                 % (shape[1], a, a + rows.size - 1))
            if check_finite and not np.all(np.isfinite(vals)):
                raise ValueError("values must be finite (found NaN or inf in records %d..%d)"
                                 % (a, a + rows.size - 1))
            parts.append(reduce_by_key(rows * width + cols, vals.copy(), "sum"))
            del rec, rows, cols, vals
        # one message per destination for the whole turn (small messages cost
        # more in bookkeeping than in bytes)
        if parts:
            keys, sums = reduce_by_key(np.concatenate([k for k, _ in parts]),
                                       np.concatenate([s for _, s in parts]), "sum")
            del parts[:]
            ctx.send_keyed(tag.sums, keys, sums, owner, op="sum", combine=False)

    def combine(vp, state, inbox):
        keys, sums = inbox.reduced(tag.sums, "sum", dtype=np.float64)
        state["keys"], state["vals"] = keys, sums

    with BSP(comm, virtual=v, spill_dir=spill_dir, memory_budget=budget, ledger=ledger) as ctx:
        tag = ctx.tags("sums")
        for vp in ctx.processors:
            ctx.set_state(vp)
        ctx.superstep(read_and_send, "from_coo_files:read")
        ctx.superstep(combine, "from_coo_files:combine")
        pieces = []
        n = layout.local_size
        for j, vp in enumerate(ctx.processors):
            st = ctx.state(vp)
            keys, sums = st.pop("keys"), st.pop("vals")
            lo, hi = _slice(n, v, j)
            pieces.append(sp.csr_matrix((sums, (keys // width - layout.start - lo,
                                                keys % width)), shape=(hi - lo, shape[1])))
            del keys, sums
    local = pieces[0] if len(pieces) == 1 else sp.vstack(pieces, format="csr")
    return Blocks(*split_rows(sp.csr_matrix(local), col_layout), layout, col_layout)


def _slice(n: int, v: int, j: int) -> tuple[int, int]:
    """The local rows ``lo:hi`` of processor ``j`` of ``v``: those ``i`` with
    ``i * v // n == j`` (as ``owner`` assigns them)."""
    return -(-j * n // v), -(-(j + 1) * n // v)
