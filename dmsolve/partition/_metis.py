"""The ``"metis"`` partitioner: METIS k-way partition of the symmetrised graph of
a matrix, run serially on rank 0 (via ``pymetis``), and the serial graph call.

The graph is gathered to rank 0, which runs serial METIS and scatters the
parts: rank 0 must hold the whole adjacency structure (about ``12 * nnz``
bytes) and the run time is serial. So the graph is gathered only while that
is a small multiple of one rank's share: at most :data:`METIS_GATHER_SHARES`
times the largest rank's stored entries and at most :data:`METIS_GATHER_NNZ`
entries in all. Above either (on more than one rank) the graph is not
gathered: the parallel ``multilevel_partition`` (coarsening by matching,
METIS on the coarse graph only, parallel refinement) is used instead. On 1-4
balanced ranks the gathered path is always taken, so results there equal
serial METIS's; on more ranks rank 0's memory does not grow with p.
"""

from __future__ import annotations

import numpy as np
import pymetis
import scipy.sparse as sp
from mpi4py import MPI

from .._errors import agree
from ..validate import agreed, check_int
from ._multilevel import gather_to_root, multilevel_partition
from ._partition import Partition

__all__ = ["metis_partition", "metis_graph_parts"]


#: Above this many stored entries (over all ranks, on more than one rank)
#: ``metis_partition`` hands the graph to the parallel ``multilevel_partition``
#: instead of gathering it: 4 million entries is a 3-D Poisson matrix of some
#: 570,000 rows, whose gathered graph and METIS's work arrays would take rank 0
#: about 240 MiB (measured at 4 ranks: 53 MiB peak growth on rank 0 for
#: poisson3d(50), 875,000 entries, against 24 MiB per rank for multilevel).
METIS_GATHER_NNZ = 4_000_000

#: ... and above this many times the largest rank's stored entries: gathering
#: more would put data of global size on rank 0 (at 64 ranks of a weak-scaling
#: run it took rank 0 to 33.5 MiB against 3.5 MiB at 4 ranks, docs/scaling.md).
METIS_GATHER_SHARES = 4


def metis_partition(A, nparts: int | None = None, seed: int = 0, *,
                    gather_limit: int | None = None) -> Partition:
    """METIS k-way partition of the symmetrised graph of ``A`` (via pymetis).

    Collective on ``A.comm``. The graph (pattern of ``A + A^T`` without the
    diagonal) is gathered to rank 0, partitioned by serial METIS and the
    parts scattered back: see the module docstring for the limits. A matrix
    with more than ``gather_limit`` stored entries on more than one rank is
    partitioned by :func:`~dmsolve.partition.multilevel_partition` instead
    (nothing of global size on any rank; cut within 1.3x of METIS's, see
    bench/partition_quality.md). The default limit is relative: at most
    :data:`METIS_GATHER_SHARES` times the largest rank's entries, and at
    most :data:`METIS_GATHER_NNZ`.

    Parameters
    ----------
    A : DistCSR
        Square matrix.
    nparts : int, optional
        Default ``comm.size``.
    seed : int, optional
        METIS random seed; the result is deterministic for a given seed.
    gather_limit : int, optional
        Stored entries above which the graph is not gathered. Default
        ``min(METIS_GATHER_NNZ, METIS_GATHER_SHARES * max local entries)``;
        a given value is used as it is (``gather_limit=A.global_nnz()``
        always gathers).

    Raises
    ------
    ValueError, TypeError
        On every rank, for a non-square ``A`` or a bad ``nparts``/``seed``.
    RuntimeError
        On every rank, if METIS fails.

    References
    ----------
    .. [1] G. Karypis, V. Kumar, A fast and high quality multilevel scheme for
       partitioning irregular graphs, SIAM J. Sci. Comput. 20(1), 1998.
    """
    comm = A.comm
    rank, size = comm.Get_rank(), comm.Get_size()
    with agreed(comm):
        if A.shape[0] != A.shape[1]:
            raise ValueError("metis_partition needs a square matrix, got shape %s" % (A.shape,))
        nparts = check_int("nparts", size if nparts is None else nparts, low=1)
        seed = check_int("seed", seed)
        if gather_limit is not None:
            gather_limit = check_int("gather_limit", gather_limit, low=0)
    if gather_limit is None:
        share = comm.allreduce(A.local_nnz, op=MPI.MAX)
        gather_limit = min(METIS_GATHER_NNZ, METIS_GATHER_SHARES * share)
    if size > 1 and A.global_nnz() > gather_limit:
        return multilevel_partition(A, nparts, seed)
    layout = A.row_layout
    n = layout.global_size
    local = sp.csr_matrix(A.local_rows())
    row_len = np.diff(local.indptr).astype(np.int64)
    rows = np.repeat(np.arange(layout.start, layout.stop, dtype=np.int64), row_len)
    cols = local.indices.astype(np.int64)
    wide = n > np.iinfo(np.int32).max           # ids as 32-bit words when they fit
    g_rows, g_cols = gather_to_root(comm, (rows, cols), wide) or (None, None)
    parts_all, exc = None, None
    if rank == 0:
        try:
            parts_all = metis_graph_parts(g_rows, g_cols, n, nparts, seed)
        except Exception as e:  # noqa: BLE001 - agreed below, raised everywhere
            exc = RuntimeError("METIS failed: %s" % e)
    agree(comm, exc)
    counts = layout.local_sizes
    parts = np.empty(layout.local_size, dtype=np.int64)
    comm.Scatterv([parts_all, (counts, layout.ranges[:-1]), MPI.INT64_T] if rank == 0
                  else None, [parts, MPI.INT64_T], root=0)
    return Partition(layout, parts, nparts=nparts)


def metis_graph_parts(rows, cols, n: int, nparts: int, seed: int = 0) -> np.ndarray:
    """Serial METIS k-way parts of the graph with edges ``(rows[k], cols[k])``.

    The graph is symmetrised and self loops are dropped, so ``rows, cols``
    may be the pattern of any square matrix. Not collective: it runs on the
    calling rank alone (:func:`metis_partition` calls it on rank 0).

    Parameters
    ----------
    rows, cols : ndarray of int64
        Edge ends, in ``[0, n)``.
    n : int
        Number of vertices.
    nparts : int
        Number of parts (1 gives all zeros without calling METIS).
    seed : int, optional
        METIS random seed; the result is a deterministic function of the
        inputs.

    Returns
    -------
    ndarray of int64, shape (n,)
        The part of every vertex, in ``[0, nparts)``.
    """
    if nparts == 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    off = rows != cols
    G = sp.csr_matrix((np.ones(int(off.sum()), dtype=np.int8), (rows[off], cols[off])),
                      shape=(n, n))
    G = (G + G.T).tocsr()
    G.sort_indices()
    opts = pymetis.Options(seed=int(seed))
    xadj, adjncy = G.indptr.astype(np.int64), G.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        graph = {"adjacency": pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy)}
    else:
        graph = {"xadj": xadj, "adjncy": adjncy}
    _, parts = pymetis.part_graph(nparts, options=opts, **graph)
    return np.asarray(parts, dtype=np.int64)
