"""The cost ledger: what each superstep and each exchange cost.

Recording is local and cheap; :meth:`Ledger.table` (collective) reduces the
records over ranks once, at report time, so that the h-relation (the largest
number of bytes any rank sent or received) is exact without a collective per
superstep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

__all__ = ["Ledger", "BSPParams"]


@dataclass(frozen=True)
class BSPParams:
    """Machine parameters of the BSP cost model ``T = W + g*H + l*S``.

    ``g`` is seconds per byte of h-relation and ``l`` seconds per
    synchronisation, both measured by :func:`dmsolve.bsp.probe`. Not
    collective.
    """

    g: float
    l: float
    ranks: int

    def predict(self, work: float, h_bytes: float, supersteps: int) -> float:
        """Predicted seconds ``work + g*h_bytes + l*supersteps``. Not collective."""
        return work + self.g * h_bytes + self.l * supersteps


class Ledger:
    """Per-superstep and per-exchange costs on one communicator.

    Recording methods are not collective; :meth:`summary` and :meth:`table`
    are collective on ``comm``.
    """

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.steps: list[tuple[str, np.ndarray]] = []
        self.exchanges: dict[str, np.ndarray] = {}

    #: the columns of a superstep's record (``steps[i][1]``)
    STEP_FIELDS = ("work", "comm", "bytes_sent", "bytes_recv", "msgs_sent", "msgs_recv",
                   "ctrl_sent", "ctrl_recv", "peers_sent", "peers_recv", "io_read", "io_written")

    def record_superstep(self, label, work_s, comm_s, bytes_sent, bytes_recv,
                         msgs_sent, msgs_recv, *, ctrl_sent=0, ctrl_recv=0,
                         peers_sent=0, peers_recv=0, io_read=0, io_written=0) -> None:
        """Record one superstep of this rank. Not collective.

        Seconds of local work and of the sync; payload bytes and BSP messages
        sent and received (a rank's messages to itself count both ways);
        ``ctrl_*``: bytes of this rank's contributions to the sync's
        collectives and their results (the dense exchange's header rows, the
        sparse exchange's Allreduce record; what an MPI library moves for
        them on the wire depends on its algorithm); ``peers_*``: other ranks
        that payload was sent to / received from (self excluded); ``io_*``:
        spill-file bytes read and written (virtual processors,
        :class:`VirtualBSP`).
        """
        self.steps.append((label, np.array([work_s, comm_s, bytes_sent, bytes_recv,
                                            msgs_sent, msgs_recv, ctrl_sent, ctrl_recv,
                                            peers_sent, peers_recv, io_read, io_written],
                                           dtype=np.float64)))

    def record_exchange(self, name, seconds, bytes_sent, bytes_recv, msgs_sent,
                        msgs_recv) -> None:
        """Add one exchange of this rank to the totals of ``name``. Not collective."""
        row = self.exchanges.get(name)
        if row is None:
            row = self.exchanges[name] = np.zeros(6)
        row += (1, seconds, bytes_sent, bytes_recv, msgs_sent, msgs_recv)

    def reset(self) -> None:
        """Forget this rank's records. Not collective."""
        self.steps.clear()
        self.exchanges.clear()

    def summary(self) -> dict:
        """Totals over ranks. Collective on ``comm``.

        Returns a dict with ``supersteps`` (S), ``work`` (W: sum over
        supersteps of the slowest rank's local work), ``h`` (sum over
        supersteps of the h-relation in bytes), ``comm_seconds``, ``ctrl``
        (sum over supersteps of the largest control bytes a rank sent or
        received, see :meth:`record_superstep`), ``io_read`` and
        ``io_written`` (sum over supersteps of the largest spill-file bytes
        a rank read / wrote), and per-step rows ``steps``
        of (label, max work, max comm, h, max messages).
        """
        n = self.comm.allreduce(len(self.steps), op=MPI.MAX)
        local = np.zeros((n, len(self.STEP_FIELDS)))
        for i, (_, row) in enumerate(self.steps):
            local[i] = row
        worst = np.empty_like(local)
        self.comm.Allreduce(local, worst, op=MPI.MAX)
        labels = [lab for lab, _ in self.steps] + [""] * (n - len(self.steps))
        h = np.maximum(worst[:, 2], worst[:, 3])
        rows = [(labels[i], worst[i, 0], worst[i, 1], h[i], worst[i, 4]) for i in range(n)]
        names = sorted(set().union(*self.comm.allgather(list(self.exchanges))))
        ex_local = np.array([self.exchanges.get(k, np.zeros(6)) for k in names]).reshape(-1, 6)
        ex = np.empty_like(ex_local)
        self.comm.Allreduce(ex_local, ex, op=MPI.MAX)
        return {
            "supersteps": n,
            "work": float(worst[:, 0].sum()),
            "comm_seconds": float(worst[:, 1].sum()),
            "h": float(h.sum()),
            "ctrl": float(np.maximum(worst[:, 6], worst[:, 7]).sum()),
            "io_read": float(worst[:, 10].sum()),
            "io_written": float(worst[:, 11].sum()),
            "steps": rows,
            "exchanges": {k: dict(zip(("calls", "seconds", "bytes_sent", "bytes_recv",
                                       "msgs_sent", "msgs_recv"), ex[i]))
                          for i, k in enumerate(names)},
        }

    def table(self, params: BSPParams | None = None, max_rows: int = 20) -> str:
        """A PETSc ``-log_view``-like table of supersteps and exchanges, with
        the BSP prediction ``W + g*H + l*S`` when ``params`` is given.
        Collective on ``comm``; every rank gets the same string."""
        s = self.summary()
        lines = ["BSP ledger on %d ranks: %d supersteps" % (self.comm.Get_size(),
                                                          s["supersteps"]),
                 "%-28s %11s %11s %12s %8s" % ("superstep", "work max s", "sync max s",
                                               "h (bytes)", "msgs")]
        for lab, w, c, h, m in s["steps"][:max_rows]:
            lines.append("%-28s %11.3e %11.3e %12d %8d" % (lab[:28], w, c, h, m))
        if s["supersteps"] > max_rows:
            lines.append("... %d more" % (s["supersteps"] - max_rows))
        lines.append("%-28s %11.3e %11.3e %12d" % ("total", s["work"], s["comm_seconds"], s["h"]))
        if s["exchanges"]:
            lines.append("%-28s %11s %11s %12s" % ("exchange", "calls", "max s", "bytes max"))
            for k, e in s["exchanges"].items():
                lines.append("%-28s %11d %11.3e %12d" % (
                    k[:28], e["calls"], e["seconds"], max(e["bytes_sent"], e["bytes_recv"])))
        if params is not None:
            pred = params.predict(s["work"], s["h"], s["supersteps"])
            meas = s["work"] + s["comm_seconds"]
            lines.append("BSP model W + g*H + l*S = %.3e s (g=%.3e s/byte, l=%.3e s); "
                         "measured W + sync = %.3e s" % (pred, params.g, params.l, meas))
        return "\n".join(lines)
