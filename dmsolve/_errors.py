"""Collective error agreement for SPMD code.

A check that can fail on one rank only must be agreed on by every rank
before anybody raises, so that no rank is left waiting in a collective.
:func:`agree` raises the failing rank's exception, of the same type, on
every rank; :func:`poll` waits for a non-blocking collective for a bounded
time, so that a failing rank whose peers never arrive can still give up.

A rank that fails before it communicates would strand its peers inside a
library wait for a message that never comes. So each communicator has a
private error channel (:func:`open_channel`): a rank that holds an error
announces on it (:func:`announce`), with what it has sent, where it stops to wait for
the others on its way to the agreement; the library's point-to-point waits
test it while they wait (:func:`wait_watching`), and a wait that learns that
a message it needs will not come leaves with :class:`PeerFailed`, which
takes its rank to the same agreement. The agreement raises the original failing
rank's exception, never ``PeerFailed``, and then clears the channel and
whatever the abandoned waits left in flight (:func:`on_recovery`).
"""

from __future__ import annotations

import builtins
import os
import pickle
import time

import numpy as np
from mpi4py import MPI

__all__ = ["agree", "raise_collective", "raise_from_root", "poll", "complete",
           "CollectiveError", "AGREE_GRACE", "PeerFailed", "open_channel", "announce",
           "position", "on_announce", "wait_watching", "left_a_wait", "on_recovery",
           "close_channel"]

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


class PeerFailed(Exception):
    """Raised inside the library on a rank whose wait learned, on the error
    channel, that another rank failed: it takes this rank to the agreement
    of the failing rank's exception, which :func:`agree` then raises here
    in its place. Never raised to the caller by :func:`agree`."""


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
    if isinstance(exc, PeerFailed):
        return ("peer", "PeerFailed", message, None)
    if not isinstance(exc, Exception):
        # KeyboardInterrupt, SystemExit, ...: addressed to the process they
        # happened in; the other ranks are told with a CollectiveError
        return ("none", _qualname(cls), message, None)
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


# -- the error channel ------------------------------------------------------------

# The channel of a communicator is a duplicate of it, cached as an attribute
# (collective to make, once). A rank holding an error sends, each time it
# stops to wait for the others (a reduction or a barrier of a solve), one
# small message to every other rank on it: where it stopped (the number of
# user calls it had entered) and what it had sent by then (from the
# providers of on_announce). Nothing else is ever sent there, so its
# messages need no tag of their own: sent with the default, matched with any.
_KEYVAL: list = []
# channel handle -> [announcements made, their send requests], until the
# agreement receives them everywhere
_ANNOUNCED: dict[int, list] = {}
# channel handle -> {source: its latest announcement}, and how many
# announcements were received from each source
_HEARD: dict[int, dict] = {}
_NHEARD: dict[int, dict] = {}
# channel handle -> [user calls entered] of the solve running on it
_POSITION: dict[int, list] = {}
# channel handles on which this rank left a wait since the last agreement
_LEFT: set[int] = set()
# (name, provider(comm)) whose answers an announcement carries
_PROVIDERS: list = []
# run, collectively, by an agreement after which some rank had left a wait
_RECOVERY: list = []


def _keyval() -> int:
    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval())
    return _KEYVAL[0]


def open_channel(comm: MPI.Comm) -> MPI.Comm:
    """The error channel of ``comm``: a private duplicate, made on first use
    and cached on ``comm`` (one per communicator, freed by
    :func:`close_channel`).

    Collective on ``comm`` the first time it is called for that
    communicator (one ``Dup``), so call it where every rank is (a plan's
    construction, the start of a solve); not collective afterwards.
    """
    key = _keyval()
    chan = comm.Get_attr(key)
    if chan is None:
        chan = comm.Dup()
        comm.Set_attr(key, chan)
    return chan


def close_channel(comm: MPI.Comm) -> None:
    """Free ``comm``'s error channel, if it has one, before ``comm`` itself
    is freed (:func:`dmsolve.bsp.free_inner_comm` calls it). Collective on
    ``comm`` when it has one (every rank has one or none alike)."""
    chan = _channel(comm)
    if chan is None:
        return
    comm.Delete_attr(_KEYVAL[0])
    for table in (_ANNOUNCED, _HEARD, _NHEARD, _POSITION):
        table.pop(chan.handle, None)
    _LEFT.discard(chan.handle)
    chan.Free()


