"""The bulk-synchronous (BSP) superstep layer under dmsolve's solvers and topology.

See docs/bsp.md for the model. Public pieces:

- :class:`BSP`: queue typed messages (``send``, ``send_rows``, keyed
  ``send_keyed`` with combiners), aggregators and halt votes, then ``sync``;
  ``run`` drives supersteps until every rank votes to halt (Pregel).
- :class:`NeighborExchange`: a registered neighbour pattern for repeated halo
  exchanges, zero allocations per exchange.
- :func:`psort` and :func:`rank_of`: a distributed sample sort with exact
  splitters, and the global position of every local item;
  :func:`sorted_unique`, the local sorted distinct values by one sort;
  :func:`stable_argsort`, :func:`search_sorted` and :func:`isin_sorted`,
  numpy's answers faster on large integer arrays.
- :func:`piece_components`: connected components (and relative signs) of
  pieces linked across ranks, by hooking and pointer jumping in O(log)
  rounds, or up and down the binary tree of ranks.
- :func:`rank_tree` and :func:`tree_leader`: that binary tree of ranks
  (split by halving, ``ceil(log2 p)`` levels), for tree-shaped reductions.
- :class:`VirtualBSP` (``BSP(comm, virtual=v, spill_dir=..., memory_budget=...)``):
  v virtual processors per rank whose states and messages go to disk beyond
  a memory budget (PEMS2), for data larger than the ranks' memory.
- :class:`Ledger` and :func:`probe`: per-superstep costs and the machine's
  BSP parameters g and l.
- :func:`free_inner_comm`: free dmsolve's private duplicate of a
  communicator, before freeing the communicator itself.
"""

from ._combine import COMBINERS, estimate_distinct_fraction, reduce_by_key
from ._comm import free_inner_comm
from ._inbox import Inbox
from ._ledger import BSPParams, Ledger
from ._exchange import ROUTED_MIN_RANKS
from ._pattern import NeighborExchange
from ._pieces import PieceComponents, piece_components
from ._plain import EXCHANGES, SPARSE_MIN_RANKS
from ._probe import probe
from ._psort import SortedBlock, psort, rank_of
from ._ranktree import rank_tree, tree_leader
from ._superstep import BSP
from ._unique import isin_sorted, search_sorted, sorted_unique, stable_argsort
from ._virtual import VirtualBSP, check_spill_dir, parse_bytes

__all__ = ["BSP", "Inbox", "COMBINERS", "EXCHANGES", "SPARSE_MIN_RANKS", "ROUTED_MIN_RANKS",
           "NeighborExchange",
           "Ledger", "BSPParams", "probe", "reduce_by_key", "estimate_distinct_fraction",
           "psort", "rank_of", "SortedBlock", "sorted_unique", "stable_argsort",
           "search_sorted", "isin_sorted", "piece_components", "PieceComponents",
           "free_inner_comm", "rank_tree", "tree_leader", "VirtualBSP", "parse_bytes",
           "check_spill_dir"]
