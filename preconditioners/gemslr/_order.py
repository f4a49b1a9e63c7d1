"""Stage 1 of GeMSLR, the multilevel ordering: k-way partitions, interiors and
interfaces, recursion on the interface; and who owns which row afterwards.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import Layout, agree
from dmsolve.partition import Partition, metis_graph_parts

__all__ = ["multilevel_order", "Ordering", "order"]


def multilevel_order(A: sp.csr_matrix, nlev: int, ncomp: int, seed: int = 0,
                     min_size: int | None = None) -> tuple[list[list[np.ndarray]], np.ndarray]:
    """The GeMSLR multilevel ordering of a matrix graph. Not collective.

    Level ``l`` splits the nodes ``N_l`` (``N_0`` = all) by a METIS k-way
    partition into ``ncomp`` parts; a node with a neighbour in a part of
    smaller number is *interface*, the others are the *interiors* of their
    part. Interiors of different parts are not coupled, so ``B_l`` is block
    diagonal. ``N_{l+1}`` is the interface; the recursion stops after
    ``nlev - 1`` splits, or earlier when fewer than ``min_size`` nodes
    (default ``2 * ncomp``) are left or a split finds no interior. What is
    left is the last level.

    Parameters
    ----------
    A : scipy sparse matrix, square
        Its pattern, symmetrised, is the graph.
    nlev : int
        Levels including the last (``nlev = 1``: the whole matrix is the last
        level).
    ncomp : int
        Parts per level.
    seed : int
        METIS seed; the ordering is a deterministic function of the inputs.

    Returns
    -------
    levels : list of lists of int64 arrays
        ``levels[l][j]``: sorted ids of the interior of part ``j`` at level
        ``l`` (possibly empty).
    last : int64 array
        Sorted ids of the last level.

    References
    ----------
    .. [1] G. Dillon, V. Kalantzis, Y. Xi, Y. Saad, "A hierarchical low rank
       Schur complement preconditioner for indefinite linear systems", SIAM
       J. Sci. Comput. 40(4), 2018 (the multilevel k-way reordering).
    """
    A = sp.csr_matrix(A)
    n = A.shape[0]
    min_size = 2 * ncomp if min_size is None else min_size
    G = sp.csr_matrix((np.ones(A.nnz, dtype=np.int8), A.indices, A.indptr), shape=A.shape)
    G = (G + G.T).tocsr()
    nodes = np.arange(n, dtype=np.int64)
    levels: list[list[np.ndarray]] = []
    for _ in range(nlev - 1):
        if nodes.size < max(min_size, 2):
            break
        sub = G[nodes][:, nodes].tocoo()
        parts = metis_graph_parts(sub.row.astype(np.int64), sub.col.astype(np.int64),
                                  nodes.size, ncomp, seed)
        iface = np.zeros(nodes.size, dtype=bool)
        cross = parts[sub.row] > parts[sub.col]
        iface[sub.row[cross]] = True
        if iface.all() or not iface.any():
            break
        inner = ~iface
        levels.append([nodes[inner & (parts == j)] for j in range(ncomp)])
        nodes = nodes[iface]
    return levels, nodes


@dataclasses.dataclass
class Ordering:
    """The multilevel ordering as every rank holds it: nothing of the global
    size is replicated.

    Attributes
    ----------
    partition : dmsolve.partition.Partition
        From ``A``'s row layout to the GeMSLR owners: subdomain ``j`` of
        ``K`` at any level goes to rank ``j * size // K``, the last level is
        split in contiguous blocks (in id order) over all ranks.
    local_group : int64 array
        For each row this rank owns in ``A``'s layout, its group
        ``l * K + j`` (interior of subdomain ``j`` at level ``l``), or
        ``L * K`` for the last level. A rank orders its GeMSLR rows by group,
        then by original id.
    sub_sizes : int64 array, shape (L, K)
        Rows in every subdomain's interior (replicated).
    counts : int64 array, shape (size, L + 1)
        Rows of each level on each rank, the last level in the last column
        (replicated).
    """

    partition: Partition
    local_group: np.ndarray
    sub_sizes: np.ndarray
    counts: np.ndarray

    @property
    def num_levels(self) -> int:
        """Levels including the last."""
        return self.sub_sizes.shape[0] + 1

    @property
    def nparts(self) -> int:
        """Subdomains per level, ``K``."""
        return self.sub_sizes.shape[1]

    @property
    def sub_owner(self) -> np.ndarray:
        """The rank of each subdomain (the same at every level)."""
        return _sub_owner(self.nparts, self.counts.shape[0])

    def gather(self) -> tuple[list[list[np.ndarray]], np.ndarray]:
        """``(levels, last)`` as :func:`multilevel_order` returns them, on every rank.

        Collective on the partition's ``comm``; O(global size) memory per rank.
        """
        old = self.partition.old_layout
        groups = np.empty(old.global_size, dtype=np.int64)
        old.comm.Allgatherv([self.local_group, MPI.INT64_T],
                            [groups, (old.local_sizes, old.ranges[:-1]), MPI.INT64_T])
        L, K = self.sub_sizes.shape
        ids = np.argsort(groups, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(groups, minlength=L * K + 1))))
        members = [ids[bounds[g]:bounds[g + 1]] for g in range(L * K + 1)]
        return [members[l * K:(l + 1) * K] for l in range(L)], members[L * K]


def _sub_owner(nparts: int, size: int) -> np.ndarray:
    # subdomain j of K goes to rank j * size // K
    return np.arange(nparts, dtype=np.int64) * size // nparts


def order(A, nlev: int, nparts: int, seed: int) -> Ordering:
    """The GeMSLR ordering of ``A`` and the :class:`Ordering` that places it.

    Collective on ``A.comm``. The graph is gathered to rank 0, which runs
    :func:`multilevel_order` (serial METIS, as
    :func:`dmsolve.partition.metis_partition`) and scatters each row's group
    to its owner; the ordering does not depend on the number of ranks.

    Raises
    ------
    RuntimeError
        On every rank, if the ordering fails on rank 0.
    """
    comm = A.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    old = A.row_layout
    A0 = A.to_scipy(root=0)
    groups, sub_sizes, exc = None, None, None
    if rank == 0:
        try:
            levels, last = multilevel_order(A0, nlev, nparts, seed)
            L = len(levels)
            groups = np.full(old.global_size, L * nparts, dtype=np.int64)
            sub_sizes = np.zeros((L, nparts), dtype=np.int64)
            for l, subs in enumerate(levels):
                for j, ids in enumerate(subs):
                    groups[ids] = l * nparts + j
                    sub_sizes[l, j] = ids.size
        except Exception as e:  # noqa: BLE001 - agreed below, raised everywhere
            exc = RuntimeError("gemslr: multilevel ordering failed: %s" % e)
    agree(comm, exc)
    del A0
    sub_sizes = comm.bcast(sub_sizes, root=0)
    local_group = np.empty(old.local_size, dtype=np.int64)
    comm.Scatterv([groups, (old.local_sizes, old.ranges[:-1]), MPI.INT64_T] if rank == 0
                  else None, [local_group, MPI.INT64_T], root=0)
    L = sub_sizes.shape[0]
    # the last level in contiguous blocks of its rows, in id order
    is_last = local_group == L * nparts
    n_last = old.global_size - int(sub_sizes.sum())
    last_layout = Layout.block(n_last, comm)
    before = comm.exscan(int(is_last.sum())) or 0
    position = before + np.cumsum(is_last)[is_last] - 1
    sub_owner = _sub_owner(nparts, size)
    owners = sub_owner[local_group % nparts]
    owners[is_last] = last_layout.owner(position) if position.size else 0
    counts = np.zeros((size, L + 1), dtype=np.int64)
    for l in range(L):
        np.add.at(counts[:, l], sub_owner, sub_sizes[l])
    counts[:, L] = last_layout.local_sizes
    return Ordering(Partition(old, owners), local_group, sub_sizes, counts)
