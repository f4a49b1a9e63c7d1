"""Progress reports of long set-ups (AMG levels, gemslr levels, persistence
phases), on request: ``progress=True`` prints on rank 0, a callable receives
each report, and the default ``None`` costs nothing."""

from __future__ import annotations

import sys
import time
from typing import Callable

from .validate import agreed

__all__ = ["Progress", "ProgressPrinter", "check_progress"]


class ProgressPrinter:
    """Print each report on rank 0 as ``task: message (seconds s)``.

    What ``progress=True`` gives. Not collective; prints nothing on other ranks.

    Parameters
    ----------
    comm : MPI.Comm
    file : file object, optional
        Where rank 0 prints (``sys.stdout`` at the time of each report by default).
    """

    def __init__(self, comm, file=None):
        self.rank = comm.Get_rank()
        self.file = file

    def __call__(self, task: str, message: str, seconds: float) -> None:
        if self.rank == 0:
            print("%s: %s (%.2f s)" % (task, message, seconds),
                  file=self.file or sys.stdout, flush=True)


class Progress:
    """The reporter a long set-up calls at each stage.

    Parameters
    ----------
    progress : None, bool or callable
        ``None``/``False``: no reports (each call is one attribute test).
        ``True``: a :class:`ProgressPrinter` on rank 0. A callable
        ``progress(task, message, seconds)`` is called on every rank with the
        same arguments but ``seconds`` (this rank's time since the set-up began).
    comm : MPI.Comm
        The communicator of the set-up.
    task : str
        What is being set up (``"amg"``, ``"gemslr"``, ``"persistence"``), the
        first argument of every report.

    Notes
    -----
    Constructing it is not collective (check ``progress`` through
    :func:`dmsolve.validate.agreed` with the other options, by
    :func:`check_progress`). A report is collective on ``comm`` when
    reporting is on: an exception in the user's callable on some ranks is
    raised on every rank (:func:`dmsolve.validate.agreed`), so a set-up must
    report at points every rank reaches, with a message every rank agrees on.
    """

    __slots__ = ("sink", "comm", "task", "_t0")

    def __init__(self, progress, comm, task: str):
        self.sink = check_progress(progress, comm)
        self.comm = comm
        self.task = task
        self._t0 = time.perf_counter()

    def __bool__(self) -> bool:
        return self.sink is not None

    def __call__(self, message: str, *args) -> None:
        """Report ``message % args``. Collective on ``comm`` when reporting is on."""
        if self.sink is None:
            return
        text = message % args if args else message
        with agreed(self.comm):
            self.sink(self.task, text, time.perf_counter() - self._t0)


def check_progress(progress, comm) -> Callable | None:
    """``progress`` as a report function or None. Not collective.

    Raises
    ------
    TypeError
        If ``progress`` is not None, a bool or a callable.
    """
    if progress is None or progress is False:
        return None
    if progress is True:
        return ProgressPrinter(comm)
    if not callable(progress):
        raise TypeError("progress must be None, True or a callable "
                        "progress(task, message, seconds), got %s" % type(progress).__name__)
    return progress
