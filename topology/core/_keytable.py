"""Where the vertex at each sweep position lives: a table of ``(global id,
layout index, value)`` spread over the ranks by blocks of positions, so that
results found in key space (pairs, tree nodes) are named without any rank
holding a table of global size.
"""

from __future__ import annotations

import numpy as np

from dmsolve import Layout
from dmsolve.bsp import BSP, stable_argsort

__all__ = ["KeyTable", "fetch_rows"]


def fetch_rows(layout: Layout, table: np.ndarray, indices, *, ledger=None) -> np.ndarray:
    """Rows ``table_global[indices]`` of an int64 table spread over ``layout``
    (``table``: this rank's rows, shape ``(layout.local_size, w)``).

    Collective on ``layout.comm``: two supersteps (requests to the owners,
    rows back). Each rank asks for its own indices (any number, repeats
    allowed); O(asked + answered) words per rank. At one rank, no superstep:
    the rows are taken from the table directly (the general path's requests,
    answers and their copies held five arrays of the size asked).
    """
    comm = layout.comm
    table = np.asarray(table, np.int64)
    w = table.shape[1]
    idx = np.asarray(indices, np.int64).ravel()
    if comm.Get_size() == 1:
        return table[idx - layout.start].reshape(-1, w)
    ctx = BSP(comm, ledger=ledger)
    tag = ctx.tags("ask", "answer")
    own = layout.owner(idx) if idx.size else np.zeros(0, np.int64)
    order = stable_argsort(own)
    ctx.send_rows(own[order], idx[order], tag=tag.ask)
    inbox = ctx.sync("fetch:ask")
    asked, src = inbox.concat_with_sources(tag.ask, dtype=np.int64)
    ctx.send_rows(src, table[asked - layout.start].reshape(-1, w), tag=tag.answer)
    inbox = ctx.sync("fetch:answer")
    got = np.zeros((idx.size, w), np.int64)
    # answers come back grouped by owner, in the order asked
    got[order] = inbox.concat(tag.answer, dtype=np.int64, shape=(w,))
    return got


class KeyTable:
    """The vertex at each position ``0 .. n-1`` of a sweep order.

    Position ``k`` is held by the owner of ``k`` in ``Layout.block(n)``, with
    the vertex's global id, layout index and value. Building it is one
    superstep (each rank sends its own vertices); :meth:`lookup` names any
    positions in two. Collective on ``comm`` to build.

    Attributes
    ----------
    layout : Layout
        ``Layout.block(n, comm)``: who holds which positions.
    gid, index : int64 arrays
        Global id and vertex layout index of the vertex at each position of
        this rank's block.
    value : float64 array
        Its value.
    """

    def __init__(self, keys, gids, index, values, n: int, comm, *, ledger=None):
        self.layout = Layout.block(n, comm)
        rows = np.column_stack((np.asarray(keys, np.int64), np.asarray(gids, np.int64),
                                np.asarray(index, np.int64),
                                np.asarray(values, np.float64).view(np.int64)))
        ctx = BSP(comm, ledger=ledger)
        tag = ctx.tags("fill")
        ctx.send_rows(self.layout.owner(rows[:, 0]) if rows.shape[0] else
                      np.zeros(0, np.int64), rows, tag=tag.fill)
        got = ctx.sync("keytable:fill").concat(tag.fill, dtype=np.int64, shape=(4,))
        m = self.layout.local_size
        self._rows = np.zeros((m, 3), np.int64)
        self._rows[got[:, 0] - self.layout.start] = got[:, 1:]
        self.gid = self._rows[:, 0]
        self.index = self._rows[:, 1]
        self.value = self._rows[:, 2].view(np.float64)

    def lookup(self, keys, *, ledger=None):
        """``(gid, index, value)`` of the vertices at positions ``keys``
        (this rank's own list). Collective: two supersteps."""
        rows = fetch_rows(self.layout, self._rows, keys, ledger=ledger)
        return rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy().view(np.float64)

    def local(self, keys):
        """``(gid, index, value)`` at positions of this rank's block. Not collective."""
        i = np.asarray(keys, np.int64) - self.layout.start
        return self.gid[i], self.index[i], self.value[i]
