"""What one synchronisation delivers: an :class:`Inbox` of messages by tag
and source, with the superstep's aggregates and votes.
"""

from __future__ import annotations

import numpy as np

from ._combine import reduce_by_key

__all__ = ["Inbox", "TAG_LIMIT", "key_tag"]

#: Tags are ints in ``[0, TAG_LIMIT)``; the keys of keyed messages travel
#: under the companion tag ``tag + TAG_LIMIT`` (:func:`key_tag`).
TAG_LIMIT = 2**30


def key_tag(tag: int) -> int:
    """The tag the keys of ``send_keyed(tag, ...)`` travel under. Not collective."""
    return tag + TAG_LIMIT


class Inbox:
    """Messages delivered by one :meth:`BSP.sync`. Not collective."""

    def __init__(self, by_tag: dict, aggregates: dict, active: bool, messages: int):
        self._by_tag = by_tag                 # tag -> list of (source, array)
        self.aggregates = aggregates          #: name -> reduced numpy array
        self.any_active = active              #: whether some rank voted to go on
        self.global_messages = messages       #: messages sent by all ranks this step

    def tags(self) -> list[int]:
        """Tags for which something arrived. Not collective."""
        return sorted(self._by_tag)

    def messages(self, tag: int = 0) -> list[tuple[int, np.ndarray]]:
        """``(source, array)`` pairs with this tag, in source order. Not collective."""
        return self._by_tag.get(tag, [])

    def sources(self, tag: int = 0) -> list[int]:
        """Ranks that sent something with this tag, ascending. Not collective."""
        return sorted({s for s, _ in self._by_tag.get(tag, [])})

    def from_source(self, source: int, tag: int = 0) -> list[np.ndarray]:
        """Arrays received from ``source`` with ``tag``, in send order. Not collective."""
        return [a for s, a in self._by_tag.get(tag, []) if s == source]

    def concat(self, tag: int = 0, dtype=None, shape=()) -> np.ndarray:
        """All arrays with ``tag`` concatenated along axis 0 in source order.

        ``dtype`` and ``shape`` (trailing shape of a row) give the result when
        nothing arrived. Not collective.
        """
        arrays = [a for _, a in self._by_tag.get(tag, [])]
        if not arrays:
            return np.zeros((0,) + tuple(shape), dtype=dtype or np.float64)
        if len(arrays) == 1:
            return arrays[0]
        return np.concatenate(arrays, axis=0)

    def concat_with_sources(self, tag: int = 0, dtype=None, shape=()):
        """Like :meth:`concat`, plus the source rank of every row. Not collective."""
        pairs = self._by_tag.get(tag, [])
        data = self.concat(tag, dtype, shape)
        src = np.repeat(np.array([s for s, _ in pairs], dtype=np.int64),
                        [a.shape[0] if a.ndim else 1 for _, a in pairs])
        return data, src

    def reduced(self, tag: int, op: str | None = None, value_shape=(), dtype=None):
        """Owner-side reduce-by-key of keyed messages (see :meth:`BSP.send_keyed`).

        Returns ``(keys, values)``: sorted unique keys and their combined values.
        Not collective (the messages arrived with the sync).
        """
        keys = self.concat(key_tag(tag), dtype=np.int64)
        values = self.concat(tag, dtype=dtype, shape=value_shape)
        return reduce_by_key(keys, values, op or "sum")
