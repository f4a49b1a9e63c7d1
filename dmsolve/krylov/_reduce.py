"""Global sums of a Krylov solve, and the error rendezvous they carry: a rank
whose user code failed tells every rank at the next reduction."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .. import _errors
from .._errors import agree, announce, complete, open_channel, position
from .._reprosum import (accumulators, dot2_into, dot_into, dots_into, normalize, to_float,
                         update_dot_into)
from ._threaded import cg_update, dot2, vdot
from ._linalg import gemv_dot

__all__ = ["Reducer", "ExactReducer"]


class Reducer:
    """Fused, non-blocking global sums with the error rendezvous.

    A method writes this rank's parts of ``k`` inner products into slots of
    a send buffer (:meth:`put`, :meth:`put_rows`) and sums them over all
    ranks in one ``Iallreduce`` (:meth:`reduce`, or :meth:`ireduce` and
    :meth:`wait` to overlap it with work).

    Errors raised by user code on some ranks only (the operator's
    ``matvec``, the preconditioner, the callback, the monitor) are caught
    by :meth:`guard` (or :meth:`hold`) and remembered; every reduction
    carries one extra slot, the number of ranks holding such an error, so
    the next reduction tells every rank, and all of them raise the same
    exception through :func:`dmsolve._errors.agree`. A final reduction at
    the end of the solve catches an error raised after the last one.

    A rank may fail before its user code communicated, and its neighbours
    then wait in that communication for good. So every reduction is a
    non-blocking ``Iallreduce``: the healthy ranks ``Wait``, a rank holding
    an error polls for :data:`dmsolve._errors.AGREE_GRACE` seconds and, if
    the others do not arrive, raises its exception alone (under ``python -m
    mpi4py`` the job aborts). For the same reason a rank holding an error
    must never block in communication before its next reduction: before a
    user call that follows another user call with no reduction in between,
    every rank posts a non-blocking barrier (``Ibarrier``); healthy ranks
    complete it at the next reduction, a failing rank polls it and goes on
    only when every rank has come that far.

    A rank holding an error also announces it on ``comm``'s error channel
    (:func:`dmsolve._errors.announce`) each time it stops to poll (a
    reduction or a barrier), with the number of user calls it has made and
    the halo messages it has sent. A neighbour waiting in a library exchange
    for a message this rank has not sent (the halo exchange of a matrix
    inside the operator that failed before it) then leaves that wait with
    :class:`~dmsolve._errors.PeerFailed`, which it holds like a user-code
    error (and announces in turn): every rank comes to the reduction, and
    the agreement raises the failing rank's exception everywhere. A wait
    for a message that was sent, or that a rank may still send (it has not
    stopped yet), goes on. The reductions themselves are collectives,
    which cannot be left: a failing rank always comes to the next one.

    A ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
    ``SystemExit``) raised by user code is held and agreed the same way, and
    then re-raised unchanged on its rank; the others raise
    :class:`~dmsolve.CollectiveError`.

    Parameters
    ----------
    comm : MPI.Comm
    dtype : numpy dtype
        The working field: float64 or complex128.
    slots : int
        Inner products the default buffers hold (:meth:`reserve` grows them).

    Notes
    -----
    Collective to construct the first time on a communicator (the
    :func:`~dmsolve._errors.open_channel` ``Dup``); not collective after.
    ``reductions`` counts the reductions made.
    """

    #: whether the sums are exact (:class:`ExactReducer`)
    exact = False

    def __init__(self, comm: MPI.Comm, dtype, slots: int):
        self.comm = comm
        open_channel(comm)
        # user calls entered, for the library's waits on comm (wait_watching)
        self._position = position(comm)
        self.dtype = np.dtype(dtype)
        self.complex = self.dtype.kind == "c"
        #: local inner product ``a^H b`` (``np.vdot`` conjugates its first argument)
        self.dot = np.vdot if self.complex else np.dot
        self._mpitype = MPI.C_DOUBLE_COMPLEX if self.complex else MPI.DOUBLE
        self.reductions = 0
        self.error: BaseException | None = None
        # user calls made, and how many of them every rank is known to have
        # finished (a reduction started after them has completed, or a barrier
        # was posted after them): a user call after an unsynchronised one is
        # preceded by a barrier. The rule uses only these counts, which are
        # the same on every rank, so every rank posts the same barriers.
        self._calls = 0
        self._synced = 0
        self._nbarriers = 0                 # barriers posted so far
        self._barriers: list = []           # (serial, request) not yet completed
        self._inflight: dict = {}           # id(request) -> (calls, barriers) at its start
        self._send = self.buffer(slots + 1)
        self._recv = self.buffer(slots + 1)

    # -- buffers ---------------------------------------------------------------------
    def buffer(self, size: int) -> np.ndarray:
        """A zero reduction buffer of the working field (for :meth:`ireduce`).
        Not collective."""
        return np.zeros(size, dtype=self.dtype)

    def reserve(self, slots: int) -> None:
        """Make the default buffers hold ``slots`` numbers. Not collective."""
        if self._send.size < slots + 1:
            self._send = self.buffer(slots + 1)
            self._recv = self.buffer(slots + 1)

    @property
    def send(self) -> np.ndarray:
        """The buffer whose first ``k`` entries :meth:`reduce` sums (no communication)."""
        return self._send

    # -- local parts into slots --------------------------------------------------------
    def put(self, i: int, a: np.ndarray, b: np.ndarray, send: np.ndarray | None = None) -> None:
        """This rank's part of ``a^H b`` into slot ``i`` of ``send`` (default
        :attr:`send`), for the next :meth:`reduce` (:meth:`ireduce`); on two
        or more threads summed in fixed lanes (:mod:`._threaded`). Not
        collective."""
        send = self._send if send is None else send
        send[i] = vdot(a, b, self.dot)

    def put_rows(self, i: int, V: np.ndarray, w: np.ndarray,
                 send: np.ndarray | None = None) -> None:
        """The parts of ``V[j]^H w`` into slots ``i + j`` (see :meth:`put`).
        Not collective."""
        send = self._send if send is None else send
        gemv_dot(V, w, send[i:i + V.shape[0]])

    def put2(self, i: int, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray,
             rr=None) -> None:
        """The parts of ``a^H b`` and ``c^H d`` into slots ``i`` and ``i + 1``
        of :attr:`send` in one pass over the vectors. ``rr`` is ``c^H c`` when
        the caller has it already (from :meth:`cg_update`) and ``c`` is ``d``.
        Not collective."""
        send = self._send
        if rr is not None:
            send[i + 1] = rr
            send[i] = rr if a is c and b is c else vdot(a, b, self.dot)
        else:
            dot2(a, b, c, d, send[i:i + 2])

    def cg_update(self, alpha, p: np.ndarray, q: np.ndarray, x: np.ndarray, r: np.ndarray):
        """``x += alpha p; r -= alpha q`` in one pass; returns this rank's
        ``r^H r`` in the form :meth:`put2` takes. Not collective."""
        return cg_update(alpha, p, q, x, r)

    def _start(self, k: int, send: np.ndarray, recv: np.ndarray):
        # send[:k] and the error flag in slot k
        send[k] = 0.0 if self.error is None else 1.0
        return self.comm.Iallreduce([send, k + 1, self._mpitype],
                                    [recv, k + 1, self._mpitype], op=MPI.SUM)

    def _finish(self, k: int, recv: np.ndarray) -> None:
        pass                            # the sums are in recv already

    # -- reductions --------------------------------------------------------------------
    def reduce(self, k: int) -> np.ndarray:
        """Sum ``send[:k]`` over all ranks, plus the error flag; return the
        receive buffer (read ``[:k]``). Collective; raises on every rank if
        any rank holds a user-code error.

        A non-blocking ``Iallreduce``: waited for on a healthy rank, polled
        for :data:`dmsolve._errors.AGREE_GRACE` seconds on a rank holding an
        error, which raises its error alone if the others do not arrive.
        """
        calls, mark = self._calls, self._nbarriers
        req = self._start(k, self._send, self._recv)
        self.reductions += 1
        self._complete(req, calls, mark)
        self._finish(k, self._recv)
        if self._recv[k]:
            self._raise()
        return self._recv

    def ireduce(self, k: int, send: np.ndarray, recv: np.ndarray):
        """Start a non-blocking sum of ``send[:k]`` (plus the error flag) into
        ``recv``; finish it with :meth:`wait`. Collective."""
        self.reductions += 1
        req = self._start(k, send, recv)
        self._inflight[id(req)] = (self._calls, self._nbarriers)
        return req

    def wait(self, request, k: int, recv: np.ndarray) -> np.ndarray:
        """Complete :meth:`ireduce`; raise everywhere on a user-code error.

        Collective (completes the collective :meth:`ireduce` started)."""
        calls, mark = self._inflight.pop(id(request))
        self._complete(request, calls, mark)
        self._finish(k, recv)
        if recv[k]:
            self._raise()
        return recv

    def check_errors(self) -> None:
        """Raise on every rank if any rank holds a user-code error.

        Collective: one reduction of the error flag. For a step that must
        not run on a state that failed user code left behind (a checkpoint
        write) or that communicates in a blocking way.
        """
        self.reduce(0)

    def _complete(self, req, calls: int, mark: int) -> None:
        # the request of a reduction started after `calls` user calls and
        # `mark` barriers
        if self.error is None:
            req.Wait()
        else:
            announce(self.comm, self._calls)
            complete(req, self.error, _errors.AGREE_GRACE)
        # every rank started this reduction: every rank finished the user
        # calls and posted the barriers that came before it
        if calls > self._synced:
            self._synced = calls
        if self._barriers:
            self._drain(mark)

    def _drain(self, mark: int | None = None) -> None:
        """Complete the barriers posted before the ``mark``-th (all: None)."""
        done = [req for serial, req in self._barriers if mark is None or serial < mark]
        if done:
            MPI.Request.Waitall(done)
            del self._barriers[:len(done)]

    def _raise(self):
        self.reductions += 1
        try:
            agree(self.comm, self.error)
        finally:
            # every rank reached this agreement, after posting every barrier
            self._drain()
        # agree() raised unless the flag lied; never continue silently
        raise RuntimeError("a rank reported an error it did not hold")  # pragma: no cover

    # -- user code -----------------------------------------------------------------------
    def enter(self) -> None:
        """Book a user call about to be made: a non-blocking barrier first when
        it follows an unsynchronised one (see the class notes). Collective
        when it posts a barrier."""
        if self._calls > self._synced:
            req = self.comm.Ibarrier()
            self._synced = self._calls
            if self.error is None:
                self._barriers.append((self._nbarriers, req))
            else:
                # the others finished the user call this rank failed in, or
                # they wait in it: a library wait learns from the
                # announcement; a wait of the user's own does not, and then
                # this rank raises alone
                announce(self.comm, self._calls)
                complete(req, self.error, _errors.AGREE_GRACE)
            self._nbarriers += 1
        self._calls += 1
        self._position[0] = self._calls

    def hold(self, exc: BaseException) -> None:
        """Remember the first user-code error for the next reduction. Not collective."""
        if self.error is None:
            self.error = exc

    def guard(self, func, *args):
        """Call user code; remember its exception for the next reduction.

        Collective exactly when ``func`` is, or when it follows other user
        code with no reduction in between (then a non-blocking barrier comes
        first; see the class notes)."""
        self.enter()
        try:
            return func(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised on every rank by agree()
            self.hold(e)
            return None


class ExactReducer(Reducer):
    """:class:`Reducer` for reproducible mode: every sum exact.

    A slot's part is an exact accumulator (:mod:`dmsolve._reprosum`) kept
    beside the buffer; the accumulators travel as int64 in one
    ``Iallreduce`` and each sum is rounded once, so it does not depend on
    the number of ranks or the partition. Not collective to construct.
    """

    exact = True

    def __init__(self, comm: MPI.Comm, dtype, slots: int):
        super().__init__(comm, dtype, slots)
        self._accs: dict = {}               # id(float buffer) -> its accumulators
        self._rr = accumulators(1)[0]       # r^T r of the fused CG update

    def put(self, i, a, b, send=None) -> None:
        acc = self._acc(self._send if send is None else send)[i]
        acc.fill(0)
        dot_into(a, b, acc)

    def put_rows(self, i, V, w, send=None) -> None:
        acc = self._acc(self._send if send is None else send)[i:i + V.shape[0]]
        acc.fill(0)
        dots_into(V, w, acc)

    def put2(self, i, a, b, c, d, rr=None) -> None:
        acc = self._acc(self._send)
        if rr is not None:
            # rr is r^T r's accumulator; c and d are r
            acc[i + 1] = rr
            if a is c and b is c:
                acc[i] = rr
            else:
                acc[i].fill(0)
                dot_into(a, b, acc[i])
        elif a is c and b is d:
            acc[i].fill(0)
            dot_into(a, b, acc[i])
            acc[i + 1] = acc[i]
        else:
            acc[i:i + 2].fill(0)
            dot2_into(a, b, c, d, acc[i], acc[i + 1])

    def cg_update(self, alpha, p, q, x, r):
        """As :meth:`Reducer.cg_update`; returns ``r^T r``'s exact
        accumulator (deposited during the update). Not collective."""
        acc = self._rr
        acc.fill(0)
        update_dot_into(alpha, p, q, x, r, acc)
        return acc

    def _acc(self, send: np.ndarray) -> np.ndarray:
        acc = self._accs.get(id(send))
        if acc is None or acc.shape[0] < send.size:
            acc = self._accs[id(send)] = accumulators(send.size)
        return acc

    def _start(self, k, send, recv):
        # the accumulators of send[:k] and the error flag, summed as int64
        acc, racc = self._acc(send), self._acc(recv)
        normalize(acc[:k])
        acc[k].fill(0)
        acc[k, 0] = 0 if self.error is None else 1
        n = (k + 1) * acc.shape[1]
        return self.comm.Iallreduce([acc, n, MPI.INT64_T], [racc, n, MPI.INT64_T],
                                    op=MPI.SUM)

    def _finish(self, k, recv) -> None:
        racc = self._acc(recv)
        for j in range(k):
            recv[j] = to_float(racc[j])
        recv[k] = float(racc[k, 0])
