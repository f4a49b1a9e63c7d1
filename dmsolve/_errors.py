"""Collective error agreement for SPMD code.

A check that can fail on one rank only must be agreed on by every rank
before anybody raises, so that no rank is left waiting in a collective.
:func:`agree` raises the failing rank's exception, of the same type, on
every rank; :func:`poll` waits for a non-blocking collective for a bounded
time, so that a failing rank whose peers never arrive can still give up.
"""

from __future__ import annotations

import builtins
import pickle
import time

import numpy as np
from mpi4py import MPI

__all__ = ["agree", "raise_collective", "raise_from_root", "poll", "complete",
           "CollectiveError", "AGREE_GRACE"]

#: Seconds a rank that holds an error waits, at an agreement made with a
#: grace period (``agree(..., grace=AGREE_GRACE)``; every agreement of a
#: Krylov solve on an error in user code), for the other ranks to arrive.
#: If they do not (they wait in a communication the failing rank did not
#: make), it raises its own exception alone, and under ``python -m mpi4py``
#: that aborts the job. Read at call time.
AGREE_GRACE = 3.0

# Interval between two MPI_Test calls of a polling rank: short against the
# grace period, long enough not to take a shared core from the ranks it waits for.
_POLL_INTERVAL = 1e-3

# The built-in kinds raised as ``cls(message)`` on every rank (the behaviour
# before exception types were transported), and the fall-back kind of an
# exception that cannot be transported.
_KINDS = (ValueError, TypeError, RuntimeError, FloatingPointError, OSError, KeyError,
          IndexError, ZeroDivisionError, NotImplementedError)


class CollectiveError(RuntimeError):
    """Raised on every rank when some rank failed with an exception that
    could not be sent to the other ranks (it cannot be pickled, or not be
    unpickled on every rank).

    Its message is ``"TypeName: message [raised on rank N]"``; when the
    original exception is a ``ValueError``, ``TypeError``, ``OSError``,
    ``KeyError``, ``IndexError``, ``FloatingPointError``,
    ``ZeroDivisionError`` or ``NotImplementedError``, the error raised is
    also an instance of that kind, so ``except ValueError`` still catches it.

    Attributes
    ----------
    type_name : str
        The qualified name of the original exception's type.
    original_message : str
        ``str()`` of the original exception.
    """

    type_name: str = ""
    original_message: str = ""


_COLLECTIVE_KINDS: dict[type, type] = {}


def _collective_error(kind: type | None, type_name: str, message: str,
                      where: str) -> CollectiveError:
    cls = CollectiveError
    if kind is not None and kind is not RuntimeError:
        cls = _COLLECTIVE_KINDS.get(kind)
        if cls is None:
            # one class per kind, so that ``except kind`` keeps working
            cls = _COLLECTIVE_KINDS[kind] = type("CollectiveError", (CollectiveError, kind),
                                                 {"__module__": __name__,
                                                  "__doc__": CollectiveError.__doc__})
    err = cls("%s: %s%s" % (type_name, message, where))
    err.type_name, err.original_message = type_name, message
    return err


def _kind(exc: BaseException) -> type | None:
    """The first of :data:`_KINDS` that ``exc`` is an instance of."""
    for cls in type(exc).__mro__:
        if cls in _KINDS:
            return cls
    return None


