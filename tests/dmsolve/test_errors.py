"""Errors on one rank only, in process (dmsolve's error agreement): the
exception's type reaches every rank (pickled), CollectiveError when it cannot;
a failing rank chains its own exception; ``agree`` and the polling primitive.

A rank failing before a library exchange announces it on the error
channel: the waiting ranks leave the exchange, the agreement raises the
failing rank's exception (never the internal PeerFailed), re-raises a
KeyboardInterrupt unchanged on its rank, and clears what the abandoned
exchange left in flight. (A rank failing before its user code communicates
aborts the job: those cases, and whole solves, run as child jobs in
test_faults.py.)"""

import pickle
import re
import time

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
from dmsolve import DistLinearOperator, _errors, gallery
from dmsolve.checkpoint import CheckpointError
from krylov_cases import METHODS
from mpitest import Checks, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD
LAST = COMM.size - 1
WHERE = "" if COMM.size == 1 else " [raised on rank %d]" % LAST


class GridError(Exception):
    """A user's own exception type, with state of its own."""

    def __init__(self, message, cell=None):
        super().__init__(message)
        self.cell = cell


class Unpicklable(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.hook = lambda: None            # lambdas do not pickle


class UnpicklableValue(ValueError):
    def __init__(self, message):
        super().__init__(message)
        self.hook = lambda: None


def _rebuild_on_all_but_rank0(message):
    if COMM.rank == 0:
        raise ImportError("this rank cannot rebuild it")
    return Fussy(message)


class Fussy(Exception):
    """Pickles, but unpickles on some ranks only."""

    def __reduce__(self):
        return _rebuild_on_all_but_rank0, (str(self),)


def small_poisson(n=12):
    A = gallery.poisson2d(n, COMM)
    return A, gallery.rhs(A, "random")


def _solve_failing(method, stage, exc_factory, communicate=True, at=2):
    """Run ``method`` with ``stage`` (callback, pc or matvec) raising
    ``exc_factory()`` on the last rank at its ``at``-th call, after an
    allreduce (``communicate``); return (the exception caught, this rank's own)."""
    A, b = small_poisson()
    calls = [0]
    own = []

    def maybe_fail():
        calls[0] += 1
        if communicate:
            COMM.allreduce(1)
        if COMM.rank == LAST and calls[0] == at:
            own.append(exc_factory())
            raise own[0]

    options = {"rtol": 1e-10}
    if stage == "callback":
        options["callback"] = lambda xk: maybe_fail()
    elif stage == "pc":
        d = A.diagonal().local

        def apply(r, out=None):
            maybe_fail()
            out = r.empty_like() if out is None else out
            np.divide(r.local, d, out=out.local)
            return out
        options["M"] = apply
    else:
        matrix = A

        def mv(x, out=None):
            y = matrix.matvec(x, out=out)
            maybe_fail()
            return y
        A = DistLinearOperator(A.row_layout, A.col_layout, mv)
    try:
        getattr(dmsolve, method)(A, b, **options)
    except Exception as e:  # noqa: BLE001 - checked by the caller on every rank
        return e, (own[0] if own else None)
    return None, (own[0] if own else None)


# -- the type of the exception reaches every rank ----------------------------------------

@pytest.mark.timeout(60)
@pytest.mark.parametrize("stage", ["callback", "pc", "matvec"])
@pytest.mark.parametrize("method", METHODS)
def test_custom_exception_keeps_its_type_on_every_rank(method, stage):
    """A user's exception raised on one rank reaches every rank with its type, message and state."""
    # the stage communicates, then raises on the last rank: every rank raises
    # a GridError with the failing rank's message and state; the failing
    # rank's is chained to its own exception
    got, own = _solve_failing(method, stage, lambda: GridError("cell 7 is inverted", cell=7))
    with Checks(COMM) as checks:
        checks.add(type(got) is GridError, "type", repr(got))
        checks.add(str(got) == "cell 7 is inverted" + WHERE, "message", str(got))
        checks.add(getattr(got, "cell", None) == 7, "state travels with it")
        if COMM.rank == LAST:
            checks.add(got.__cause__ is own and own is not None, "chained to its own")
        else:
            checks.add(got.__cause__ is None and own is None, "nothing to chain")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["cg", "gmres"])