def _channel(comm: MPI.Comm) -> MPI.Comm | None:
    return None if not _KEYVAL else comm.Get_attr(_KEYVAL[0])


def position(comm: MPI.Comm) -> list:
    """A fresh one-element list through which a solve on ``comm`` says how
    many user calls it has entered (``slot[0] = calls``), for the waits to
    tell a current announcement from a stale one. Not collective."""
    slot = [0]
    chan = _channel(comm)
    if chan is not None:
        _POSITION[chan.handle] = slot
    return slot


def on_announce(name: str, provider) -> None:
    """Register ``provider(comm)``, whose answer (what this rank has sent
    on ``comm``, say) every announcement carries under ``name``. Not
    collective; call it at import."""
    _PROVIDERS.append((name, provider))


def announce(comm: MPI.Comm, calls: int) -> None:
    """Tell every other rank of ``comm`` that this rank holds an error and
    waits for them after ``calls`` user calls, with what it has sent (the
    providers of :func:`on_announce`): a library wait that needs a message
    this rank has not sent then knows it will not come, and leaves.

    Not collective: one small non-blocking send to every other rank on the
    error channel, received by the agreement that follows (every rank that
    announces must go to one, :func:`agree` on ``comm``). Call it only where
    this rank stops to wait for all the others, so that it sends nothing
    more before they have come too. Nothing is sent when ``comm`` has no
    channel (:func:`open_channel`).
    """
    chan = _channel(comm)
    if chan is None:
        return
    me, size = chan.Get_rank(), chan.Get_size()
    message = (calls, {name: provider(comm) for name, provider in _PROVIDERS})
    mine = _ANNOUNCED.setdefault(chan.handle, [0, []])
    mine[0] += 1
    mine[1].extend(chan.isend(message, dest=r) for r in range(size) if r != me)


def _hear(chan: MPI.Comm) -> dict:
    """Receive the announcements that have arrived on ``chan``; return the
    latest of each source: ``{source: (calls, what it sent)}``."""
    heard = _HEARD.setdefault(chan.handle, {})
    counts = _NHEARD.setdefault(chan.handle, {})
    status = MPI.Status()
    while chan.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
        src = status.Get_source()
        heard[src] = chan.recv(source=src, tag=MPI.ANY_TAG)
        counts[src] = counts.get(src, 0) + 1
    return heard


def wait_watching(comm: MPI.Comm, requests: list, blocked) -> None:
    """Wait for the point-to-point ``requests`` (of a library exchange on
    ``comm``) while watching the error channel.

    Tests the requests once; only if they have not all completed does it
    poll, with an ``Iprobe`` of the channel between two tests. An
    announcement counts if its rank stopped after at least as many user
    calls as this rank has entered (before that, it may still send). When
    ``blocked(announcements)`` (``{source: what it sent}`` of those that
    count) says a message this wait needs will not come, it cancels
    nothing itself and raises :class:`PeerFailed`: the caller cancels its
    receives and leaves its sends to the recovery (:func:`left_a_wait`,
    :func:`on_recovery`). Not collective.
    """
    if MPI.Request.Testall(requests):
        return
    chan = _channel(comm)
    if chan is None:
        MPI.Request.Waitall(requests)
        return
    slot = _POSITION.get(chan.handle)
    calls = 0 if slot is None else slot[0]
    news = True                             # those heard in an earlier wait too
    spins = 0
    while not MPI.Request.Testall(requests):
        # the channel is probed on every 16th test only: a test costs less.
        # There the rank also yields its core, as MPICH's own blocking waits
        # do: with more ranks than cores, the rank it waits for may need it.
        spins += 1
        if spins % 16 == 0:
            os.sched_yield()
        if news or (spins % 16 == 0 and chan.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)):
            news = False
            valid = {src: sent for src, (at, sent) in _hear(chan).items() if at >= calls}
            if valid and blocked(valid):
                raise PeerFailed("another rank failed before it sent what this rank "
                                 "waits for")