def _qualname(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" \
        else "%s.%s" % (cls.__module__, cls.__qualname__)


def _add_note(exc: BaseException, note: str) -> None:
    add_note = getattr(exc, "add_note", None)
    if add_note is not None:
        add_note(note)
    elif len(exc.args) == 1 and isinstance(exc.args[0], str):   # Python 3.10
        exc.args = ("%s\n%s" % (exc.args[0], note),)


def _payload(exc: BaseException) -> tuple:
    """What a failing rank sends: ``(how, type name, message, data)``.

    ``how`` is ``"kind"`` for the built-in kinds of :data:`_KINDS` (rebuilt
    as ``cls(message)``, as always), ``"builtin"`` for another built-in type
    (rebuilt by name), ``"pickle"`` for any other type that pickles (data:
    the bytes), and ``"none"`` when it does not (data: the nearest kind's name).
    """
    cls, message = type(exc), str(exc)
    kind = _kind(exc)
    if cls in _KINDS:
        return ("kind", cls.__name__, message, None)
    if cls.__module__ == "builtins" and getattr(builtins, cls.__name__, None) is cls:
        return ("builtin", cls.__name__, message, None if kind is None else kind.__name__)
    try:
        blob = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - any failure to pickle means "cannot send"
        return ("none", _qualname(cls), message, None if kind is None else kind.__name__)
    return ("pickle", _qualname(cls), message, (blob, None if kind is None else kind.__name__))


def _rebuild(payload: tuple, where: str) -> BaseException | None:
    """The exception to raise from a failing rank's payload, or None when it
    cannot be rebuilt on this rank. Not collective."""
    how, name, message, data = payload
    try:
        if how in ("kind", "builtin"):
            return getattr(builtins, name)(message + where)
        if how == "pickle":
            exc = pickle.loads(data[0])
            if not isinstance(exc, BaseException):
                return None
            if where:
                if len(exc.args) == 1 and isinstance(exc.args[0], str):
                    exc.args = (exc.args[0] + where,)
                if where not in str(exc):      # a __str__ of its own: say it in a note
                    _add_note(exc, where.strip())
            return exc
    except Exception:  # noqa: BLE001 - an unpicklable or unbuildable type: CollectiveError
        return None
    return None


def _fallback(payload: tuple, where: str) -> BaseException:
    how, name, message, data = payload
    kind_name = data[1] if how == "pickle" else data
    kind = getattr(builtins, kind_name) if isinstance(kind_name, str) else None
    if how == "builtin" and kind is not None:
        return kind(message + where)        # a built-in type that takes no message
    return _collective_error(kind, name, message, where)


def poll(request: MPI.Request, seconds: float) -> bool:
    """Wait at most ``seconds`` for ``request`` to complete.

    Tests the request (``MPI_Test``) every millisecond. Returns True if it
    completed, False if the time ran out (the request is then still active).
    Not collective itself; the request usually belongs to a non-blocking
    collective (``Ibarrier``, ``Iallreduce``) that the other ranks complete
    with ``Wait``.
    """
    deadline = time.monotonic() + seconds
    while not request.Test():
        if time.monotonic() > deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def complete(request: MPI.Request, exc: BaseException | None,
             grace: float | None) -> None:
    """Complete ``request``: ``Wait`` if ``exc`` is None or ``grace`` is None;
    else :func:`poll` it for ``grace`` seconds and, if the other ranks do not
    arrive, raise ``exc`` on this rank alone with a note saying so.

    Not collective itself (completes the collective the request belongs to).
    """
    if exc is None or grace is None:
        request.Wait()
        return
    if poll(request, grace):
        return
    world = MPI.COMM_WORLD
    _add_note(exc, "dmsolve: raised on rank %d of %d only: the other ranks did not reach "
              "the agreement on this error within %g s (they wait in a communication this "
              "rank did not make); the communicator cannot be used any more, and under "
              "`python -m mpi4py` this aborts the job"
              % (world.Get_rank(), world.Get_size(), grace))
    raise exc


def agree(comm: MPI.Comm, exc: BaseException | None, *,
          grace: float | None = None) -> None:
    """Raise the same exception on every rank if any rank has one.

    Collective on ``comm``: one small ``allreduce`` (an ``Iallreduce`` with
    ``grace``) when nobody failed, plus one ``allgather`` of the failing
    ranks' exceptions when somebody did. Every rank raises the exception
    of the lowest failing rank, of the same type and with the same message
    followed by ``[raised on rank N]`` (on more than one rank), so
    ``try/except`` works alike on every rank:

    - the built-in kinds ``ValueError``, ``TypeError``, ``RuntimeError``,
      ``OSError``, ``KeyError``, ``IndexError``, ``FloatingPointError``,
      ``ZeroDivisionError``, ``NotImplementedError`` and every other built-in
      exception type are rebuilt as ``type(message)``;
    - any other type (yours, ``CheckpointError``, ...) is sent pickled and
      raised as the unpickled copy (the note of the failing ranks appended
      to its single string argument, or added as a note);
    - one that cannot be pickled, or unpickled on every rank, is raised as
      :class:`CollectiveError`, naming the original type.

    On a failing rank the exception raised is chained (``raise ... from``)
    to the rank's own exception, whose traceback is thus kept.

    Parameters
    ----------
    comm : MPI.Comm
        The communicator whose ranks must agree.
    exc : BaseException or None
        This rank's exception, or None if this rank succeeded.
    grace : float or None, keyword-only
        None (default): wait for the other ranks however long they take.
        A number of seconds: a rank that holds an exception waits that long
        for the others (:data:`AGREE_GRACE` is the library's choice); if they
        do not arrive, it raises its own ``exc`` alone, with a note saying
        so, and leaves the agreement incomplete (abort the job then, as
        ``python -m mpi4py`` does for an uncaught exception). For errors
        after which the other ranks may be waiting in a communication of
        their own that the failing rank skipped. Every rank must pass the
        same kind of ``grace`` (None or a number): the agreement is then a
        non-blocking collective, and those never match blocking ones.
    """
    if grace is None:
        failed = comm.allreduce(0 if exc is None else 1, op=MPI.SUM)
    else:
        flag = np.array([0 if exc is None else 1], dtype=np.int32)
        total = np.zeros(1, dtype=np.int32)
        complete(comm.Iallreduce([flag, 1, MPI.INT], [total, 1, MPI.INT], op=MPI.SUM),
                 exc, grace)
        failed = int(total[0])
    if failed == 0:
        return
    mine = None if exc is None else _payload(exc)
    everyone = comm.allgather(mine)
    ranks = [r for r, e in enumerate(everyone) if e is not None]
    where = ""
    if comm.Get_size() > 1:
        where = " [raised on %s]" % ("rank %d" % ranks[0] if len(ranks) == 1
                                     else "ranks %s" % ",".join(map(str, ranks)))
    payload = everyone[ranks[0]]
    err = _rebuild(payload, where)
    # the type must be the same everywhere: a copy that fails to rebuild on
    # one rank makes every rank fall back
    if payload[0] in ("pickle", "builtin") and \
            comm.allreduce(0 if err is None else 1, op=MPI.MIN) == 0:
        err = None
    if err is None:
        err = _fallback(payload, where)
    if exc is not None:
        raise err from exc
    raise err


def raise_collective(comm: MPI.Comm, condition_failed: bool,
                     cls: type[Exception], message: str) -> None:
    """Raise ``cls(message)`` on every rank if ``condition_failed`` on any.

    Collective on ``comm``. A convenience over :func:`agree` for a check
    whose message is known beforehand on every rank.
    """
    agree(comm, cls(message) if condition_failed else None)


def raise_from_root(comm: MPI.Comm, exc: BaseException | None, failed: bool,
                    root: int = 0) -> None:
    """Raise, on every rank, the exception that some ranks already agreed on
    (on a sub-communicator holding ``root``) when ``failed``.

    For errors agreed among some of the ranks only (a coarse AMG level on a
    sub-communicator): the ranks that hold the exception (``exc``) raise it
    unchanged; the others raise a copy of ``root``'s, of the same type and
    message, rebuilt as :func:`agree` does. ``failed`` must be the same on
    every rank (it was reduced), and ``root`` must hold an exception then.

    Collective on ``comm`` when ``failed`` (one ``bcast`` from ``root``);
    not collective otherwise.
    """
    if not failed:
        return
    mine = _payload(exc) if comm.Get_rank() == root else None
    payload = comm.bcast(mine, root=root)
    if exc is not None:
        raise exc
    err = _rebuild(payload, "")
    raise err if err is not None else _fallback(payload, "")