def test_non_communicating_callback_failure_keeps_type(method):
    """A failing callback that communicates nothing still reaches every rank with its type."""
    got, own = _solve_failing(method, "callback", lambda: LookupError("no such cell"),
                              communicate=False)
    with Checks(COMM) as checks:
        checks.add(type(got) is LookupError and str(got) == "no such cell" + WHERE,
                   "a built-in type beyond the listed kinds keeps its type", repr(got))


@pytest.mark.timeout(60)
def test_unpicklable_exception_is_a_collective_error():
    """An exception that cannot be pickled (or unpickled on some ranks) becomes a
    CollectiveError on every rank."""
    got, _ = _solve_failing("cg", "callback", lambda: Unpicklable("cannot travel"))
    with Checks(COMM) as checks:
        checks.add(isinstance(got, dmsolve.CollectiveError), "CollectiveError", repr(got))
        checks.add(getattr(got, "type_name", "").endswith(".Unpicklable"), "type name",
                   getattr(got, "type_name", None))
        checks.add(getattr(got, "original_message", None) == "cannot travel", "message")
        checks.add(re.fullmatch(r"\S+\.Unpicklable: cannot travel" + re.escape(WHERE),
                                str(got)), "text", str(got))
    # of a ValueError subclass: a CollectiveError that `except ValueError` catches
    got, _ = _solve_failing("cg", "pc", lambda: UnpicklableValue("bad value"))
    with Checks(COMM) as checks:
        checks.add(isinstance(got, dmsolve.CollectiveError) and isinstance(got, ValueError),
                   "CollectiveError and ValueError", repr(got))
        checks.add(str(got).endswith("UnpicklableValue: bad value" + WHERE), "text", str(got))


def test_agree_transports_types():
    """agree() gives every rank the failing rank's exception type."""
    def failing(exc):
        return lambda: _errors.agree(COMM, exc if COMM.rank == LAST else None)
    # the kinds raised as before, message and all
    for cls in (ValueError, TypeError, RuntimeError, OSError, IndexError):
        assert_raises_collective(COMM, cls, failing(cls("plain")), match="^plain%s$"
                                 % re.escape(WHERE))
    e = assert_raises_collective(COMM, KeyError, failing(KeyError("k")))
    assert_collective(COMM, type(e) is KeyError and e.args == ("'k'" + WHERE,), repr(e))
    # other built-in types, and library types, keep their type
    for exc, cls in [(AttributeError("no attribute"), AttributeError),
                     (FileNotFoundError(2, "No such file", "a.mtx"), FileNotFoundError),
                     (CheckpointError("edited manifest"), CheckpointError),
                     (GridError("inverted", cell=3), GridError)]:
        got = assert_raises_collective(COMM, cls, failing(exc))
        assert_collective(COMM, type(got) is cls and str(got) == str(exc) + WHERE,
                          "%r became %r" % (exc, got))
    # unpickled on some ranks only: CollectiveError on all of them
    got = assert_raises_collective(COMM, dmsolve.CollectiveError, failing(Fussy("fussy")))
    assert_collective(COMM, got.type_name.endswith("Fussy")
                      and got.original_message == "fussy", str(got))
    # nobody failed: nothing raised
    _errors.agree(COMM, None)
    _errors.agree(COMM, None, grace=_errors.AGREE_GRACE)


def test_agree_with_grace_when_every_rank_arrives():
    """agree() with grace gives the same agreed exception when every rank arrives in time."""
    # a rank holding an error waits for the others, which arrive: the same
    # agreed exception as without grace, and soon
    t0 = time.monotonic()
    got = assert_raises_collective(
        COMM, GridError, lambda: _errors.agree(
            COMM, GridError("late", cell=1) if COMM.rank == LAST else None,
            grace=_errors.AGREE_GRACE))
    assert_collective(COMM, got.cell == 1 and time.monotonic() - t0 < _errors.AGREE_GRACE)
    pickle.dumps(got)           # the copy itself travels on


def test_poll_gives_up_after_its_time():
    """poll() completes a request that completes, and gives up on one that never does after its
    time, leaving it active."""
    grace = 0.3
    dup = COMM.Dup()
    try:
        req = dup.Ibarrier()
        done = _errors.poll(req, 10.0)
        # a receive nobody sends: poll gives up, the request stays active
        buf = np.zeros(1)
        req = dup.Irecv(buf, source=dup.rank, tag=77)
        t0 = time.monotonic()
        gave_up = not _errors.poll(req, grace)
        waited = time.monotonic() - t0
        req.Cancel()
        req.Wait()
    finally:
        dup.Free()
    assert_collective(COMM, done and gave_up and grace <= waited < grace + 2.0,
                      "done %s, gave up %s after %.2f s" % (done, gave_up, waited))
    assert_collective(COMM, 1.0 <= _errors.AGREE_GRACE <= 5.0, "a few seconds")


