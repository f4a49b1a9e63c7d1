"""Threads inside a rank: how many, and one fixed pool that runs blocks of work.

A rank runs its compiled kernels on ``k`` threads when asked: the process
default (:func:`set_num_threads`, or the ``DMSOLVE_NUM_THREADS`` environment
variable; 1 when neither is set, so that ``mpiexec -n <cores>`` never
oversubscribes a node) or a per-call ``threads=``. The threads are one fixed
pool per process, started on first use and kept: a call splits its work into
blocks and the calling thread works on them beside ``k - 1`` pool threads
(:func:`parallel_for`, :func:`parallel_map`). The kernels are numba's
``nogil=True`` ones, so the blocks run at once; MPI is called only by the
thread that called the library (``MPI_THREAD_FUNNELED`` is enough).

Results do not depend on the thread count where the work of a block does not
depend on the blocks (products, smoothers, gradients): each output entry is
computed by one thread, in the same order as on one thread. Reductions sum
in fixed lanes (:func:`lane_bounds`): the lanes are cut by the length alone,
each lane summed in order, and the lane sums added in lane order, so that
every run at any thread count gives the same bits.

Task graphs with dependencies, conditions, subflows and MPI requests run on
the same pool (:mod:`dmsolve.taskgraph`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading

import numpy as np

__all__ = ["set_num_threads", "get_num_threads", "resolve", "parallel_for", "parallel_map",
           "split", "row_blocks", "lane_bounds", "lane_blocks", "LANE", "MIN_BLOCK",
           "post", "using", "ENV"]

#: The environment variable read for the default thread count of a process.
ENV = "DMSOLVE_NUM_THREADS"
#: Elements per lane of a threaded reduction (128 KiB of float64): long
#: enough that a lane's sum runs at memory speed, short enough that a vector
#: of a few lanes still splits across threads.
LANE = 1 << 14
#: The fewest rows (or elements) worth a block of their own: handing a block
#: to another thread costs some tens of microseconds, the time of about this
#: many rows of a sparse product.
MIN_BLOCK = 1 << 14

_default: int | None = None
_lock = threading.Lock()


def _checked(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError("%s must be a positive integer, got %r" % (name, value))
    if value < 1:
        raise ValueError("%s must be a positive integer, got %d" % (name, value))
    return int(value)


def _from_environment() -> int:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        raise ValueError("%s must be a positive integer, got %r" % (ENV, text)) from None
    return _checked(value, ENV)


def get_num_threads() -> int:
    """The number of threads this process's kernels run on by default.

    :func:`set_num_threads`'s value, else ``DMSOLVE_NUM_THREADS`` (read on
    the first call), else 1. Not collective.

    Raises
    ------
    ValueError
        ``DMSOLVE_NUM_THREADS`` is set but not a positive integer.
    """
    global _default
    if _default is None:
        _default = _from_environment()
    return _default


def set_num_threads(threads: int) -> None:
    """Run this process's kernels on ``threads`` threads by default.

    Each rank sets its own count; ranks may differ, and results do not
    depend on it (see :mod:`dmsolve.threads`). A per-call ``threads=``
    overrides it. Not collective.

    Parameters
    ----------
    threads : int
        At least 1. More threads than cores run, only slower.

    Raises
    ------
    TypeError, ValueError
        ``threads`` is not a positive integer.

    Examples
    --------
    >>> import dmsolve
    >>> dmsolve.set_num_threads(2)
    >>> dmsolve.get_num_threads()
    2
    >>> dmsolve.set_num_threads(1)
    """
    global _default
    _default = _checked(threads, "threads")


def resolve(threads: int | None) -> int:
    """A call's thread count: ``threads``, or the default when None.
    Not collective.

    Raises
    ------
    TypeError, ValueError
        ``threads`` is neither None nor a positive integer.
    """
    return get_num_threads() if threads is None else _checked(threads, "threads")


@contextlib.contextmanager
def using(threads: int | None):
    """Within the ``with`` block, make ``threads`` (when not None) the
    process default: the door of an entry point that takes a per-call
    ``threads=`` (``solve``, a preconditioner's set-up, a persistence
    diagram) uses it so that every kernel the call reaches runs on that many
    threads. The previous default comes back on leaving. Not collective.

    Raises
    ------
    TypeError, ValueError
        ``threads`` is neither None nor a positive integer.
    """
    global _default
    if threads is None:
        yield get_num_threads()
        return
    value = _checked(threads, "threads")
    previous = _default
    _default = value
    try:
        yield value
    finally:
        _default = previous


# -- blocks ---------------------------------------------------------------------------------
def split(n: int, parts: int, align: int = 1) -> np.ndarray:
    """Boundaries (``parts + 1`` int64, from 0 to ``n``) of ``parts`` blocks
    of ``range(n)`` as equal as ``align`` allows: every boundary but the last
    is a multiple of ``align`` (the rows of a sliced-ELL chunk stay in one
    block). Blocks may be empty. Not collective."""
    parts = max(1, int(parts))
    units = -(-int(n) // align)
    cut = (np.arange(parts + 1, dtype=np.int64) * units) // parts * align
    return np.minimum(cut, n)


def row_blocks(n: int, threads: int | None = None, min_block: int = MIN_BLOCK,
               align: int = 1) -> np.ndarray:
    """Boundaries of the blocks ``n`` rows are split into for ``threads``
    threads (:func:`resolve`): one block per thread, but none shorter than
    ``min_block`` rows (one block when ``n < 2 * min_block``). Not collective."""
    k = resolve(threads)
    parts = max(1, min(k, int(n) // max(1, int(min_block))))
    return split(n, parts, align)


def lane_bounds(n: int, lane: int = LANE) -> np.ndarray:
    """Boundaries of the fixed lanes of a reduction over ``n`` elements:
    ``0, lane, 2 lane, ..., n``. They depend on ``n`` only, never on the
    thread count. Not collective."""
    return np.append(np.arange(0, int(n), lane, dtype=np.int64), np.int64(n)) if n else \
        np.zeros(2, np.int64)


def lane_blocks(n: int, threads: int | None = None, lane: int = LANE) -> np.ndarray:
    """Boundaries, in lanes (indices into :func:`lane_bounds`), of the
    blocks of whole lanes that ``threads`` threads take: block ``b`` sums
    lanes ``lb[b] .. lb[b + 1] - 1``. Not collective."""
    nlanes = lane_bounds(n, lane).size - 1
    return split(nlanes, min(resolve(threads), nlanes))


# -- the pool -------------------------------------------------------------------------------
class _Pool:
    """Worker threads that run what :func:`post` gives them, in order.

    Started on demand and never stopped (daemon threads: they hold no MPI
    state and die with the process)."""

    def __init__(self):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.workers: list[threading.Thread] = []

    def ensure(self, count: int) -> None:
        if len(self.workers) >= count:
            return
        with _lock:
            while len(self.workers) < count:
                t = threading.Thread(target=self._run, daemon=True,
                                     name="dmsolve-worker-%d" % len(self.workers))
                t.start()
                self.workers.append(t)

    def _run(self) -> None:
        while True:
            # no name holds the item once it has run: a finished job keeps
            # its blocks' function and results (the arrays a call made)
            self.queue.get()()


_pool = _Pool()


def post(item, workers: int) -> None:
    """Queue ``item`` (a callable of no argument) to the pool, whose size
    grows to ``workers`` threads if it has fewer. ``item`` must catch its own
    exceptions. Not collective."""
    _pool.ensure(workers)
    _pool.queue.put(item)


class _Job:
    """Blocks ``0 .. nblocks - 1`` of ``func``, claimed one at a time by
    whichever thread is free (the caller among them)."""

    def __init__(self, func, nblocks: int, results: list | None):
        self.func, self.nblocks, self.results = func, nblocks, results
        self.claims = itertools.count()      # next() is atomic under the GIL
        self.unfinished = nblocks
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.failures: list[tuple[int, BaseException]] = []

    def __call__(self) -> None:
        while True:
            i = next(self.claims)
            if i >= self.nblocks:
                return
            try:
                if not self.failures:       # after a failure, the rest are only counted
                    r = self.func(i)
                    if self.results is not None:
                        self.results[i] = r
            except BaseException as exc:    # re-raised by the caller, unchanged
                with self.lock:
                    self.failures.append((i, exc))
            with self.lock:
                self.unfinished -= 1
                if self.unfinished == 0:
                    self.done.set()

    def wait(self) -> None:
        self.done.wait()
        if self.failures:
            raise min(self.failures, key=lambda f: f[0])[1]


def _run_blocks(func, nblocks: int, threads: int | None, results: list | None) -> None:
    k = min(resolve(threads), nblocks)
    if k <= 1:
        for i in range(nblocks):
            r = func(i)
            if results is not None:
                results[i] = r
        return
    job = _Job(func, nblocks, results)
    for _ in range(k - 1):
        post(job, k - 1)
    job()               # the caller works too; a pool thread that comes late finds nothing
    job.wait()


def parallel_for(func, nblocks: int, threads: int | None = None) -> None:
    """Call ``func(i)`` for ``i`` in ``range(nblocks)`` on up to ``threads``
    threads (:func:`resolve`), the calling thread among them; return when
    all calls have returned.

    Blocks are claimed in order by whichever thread is free, so ``func``
    must write only what block ``i`` owns. If calls raise, the remaining
    blocks are skipped and the exception of the lowest block is raised
    (a ``KeyboardInterrupt`` too, unchanged) once no call is running.
    Not collective: ``func`` must not communicate.
    """
    _run_blocks(func, int(nblocks), threads, None)


def parallel_map(func, nblocks: int, threads: int | None = None) -> list:
    """``[func(i) for i in range(nblocks)]``, the calls made as by
    :func:`parallel_for`; the list is in block order whatever thread ran
    which block. Not collective."""
    results: list = [None] * int(nblocks)
    _run_blocks(func, int(nblocks), threads, results)
    return results
