"""Partitioning: who should own which row, how good that is, and moving data there.

A :class:`Partition` assigns every global index of a layout to a part (a
rank); :func:`redistribute` moves a matrix or vector to the new owners and
back, exactly. The package is split by job:

- ``_exchange``: data movement (:func:`exchange`, :func:`fetch`);
- ``_partition``: :class:`Partition` and :func:`redistribute`;
- ``_block``, ``_metis``, ``_rcb``, ``_hilbert``, ``_multilevel``: the partitioners;
- ``_quality``: :class:`PartitionQuality` and :func:`partition_quality`.

Partitioners (looked up by name in :data:`PARTITIONERS`)
---------------------------------------------------------
- ``"block"``: contiguous blocks of nearly equal row counts.
- ``"nnz"``: contiguous blocks of nearly equal nonzero counts.
- ``"metis"``: METIS k-way partition of the symmetrised graph of the
  matrix, via ``pymetis``. The graph is gathered to rank 0, which runs
  serial METIS and scatters the parts: rank 0 must hold the whole
  adjacency structure (about ``12 * nnz`` bytes) and the run time is serial.
  Above ``METIS_GATHER_SHARES`` (4) times the largest rank's stored entries,
  or above ``METIS_GATHER_NNZ`` (4 million), on more than one rank,
  ``"metis"`` runs ``"multilevel"`` instead (``gather_limit=``): balanced
  inputs on 1-4 ranks get serial METIS's parts, more ranks never gather.
- ``"multilevel"``: the same graph as ``"metis"`` partitioned in parallel
  in the ParMETIS manner (see :func:`multilevel_partition`): heavy-edge
  matching coarsens it to a few thousand vertices, METIS partitions that
  coarse graph on rank 0, and the parts are projected back and refined by
  size-constrained boundary moves; no rank holds more than its share of
  the graph (rank 0 also holds the coarse graph).
- ``"rcb"``: recursive coordinate bisection of the coordinates of the rows
  (``partition(A, "rcb", coords=xyz)``, see :func:`rcb_partition`; :func:`rcb`
  partitions bare points); fully distributed (each bisection finds an exact
  weighted median by bisection on the bit patterns of the coordinates, one
  small ``allreduce`` per step).
- ``"hilbert"``: the rows' coordinates ordered along a Hilbert space-filling
  curve by the distributed sort (:func:`dmsolve.bsp.rank_of`) and the curve
  cut into equal counts (``partition(A, "hilbert", coords=xyz)``, see
  :func:`hilbert_partition`; :func:`hilbert` partitions bare points);
  O(n/p + p) memory and traffic per rank.

The numbering after a move keeps parts contiguous and, inside a part, the
old order (see :class:`Partition`); nothing of size ``global_size`` is
replicated.
"""

from __future__ import annotations

from .._registry import Registry
from ..validate import agreed
from ._block import block_partition, nnz_partition
from ._exchange import exchange, fetch
from ._hilbert import hilbert, hilbert_keys, hilbert_partition
from ._metis import metis_graph_parts, metis_partition
from ._multilevel import multilevel_partition
from ._partition import Partition, redistribute
from ._quality import PartitionQuality, partition_quality
from ._rcb import rcb, rcb_partition

__all__ = [
    "Partition", "PartitionQuality", "PARTITIONERS", "partition",
    "block_partition", "nnz_partition", "metis_partition", "rcb", "rcb_partition",
    "partition_quality", "redistribute", "exchange", "fetch", "metis_graph_parts",
    "hilbert", "hilbert_keys", "hilbert_partition", "multilevel_partition",
]

#: Partitioners by name: ``PARTITIONERS[name](A, **options) -> Partition``.
PARTITIONERS = Registry("partitioner")
PARTITIONERS.register("block", block_partition)
PARTITIONERS.register("nnz", nnz_partition)
PARTITIONERS.register("metis", metis_partition)
PARTITIONERS.register("rcb", rcb_partition)
PARTITIONERS.register("hilbert", hilbert_partition)
PARTITIONERS.register("multilevel", multilevel_partition)


def partition(A, method="metis", **options) -> Partition:
    """Partition ``A``'s rows with the partitioner named ``method``.

    Collective on ``A.comm``. ``method`` is a name in :data:`PARTITIONERS`
    (case and ``-``/``_`` do not matter) or a ``(name, options)`` pair;
    ``options`` are added to the pair's and passed on, e.g.
    ``partition(A, "metis", seed=3)`` or ``partition(A, "rcb", coords=xyz)``.

    Raises
    ------
    ValueError, TypeError
        On every rank, for an unknown name (the message lists the names), a
        malformed descriptor, or what the partitioner raises.
    """
    with agreed(A.comm):
        _, method_fn, opts = PARTITIONERS.resolve(method)
    opts.update(options)
    return method_fn(A, **opts)