# -- the error channel ---------------------------------------------------------------------

def test_agree_raises_the_original_exception_not_peer_failed():
    """Ranks that only learned of a failure (PeerFailed) raise the failing rank's exception."""
    def agree():
        exc = GridError("bad cell", cell=5) if COMM.rank == LAST else \
            _errors.PeerFailed("another rank failed")
        _errors.agree(COMM, exc)
    got = assert_raises_collective(COMM, GridError, agree)
    assert_collective(COMM, str(got) == "bad cell" + WHERE and got.cell == 5, repr(got))


def test_agree_reraises_a_base_exception_unchanged():
    """A KeyboardInterrupt is re-raised unchanged on its rank; the others raise a
    CollectiveError naming it."""
    own = KeyboardInterrupt("stop now") if COMM.rank == LAST else None
    got = None
    try:
        _errors.agree(COMM, own)
    except BaseException as e:  # noqa: BLE001 - checked below on every rank
        got = e
    if COMM.rank == LAST:
        ok = got is own and str(got) == "stop now" and got.__cause__ is None
    else:
        ok = (type(got).__name__ == "CollectiveError"
              and isinstance(got, dmsolve.CollectiveError)
              and not isinstance(got, KeyboardInterrupt)
              and got.type_name == "KeyboardInterrupt"
              and str(got) == "KeyboardInterrupt: stop now" + WHERE)
    assert_collective(COMM, ok, repr(got))


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_halo_exchange_leaves_its_wait_when_a_rank_fails():
    """Rank 0 announces a failure instead of exchanging: its neighbours leave the halo
    exchange, every rank agrees on rank 0's exception, and the next exchanges deliver the new
    values, not the abandoned exchange's."""
    A, _ = small_poisson(13)
    halo = A.halo
    start = A.col_layout.start
    n = A.col_layout.local_size
    old = -1.0 - np.arange(start, start + n, dtype=np.float64)
    exc = None
    _errors.position(COMM)          # as a solve starting: no user call made yet
    if COMM.rank == 0:
        exc = ValueError("rank 0 failed before its exchange")
        _errors.announce(COMM, 0)   # stopped after 0 user calls
    else:
        try:
            halo.exchange(old)
        except _errors.PeerFailed as e:
            exc = e
    left = COMM.allgather(isinstance(exc, _errors.PeerFailed))
    assert_collective(COMM, left[1], "rank 1, a neighbour of rank 0, left the exchange")
    got = assert_raises_collective(COMM, ValueError, _errors.agree, COMM, exc)
    assert_collective(COMM, str(got) == "rank 0 failed before its exchange [raised on rank 0]",
                      str(got))
    assert_collective(COMM, COMM.allreduce(1) == COMM.size, "the communicator works")
    for step in range(2):
        new = np.arange(start, start + n, dtype=np.float64) * (step + 2)
        ghosts = halo.exchange(new)
        want = A.ghosts.astype(np.float64) * (step + 2)
        assert_collective(COMM, np.array_equal(ghosts, want),
                          "exchange %d after the fault: %s, want %s" % (step, ghosts, want))


@pytest.mark.mpi(min_size=2)
def test_a_watching_wait_yields_its_core_while_it_polls(comm, monkeypatch):
    """A library wait that polls the error channel gives its core away
    between tests (as MPICH's blocking waits do): with more ranks than
    cores, a rank that spins without yielding keeps the rank it waits for
    off the core (a matvec at 3 ranks on 2 cores took 30 times longer)."""
    _errors.open_channel(comm)
    yields = [0]
    real = _errors.os.sched_yield

    def counting():
        yields[0] += 1
        real()

    monkeypatch.setattr(_errors.os, "sched_yield", counting)
    buf = np.zeros(1)
    if comm.rank == 1:            # polls until rank 0 sends, 50 ms later
        req = comm.Irecv(buf, source=0, tag=7)
        _errors.wait_watching(comm, [req], lambda announced: False)
    elif comm.rank == 0:
        time.sleep(0.05)
        comm.Send(np.ones(1), dest=1, tag=7)
    assert_collective(comm, comm.rank != 1 or (yields[0] > 0 and buf[0] == 1.0),
                      "rank 1 polled %d times' worth without yielding" % yields[0])
