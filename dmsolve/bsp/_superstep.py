"""Supersteps: local work, queued messages, one synchronisation.

A :class:`BSP` context queues typed numpy messages per destination and tag
during local work; :meth:`BSP.sync` delivers all of them at once. Two
exchanges give the same result (:mod:`._exchange`):

- ``"dense"``: one small ``Alltoall`` (byte counts, aggregators, halt votes and
  error flags all ride in the same fixed-size header) and one ``Alltoallv`` of
  the payload bytes: O(p) words per rank per superstep;
- ``"sparse"``: one small ``Allreduce`` (aggregators, votes, error flags and
  the message count) and a sparse dynamic exchange, NBX (synchronous sends,
  probes, a nonblocking barrier): per rank, words in proportion to the ranks
  it really talks to, plus O(log p) for the two collectives.

Combiners reduce messages to the same key before they leave the rank and
again at the owner (a distributed GROUP BY / reduce-by-key). Asked for
virtual processors, ``BSP(...)`` builds a :class:`VirtualBSP` instead.

References
----------
L. G. Valiant, "A bridging model for parallel computation", CACM 33(8), 1990.
G. Malewicz et al., "Pregel: a system for large-scale graph processing",
SIGMOD 2010.
T. Hoefler, C. Siebert and A. Lumsdaine, "Scalable communication protocols
for dynamic sparse data exchange", PPoPP 2010 (NBX).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from ._combine import COMBINERS, estimate_distinct_fraction, reduce_by_key
from ._inbox import Inbox
from ._ledger import Ledger
from ._plain import EXCHANGES, SPARSE_MIN_RANKS, PlainBSP, until_halt
from ._virtual import VirtualBSP

__all__ = ["BSP", "Inbox", "COMBINERS", "EXCHANGES", "SPARSE_MIN_RANKS",
           "estimate_distinct_fraction", "reduce_by_key", "until_halt"]


class BSP(PlainBSP):
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

    def __new__(cls, comm=None, *, virtual=None, spill_dir=None, memory_budget=None, **kw):
        plain = virtual is None or (isinstance(virtual, (int, np.integer))
                                    and not isinstance(virtual, bool) and virtual == 1)
        if cls is BSP and not (plain and spill_dir is None and memory_budget is None):
            return VirtualBSP(comm, virtual=1 if virtual is None else virtual,
                              spill_dir=spill_dir, memory_budget=memory_budget, **kw)
        return super().__new__(cls)

    def __init__(self, comm: MPI.Comm, *, debug: bool = False, ledger: Ledger | None = None,
                 exchange: str | None = None, virtual=None, spill_dir=None, memory_budget=None):
        # virtual, spill_dir and memory_budget chose the kind in __new__
        super().__init__(comm, debug=debug, ledger=ledger, exchange=exchange)