def left_a_wait(comm: MPI.Comm) -> None:
    """Record that this rank left a wait on ``comm`` (after
    :class:`PeerFailed`), so that the next agreement runs the recovery
    hooks. Not collective."""
    chan = _channel(comm)
    if chan is not None:
        _LEFT.add(chan.handle)


def on_recovery(hook) -> None:
    """Register ``hook(comm)``, run on every rank by an agreement on ``comm``
    after which some rank had left a wait (:func:`left_a_wait`): it must
    complete, collectively, what the abandoned waits left in flight. Not
    collective; call it at import."""
    _RECOVERY.append(hook)


def _clear_channel(comm: MPI.Comm, announced: list[int], left: bool) -> None:
    """After an agreement on ``comm``: run the recovery hooks if some rank
    left a wait, receive every announcement still on the channel
    (``announced[r]`` of them were sent by rank ``r``), and complete this
    rank's own. Collective on ``comm``."""
    chan = _channel(comm)
    if chan is None:
        return
    if left:
        for hook in _RECOVERY:
            hook(comm)
    h = chan.handle
    _LEFT.discard(h)
    counts = _NHEARD.pop(h, {})
    _HEARD.pop(h, None)
    me = chan.Get_rank()
    for r, sent in enumerate(announced):
        for _ in range(0 if r == me else sent - counts.get(r, 0)):
            chan.recv(source=r, tag=MPI.ANY_TAG)
    MPI.Request.Waitall(_ANNOUNCED.pop(h, [0, []])[1])


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
      exception type deriving from ``Exception`` are rebuilt as
      ``type(message)``;
    - any other type (yours, ``CheckpointError``, ...) is sent pickled and
      raised as the unpickled copy (the note of the failing ranks appended
      to its single string argument, or added as a note);
    - one that cannot be pickled, or unpickled on every rank, is raised as
      :class:`CollectiveError`, naming the original type.

    On a failing rank the exception raised is chained (``raise ... from``)
    to the rank's own exception, whose traceback is thus kept. A
    ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
    ``SystemExit``) is re-raised unchanged on the rank where it happened;
    the other ranks raise a :class:`CollectiveError` naming it.

    A rank that holds :class:`PeerFailed` (it left a library wait because
    another rank announced a failure, :func:`announce`) counts as failing
    but is never the one whose exception is raised. After the agreement the
    error channel is empty again, and what the abandoned waits left in
    flight is completed (:func:`on_recovery`), so ``comm`` serves the next
    collective and exchange.

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
    chan = _channel(comm)
    announced = 0 if chan is None else _ANNOUNCED.get(chan.handle, [0])[0]
    left = chan is not None and chan.handle in _LEFT
    everyone = comm.allgather((mine, announced, left))
    _clear_channel(comm, [e[1] for e in everyone], any(e[2] for e in everyone))
    # the ranks whose own code failed; those that only learned of it
    # (PeerFailed) raise its exception too
    ranks = [r for r, e in enumerate(everyone) if e[0] is not None and e[0][0] != "peer"]
    if not ranks:
        ranks = [r for r, e in enumerate(everyone) if e[0] is not None]
    where = ""
    if comm.Get_size() > 1:
        where = " [raised on %s]" % ("rank %d" % ranks[0] if len(ranks) == 1
                                     else "ranks %s" % ",".join(map(str, ranks)))
    payload = everyone[ranks[0]][0]
    err = _rebuild(payload, where)
    # the type must be the same everywhere: a copy that fails to rebuild on
    # one rank makes every rank fall back
    if payload[0] in ("pickle", "builtin") and \
            comm.allreduce(0 if err is None else 1, op=MPI.MIN) == 0:
        err = None
    if err is None:
        err = _fallback(payload, where)
    if exc is not None and not isinstance(exc, (Exception, PeerFailed)):
        raise exc           # KeyboardInterrupt, SystemExit, ...: unchanged where it happened
    if exc is not None and not isinstance(exc, PeerFailed):
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
