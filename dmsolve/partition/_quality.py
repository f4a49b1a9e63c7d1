"""How good a partition is: edge cut, row and nonzero balance, and the halo
(ghosts and neighbours) each part would have, computed without moving the matrix.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from ..validate import agreed
from ._exchange import exchange, fetch
from ._partition import Partition

__all__ = ["PartitionQuality", "partition_quality"]


@dataclasses.dataclass
class PartitionQuality:
    """Quality of a partition of a matrix's rows (replicated on every rank).

    Made by :func:`partition_quality`; its methods are not collective.

    Attributes
    ----------
    nparts : int
    edge_cut : int
        Edges ``{i, j}`` (``i != j``, ``a_ij != 0`` or ``a_ji != 0`` stored)
        whose ends lie in different parts: METIS's edge cut of the
        symmetrised graph.
    rows, nnz : ndarray
        Rows and stored entries per part.
    ghosts : ndarray
        Distinct off-part columns referenced by each part's rows (the halo
        a matvec receives).
    neighbours : ndarray
        Distinct parts owning those columns.
    """

    nparts: int
    edge_cut: int
    rows: np.ndarray
    nnz: np.ndarray
    ghosts: np.ndarray
    neighbours: np.ndarray

    @property
    def row_imbalance(self) -> float:
        """``max(rows) / mean(rows)``; 1 is perfect."""
        return _imbalance(self.rows)

    @property
    def nnz_imbalance(self) -> float:
        """``max(nnz) / mean(nnz)``; 1 is perfect."""
        return _imbalance(self.nnz)

    def as_dict(self) -> dict:
        """Plain Python values, for JSON or logging. Not collective."""
        return {"nparts": self.nparts, "edge_cut": self.edge_cut,
                "row_imbalance": self.row_imbalance, "nnz_imbalance": self.nnz_imbalance,
                "rows": self.rows.tolist(), "nnz": self.nnz.tolist(),
                "ghosts": self.ghosts.tolist(), "neighbours": self.neighbours.tolist()}

    def format(self) -> str:
        """A table, one line per part, then the totals. Not collective."""
        lines = ["%5s %10s %12s %8s %10s" % ("part", "rows", "nnz", "ghosts", "neighbours")]
        for p in range(self.nparts):
            lines.append("%5d %10d %12d %8d %10d" % (p, self.rows[p], self.nnz[p],
                                                     self.ghosts[p], self.neighbours[p]))
        lines.append("edge cut %d, row imbalance %.3f, nnz imbalance %.3f" % (
            self.edge_cut, self.row_imbalance, self.nnz_imbalance))
        return "\n".join(lines)


def _imbalance(counts: np.ndarray) -> float:
    mean = counts.mean() if counts.size else 0.0
    return float(counts.max() / mean) if mean > 0 else 1.0


def partition_quality(A, partition: Partition | None = None) -> PartitionQuality:
    """Edge cut, balance, ghosts and neighbours of a partition of ``A``'s rows.

    Collective on ``A.comm``. Without ``partition``, the quality of ``A``'s
    current distribution. Works for any ``nparts`` without moving the
    matrix: the parts of referenced columns are fetched from their owners
    and per-part sets are reduced on rank ``part % size``.

    Parameters
    ----------
    A : DistCSR
        Square, with ``col_layout == row_layout == partition.old_layout``.
    partition : Partition, optional

    Returns
    -------
    PartitionQuality
        The same on every rank.
    """
    layout = A.row_layout
    if partition is None:
        partition = Partition(layout, np.full(layout.local_size, layout.rank))
    with agreed(A.comm):
        if A.shape[0] != A.shape[1] or A.col_layout != layout \
                or partition.old_layout != layout:
            raise ValueError("partition_quality needs a square matrix whose row and column "
                             "layouts are the partition's old layout")
    comm, size, nparts = A.comm, A.comm.Get_size(), partition.nparts
    local = sp.csr_matrix(A.local_rows())
    row_len = np.diff(local.indptr)
    rows = np.repeat(np.arange(layout.start, layout.stop, dtype=np.int64), row_len)
    cols = local.indices.astype(np.int64)
    ucols, where = np.unique(cols, return_inverse=True)
    col_part = fetch(layout, partition.local_parts, ucols)[where.ravel()]
    row_part = np.repeat(partition.local_parts, row_len)

    nrows = np.bincount(partition.local_parts, minlength=nparts).astype(np.int64)
    nnz = np.bincount(row_part, minlength=nparts).astype(np.int64)
    off = (row_part != col_part) & (rows != cols)
    # ghosts: distinct (part, column) pairs, reduced on rank part % size
    rp, cc, cp = row_part[off], cols[off], col_part[off]
    g_part, g_col, g_cpart = exchange(comm, rp % size, rp, cc, cp)
    ghosts = np.zeros(nparts, dtype=np.int64)
    neighbours = np.zeros(nparts, dtype=np.int64)
    if g_part.size:
        pairs = np.unique(np.stack((g_part, g_col)), axis=1)
        ghosts += np.bincount(pairs[0], minlength=nparts)
        nb = np.unique(np.stack((g_part, g_cpart)), axis=1)
        neighbours += np.bincount(nb[0], minlength=nparts)
    # edge cut: distinct unordered cut pairs, reduced on the owner of the smaller end
    lo, hi = np.minimum(rows[off], cols[off]), np.maximum(rows[off], cols[off])
    dest = layout.owner(lo) if lo.size else np.zeros(0, dtype=np.int64)
    e_lo, e_hi = exchange(comm, dest, lo, hi)
    cut = np.unique(np.stack((e_lo, e_hi)), axis=1).shape[1] if e_lo.size else 0

    totals = np.concatenate((nrows, nnz, ghosts, neighbours, [cut])).astype(np.int64)
    comm.Allreduce(MPI.IN_PLACE, totals, op=MPI.SUM)
    return PartitionQuality(nparts=nparts, edge_cut=int(totals[-1]),
                            rows=totals[:nparts], nnz=totals[nparts:2 * nparts],
                            ghosts=totals[2 * nparts:3 * nparts],
                            neighbours=totals[3 * nparts:4 * nparts])
