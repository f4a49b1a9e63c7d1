"""Collective error agreement for SPMD code.

A check that can fail on one rank only must be agreed on by every rank
before anybody raises, so that no rank is left waiting in a collective.
"""

from __future__ import annotations

from mpi4py import MPI

__all__ = ["agree", "raise_collective", "CollectiveError"]

_KINDS = {0: None, 1: ValueError, 2: TypeError, 3: RuntimeError,
          4: FloatingPointError, 5: OSError, 6: KeyError, 7: IndexError,
          8: ZeroDivisionError, 9: NotImplementedError}
_CODES = {cls: code for code, cls in _KINDS.items() if cls is not None}


class CollectiveError(RuntimeError):
    """Raised on every rank when some rank failed with an exception that
    is not one of the common built-in kinds."""


def _code(exc: BaseException | None) -> int:
    if exc is None:
        return 0
    for cls in type(exc).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return 3


def agree(comm: MPI.Comm, exc: BaseException | None) -> None:
    """Raise the same exception on every rank if any rank has one.

    Collective on ``comm``: one small ``allreduce`` when nobody failed, plus
    one ``allgather`` of the messages when somebody did. The exception
    raised everywhere is the one of the lowest failing rank, of the same
    built-in kind (``ValueError``, ``TypeError``, ...), and its message says
    which ranks failed.

    Parameters
    ----------
    comm : MPI.Comm
        The communicator whose ranks must agree.
    exc : BaseException or None
        This rank's exception, or None if this rank succeeded.
    """
    failed = comm.allreduce(1 if exc is not None else 0, op=MPI.SUM)
    if failed == 0:
        return
    mine = None if exc is None else (_code(exc), str(exc))
    everyone = comm.allgather(mine)
    ranks = [r for r, e in enumerate(everyone) if e is not None]
    code, message = everyone[ranks[0]]
    if comm.Get_size() > 1:
        where = "rank %d" % ranks[0] if len(ranks) == 1 else \
            "ranks %s" % ",".join(map(str, ranks))
        message = "%s [raised on %s]" % (message, where)
    cls = _KINDS.get(code) or CollectiveError
    if exc is not None and _code(exc) == code and str(exc) == everyone[ranks[0]][1]:
        raise cls(message) from exc
    raise cls(message)


def raise_collective(comm: MPI.Comm, condition_failed: bool,
                     cls: type[Exception], message: str) -> None:
    """Raise ``cls(message)`` on every rank if ``condition_failed`` on any.

    Collective on ``comm``. A convenience over :func:`agree` for a check
    whose message is known beforehand on every rank.
    """
    agree(comm, cls(message) if condition_failed else None)
