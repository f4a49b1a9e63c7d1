"""Stage 1 of GeMSLR, the multilevel ordering: k-way partitions, interiors and
interfaces, recursion on the interface; and who owns which row afterwards.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Layout
from dmsolve.partition import Partition, fetch, metis_graph_parts, metis_partition

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
    (default ``2 * ncomp``) are left, a split finds no interior, or a split
    finds no interface (the parts are uncoupled: all of them are interiors
    and the last level is empty). What is left is the last level.

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
        if iface.all():
            break
        inner = ~iface
        levels.append([nodes[inner & (parts == j)] for j in range(ncomp)])
        nodes = nodes[iface]
        if not nodes.size:      # uncoupled parts: all interior, no last level
            break
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

    Collective on ``A.comm``. The same levels as :func:`multilevel_order`,
    computed where the rows are: level by level, the remaining nodes'
    subgraph (of the pattern of ``A + A^T``) is renumbered in place (an
    ``Exscan``), partitioned by :func:`dmsolve.partition.metis_partition`
    and each node's interface status found from its neighbours' parts (one
    fetch of the ghost columns' parts). Below ``metis_partition``'s gather
    limit (a few ranks' shares: on 1-4 balanced ranks) METIS runs on the
    gathered subgraph and the ordering equals the serial one; above it the
    subgraph is partitioned in parallel (``"multilevel"``) and nothing of
    global size is held by any rank.

    Raises
    ------
    RuntimeError
        On every rank, if METIS fails.
    """
    comm = A.comm
    size = comm.Get_size()
    old = A.row_layout
    local_group, sub_sizes = _levels(A, nlev, nparts, seed)
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


def _levels(A, nlev: int, ncomp: int, seed: int, min_size: int | None = None):
    """:func:`multilevel_order`'s levels, distributed: each owned row's group
    ``l * ncomp + j`` (``L * ncomp`` for the last level) and the interior
    sizes ``(L, ncomp)`` (replicated). Collective on ``A.comm``."""
    comm = A.comm
    lay = A.row_layout
    min_size = 2 * ncomp if min_size is None else min_size
    # the symmetrised pattern, each rank its own rows (A's rows and A^T's)
    loc = sp.coo_matrix(A.local_rows())
    r = loc.row.astype(np.int64) + lay.start
    c = loc.col.astype(np.int64)
    G = DistCSR.from_coo(np.concatenate((r, c)), np.concatenate((c, r)),
                         np.ones(2 * r.size), A.shape, comm, layout=lay, mode="insert")
    g = sp.coo_matrix(G.local_rows())
    rows = g.row.astype(np.int64)                  # local row positions
    # the columns, each asked for once per level
    ucols, cinv = np.unique(g.col.astype(np.int64), return_inverse=True)
    alive = np.ones(lay.local_size, dtype=bool)    # owned rows still in N_l
    group = np.full(lay.local_size, -1, dtype=np.int64)
    sizes: list[np.ndarray] = []
    for level in range(nlev - 1):
        count = int(alive.sum())
        total = comm.allreduce(count)
        if total < max(min_size, 2):
            break
        # the subgraph of the remaining nodes, numbered in id order (as the serial
        # G[nodes][:, nodes]): new ids by a prefix sum, the ghosts' by one fetch
        first = comm.exscan(count) or 0
        new_id = np.full(lay.local_size, -1, dtype=np.int64)
        new_id[alive] = first + np.arange(count, dtype=np.int64)
        col_id = fetch(lay, new_id, ucols)[cinv]
        keep = alive[rows] & (col_id >= 0)
        sub_lay = Layout.from_local_size(count, comm)
        sr, sc = new_id[rows[keep]], col_id[keep]
        sub = DistCSR.from_coo(sr, sc, np.ones(sr.size), (total, total), comm,
                               layout=sub_lay, mode="insert")
        parts = metis_partition(sub, ncomp, seed).local_parts
        # interface: a neighbour in a part of smaller number
        usc, sinv = np.unique(sc, return_inverse=True)
        col_part = fetch(sub_lay, parts, usc)[sinv]
        row_part = parts[sr - sub_lay.start]
        iface_sub = np.zeros(count, dtype=bool)
        iface_sub[(sr - sub_lay.start)[row_part > col_part]] = True
        n_iface = comm.allreduce(int(iface_sub.sum()))
        if n_iface == total:
            break
        where = np.flatnonzero(alive)
        inner = where[~iface_sub]
        group[inner] = level * ncomp + parts[~iface_sub]
        sizes.append(np.bincount(parts[~iface_sub], minlength=ncomp).astype(np.int64))
        alive[inner] = False
        if n_iface == 0:
            # the parts are uncoupled (the remaining graph's components fell
            # whole into parts): all of them are subdomains of this level and
            # the last level is empty (breaking here instead made every node
            # left a last level factored on every rank: the whole interface of
            # a 64-rank slab, 25335 rows)
            break
    L = len(sizes)
    group[alive] = L * ncomp
    sub_sizes = np.zeros((L, ncomp), dtype=np.int64)
    if L:
        sub_sizes[:] = np.stack(sizes)
        comm.Allreduce(MPI.IN_PLACE, sub_sizes, op=MPI.SUM)
    return group, sub_sizes
