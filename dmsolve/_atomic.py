"""Atomic file writes: write a temporary beside the file, then move it into place.

A write that fails (a full disk, a dead writer) leaves the previous file as
it was, and the temporary is removed, so failed writes leave nothing behind.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

__all__ = ["TEMPORARY_SUFFIX", "temporary_path", "discard", "atomic_path"]

#: What a temporary adds to the name of the file it will become.
TEMPORARY_SUFFIX = ".tmp"


def temporary_path(path) -> str:
    """The temporary that becomes ``path``: ``path + ".tmp"``, in the same
    directory (so that moving it into place is one rename on one file
    system). Not collective."""
    return os.fspath(path) + TEMPORARY_SUFFIX


def discard(path) -> None:
    """Remove the file ``path`` (a temporary, or a file of a failed write) if
    it is there. Not collective.

    Called while another error is on its way, so a failure to remove is
    swallowed: the caller's error is the one to report.
    """
    try:
        os.remove(path)
    except OSError:
        pass


@contextmanager
def atomic_path(path):
    """Yield :func:`temporary_path` of ``path`` to write; when the block ends,
    move it onto ``path`` (``os.replace``). If the block or the move raises
    (any exception, ``KeyboardInterrupt`` included), the temporary is removed
    and the exception goes on unchanged; ``path`` is left as it was. Not
    collective.
    """
    tmp = temporary_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise
