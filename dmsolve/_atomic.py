"""Atomic file writes: write a temporary beside the file, then move it into place.

A write that fails (a full disk, a dead writer) leaves the previous file as
it was, and the temporary is removed, so failed writes leave nothing behind.
"""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager

__all__ = ["TEMPORARY_SUFFIX", "temporary_path", "commit_temporary", "discard",
           "atomic_path"]

#: What a temporary adds to the name of the file it will become.
TEMPORARY_SUFFIX = ".tmp"


def temporary_path(path) -> str | None:
    """The temporary that becomes ``path``: the file ``path`` names (symbolic
    links followed, so that a link keeps pointing at the new file) plus
    ``".tmp"``, in the same directory, so that moving it into place is one
    rename on one file system. None if ``path`` is a device, a pipe or another
    file that is not a regular file: such a file is written in place (a
    rename would put a plain file in its stead). Not collective."""
    real = os.path.realpath(os.fspath(path))
    if os.path.exists(real) and not os.path.isfile(real):
        return None
    return real + TEMPORARY_SUFFIX


def commit_temporary(tmp: str) -> None:
    """Move the written temporary ``tmp`` onto the file it becomes
    (``os.replace``), giving it the permission bits of the file it replaces.
    Not collective; raises OSError (``tmp`` is then still there)."""
    target = tmp[:-len(TEMPORARY_SUFFIX)]
    try:
        os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
    except FileNotFoundError:
        pass                    # a new file: the process's default permissions
    os.replace(tmp, target)


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
    move it into place (:func:`commit_temporary`). If the block or the move
    raises (any exception, ``KeyboardInterrupt`` included), the temporary is
    removed and the exception goes on unchanged; ``path`` is left as it was.
    A device or pipe at ``path`` is yielded itself and written in place.
    Not collective.
    """
    tmp = temporary_path(path)
    if tmp is None:
        yield os.fspath(path)
        return
    try:
        yield tmp
        commit_temporary(tmp)
    except BaseException:
        discard(tmp)
        raise
