"""Compiled building blocks shared by the stages of topology: binary heaps,
union-find by meaning, bit sets and growing arrays (numba kernels, not
collective)."""

from . import _heap as heap
from ._arrays import grow
from ._bits import lowest_bit, set_add, set_pop
from ._unionfind import add_distinct, find_root, forest_root, union_min

__all__ = ["heap", "grow", "lowest_bit", "set_add", "set_pop", "find_root", "forest_root",
           "union_min",
           "add_distinct"]
