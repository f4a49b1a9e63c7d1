"""Message tags by name: ``t = ctx.tags("edges", "records")``, then ``tag=t.edges``.

A context hands out fresh tags in the order it is asked for them; SPMD code
asks in the same order on every rank, so the numbers agree with no message.
"""

from __future__ import annotations

from collections import namedtuple
from functools import lru_cache

__all__ = ["TagAllocator"]


@lru_cache(maxsize=256)
def _tags_type(names: tuple[str, ...]) -> type:
    # a namedtuple class costs some 50 us to make: one per set of names
    return namedtuple("Tags", names)


class TagAllocator:
    """The tags ``[first, stop)``, handed out in order, each once. Not collective."""

    def __init__(self, first: int, stop: int):
        self._next = first
        self._stop = stop

    def take(self, names: tuple) -> tuple:
        """A namedtuple of fresh tags, one per name, consecutive ints in the
        order of ``names`` (an empty one for no names). Not collective (see
        :meth:`BSP.tags`).

        Raises
        ------
        TypeError
            If a name is not a string.
        ValueError
            If a name is not an identifier, starts with an underscore or is
            given twice.
        RuntimeError
            If fewer than ``len(names)`` tags are left.
        """
        for name in names:
            if not isinstance(name, str):
                raise TypeError("tag names must be strings, got %r" % (name,))
        try:
            kind = _tags_type(tuple(names))
        except ValueError as e:
            raise ValueError("bad tag names %s: %s" % (list(names), e)) from None
        first = self._next
        if first + len(names) > self._stop:
            raise RuntimeError("this context has %d tags left, fewer than the %d asked "
                               "for; use a new context" % (self._stop - first, len(names)))
        self._next = first + len(names)
        return kind(*range(first, first + len(names)))
