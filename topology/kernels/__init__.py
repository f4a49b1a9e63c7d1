"""Compiled building blocks shared by the stages of topology: binary heaps,
union-find by meaning, bit sets, growing arrays (numba kernels, not
collective), and kernels run on blocks of their items by the rank's threads."""

from . import _heap as heap
from ._arrays import grow
from ._batches import BLOCKS_PER_THREAD, PATH_BLOCK, item_blocks, run_blocks
from ._bits import lowest_bit, set_add, set_pop
from ._unionfind import add_distinct, find_root, forest_root, union_min

__all__ = ["heap", "grow", "lowest_bit", "set_add", "set_pop", "find_root", "forest_root",
           "union_min", "add_distinct", "item_blocks", "run_blocks", "PATH_BLOCK",
           "BLOCKS_PER_THREAD"]
