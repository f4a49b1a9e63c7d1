"""Task graphs on a rank's threads, in Taskflow's model.

A :class:`TaskGraph` holds tasks and the order between them
(``a.precede(b)``: ``b`` starts once ``a`` has finished). Four kinds, as in
Taskflow (Huang et al., IEEE TPDS 2022):

- a *static* task calls a function of no argument;
- a *condition* task calls a function that returns the index of the
  successor to run next (its edges are weak: that successor runs at once,
  whatever its other predecessors; a condition that points back makes a
  loop);
- a *subflow* task calls a function with a :class:`Subflow`, a graph it may
  fill at run time; the subflow's tasks run on the same threads, and the
  subflow task counts as finished, for its successors, once they all have;
- a *request* task starts non-blocking MPI communication (its function
  returns an ``MPI.Request`` or a list of them) and finishes when the
  requests complete. Only the thread that called :meth:`Executor.run`
  starts and tests them, between the tasks it runs itself, so MPI is called
  from one thread; compute tasks run meanwhile on the others, so that
  communication overlaps work.

:class:`Executor` runs a graph on the rank's thread pool
(:mod:`dmsolve.threads`): the calling thread and up to ``threads - 1`` pool
threads take ready tasks from one shared queue, first come first served. A
pool thread that finds no ready task goes back to the pool, so that a task
may itself call the threaded kernels (whose blocks other threads then take).
(Taskflow's executor steals work between per-thread queues; with Python's
lock around every queue a single queue costs less.) The compiled kernels
release the GIL, so tasks that call them run at once; pure Python tasks take
turns.

If a task raises, no further task starts; once the running ones have
finished, :meth:`Executor.run` raises that exception (the first one, if
several did), unchanged. Requests of request tasks still in flight are left
as they are (``task.requests``): a graph that communicates is part of a
collective algorithm, whose failure the caller agrees on across ranks as
for any other error (:func:`dmsolve.agree`).
"""

from __future__ import annotations

import collections
import threading

from mpi4py import MPI

from .threads import post, resolve

__all__ = ["TaskGraph", "Subflow", "Task", "Executor"]

_STATIC, _CONDITION, _SUBFLOW, _REQUEST = "static", "condition", "subflow", "request"

# Seconds the calling thread sleeps between two tests of pending requests
# when no task is ready: short against a halo exchange, long enough to leave
# the core to the threads that compute.
_POLL = 5e-5


class Task:
    """One node of a :class:`TaskGraph` (made by its ``task``, ``condition``,
    ``subflow`` or ``request`` methods). ``name`` and ``kind`` say what it
    is; ``requests`` holds a request task's requests once started.
    Not collective."""

    def __init__(self, graph: "TaskGraph", kind: str, func, name: str):
        self.graph, self.kind, self.func, self.name = graph, kind, func, name
        self.successors: list[Task] = []
        self.strong = 0         # predecessors that are not conditions
        self.weak = 0           # condition predecessors
        self.requests: list = []

    def precede(self, *tasks: "Task") -> "Task":
        """Make each of ``tasks`` run after this one (for a condition task:
        the successors in the order of its return values). Returns this
        task. Not collective.

        Raises
        ------
        ValueError
            A task of another graph.
        """
        for t in tasks:
            if not isinstance(t, Task) or t.graph is not self.graph:
                raise ValueError("%r is not a task of the same graph" % (t,))
            self.successors.append(t)
            if self.kind == _CONDITION:
                t.weak += 1
            else:
                t.strong += 1
        return self

    def succeed(self, *tasks: "Task") -> "Task":
        """Make this task run after each of ``tasks``. Returns this task.
        Not collective."""
        for t in tasks:
            if not isinstance(t, Task):
                raise ValueError("%r is not a task" % (t,))
            t.precede(self)
        return self

    def __repr__(self) -> str:
        return "Task(%r, %s)" % (self.name, self.kind)


class TaskGraph:
    """Tasks and their order, to run with :meth:`Executor.run` (any number
    of times). Not collective.

    Examples
    --------
    >>> from dmsolve.taskgraph import Executor, TaskGraph
    >>> out = []
    >>> g = TaskGraph("demo")
    >>> a = g.task(lambda: out.append("a"), name="a")
    >>> b = g.task(lambda: out.append("b"), name="b")
    >>> c = g.task(lambda: out.append("c"), name="c")
    >>> _ = a.precede(b, c)
    >>> Executor(threads=2).run(g)
    >>> out[0], sorted(out[1:])
    ('a', ['b', 'c'])
    """

    def __init__(self, name: str = "graph"):
        self.name = name
        self.tasks: list[Task] = []

    def _add(self, kind: str, func, name: str | None) -> Task:
        if not callable(func):
            raise TypeError("a %s task needs a callable, got %r" % (kind, func))
        t = Task(self, kind, func, name or "%s-%d" % (kind, len(self.tasks)))
        self.tasks.append(t)
        return t

    def task(self, func, name: str | None = None) -> Task:
        """A static task: ``func()``. Not collective."""
        return self._add(_STATIC, func, name)

    def condition(self, func, name: str | None = None) -> Task:
        """A condition task: ``func()`` returns the index (into the order of
        :meth:`Task.precede`) of the one successor to run next, or a value
        outside that range to run none. Not collective."""
        return self._add(_CONDITION, func, name)

    def subflow(self, func, name: str | None = None) -> Task:
        """A subflow task: ``func(sf)`` may add tasks to the
        :class:`Subflow` ``sf``; they run, and this task finishes once they
        all have. Not collective."""
        return self._add(_SUBFLOW, func, name)

    def request(self, start, name: str | None = None) -> Task:
        """A request task: ``start()`` (on the thread that runs the graph)
        begins non-blocking MPI communication and returns its
        ``MPI.Request`` or a list of them; the task finishes when they have
        all completed. Not collective (the communication it starts may be).
        """
        return self._add(_REQUEST, start, name)

    def __len__(self) -> int:
        return len(self.tasks)

    def to_dot(self) -> str:
        """The graph in Graphviz's DOT language (condition edges dashed, as
        Taskflow's ``dump``). Not collective."""
        ids = {id(t): "t%d" % i for i, t in enumerate(self.tasks)}
        lines = ["digraph %s {" % _dot_id(self.name)]
        for t in self.tasks:
            shape = {"condition": "diamond", "subflow": "box3d", "request": "cds"}.get(
                t.kind, "ellipse")
            lines.append('  %s [label="%s" shape=%s];' % (ids[id(t)], t.name, shape))
        for t in self.tasks:
            for i, s in enumerate(t.successors):
                style = ' [style=dashed label="%d"]' % i if t.kind == _CONDITION else ""
                lines.append("  %s -> %s%s;" % (ids[id(t)], ids[id(s)], style))
        lines.append("}")
        return "\n".join(lines)


def _dot_id(name: str) -> str:
    return '"%s"' % name.replace('"', "'")


class Subflow(TaskGraph):
    """The graph a subflow task fills while it runs (its tasks run before
    the subflow task counts as finished). Not collective."""


class Executor:
    """Runs task graphs on ``threads`` threads of this rank (the process
    default when None: :func:`dmsolve.get_num_threads`): the calling thread
    and ``threads - 1`` threads of the rank's pool. Not collective.

    Raises
    ------
    TypeError, ValueError
        ``threads`` is neither None nor a positive integer.
    """

    def __init__(self, threads: int | None = None):
        self.threads = threads if threads is None else resolve(threads)

    def run(self, graph: TaskGraph) -> None:
        """Run ``graph`` to its end and return; raise the first exception a
        task raised, once no task is running. Call it from the thread that
        calls MPI: it starts and tests the request tasks. Not collective
        (request tasks may take part in collective communication).

        Raises
        ------
        ValueError
            ``graph`` has tasks but none without a predecessor.
        """
        if not graph.tasks:
            return
        state = _Run(resolve(self.threads))
        state.start(graph, None)
        state.drive()


def _check_sources(graph: TaskGraph) -> list[Task]:
    sources = [t for t in graph.tasks if t.strong == 0 and t.weak == 0]
    if not sources:
        raise ValueError("task graph %r has no task without a predecessor" % graph.name)
    return sources


class _Run:
    """The state of one run of a graph: ready queues, join counters, and
    how many scheduled tasks each parent (a subflow task, or None for the
    whole run) still waits for."""

    def __init__(self, threads: int):
        self.threads = threads
        self.cv = threading.Condition()
        self.ready: collections.deque = collections.deque()        # (task, parent)
        self.to_start: collections.deque = collections.deque()     # request tasks
        self.in_flight: list = []                                   # (task, parent)
        self.join: dict = {}
        self.pending: dict = {}
        self.parent_of: dict = {}
        self.running = 0
        self.pumps = 0          # pool threads at work on this run (at most threads - 1)
        self.error: BaseException | None = None
        self.done = False

    # -- scheduling (callers hold self.cv) -----------------------------------
    def start(self, graph: TaskGraph, parent) -> None:
        sources = _check_sources(graph)
        for t in graph.tasks:
            self.join[t] = t.strong
        with self.cv:
            for t in sources:
                self._schedule(t, parent)

    def _schedule(self, task: Task, parent) -> None:
        if self.error is not None:
            return
        self.pending[parent] = self.pending.get(parent, 0) + 1
        self.parent_of[task] = parent
        if task.kind == _REQUEST:
            self.to_start.append((task, parent))
        else:
            self.ready.append((task, parent))
            if self.pumps < min(self.threads - 1, len(self.ready)):
                self.pumps += 1
                # one pool thread more than the pumps: the blocks of a kernel
                # that a task runs on threads find a thread free
                post(self._pump, self.threads)
        self.cv.notify()

    def _finish(self, task: Task, parent, chosen=None) -> None:
        # the successors first, so that the parent's count cannot reach zero
        # between a task's end and its successors' start
        if task.kind == _CONDITION:
            if chosen is not None and 0 <= chosen < len(task.successors):
                s = task.successors[chosen]
                self.join[s] = s.strong
                self._schedule(s, parent)
        else:
            for s in task.successors:
                self.join[s] -= 1
                if self.join[s] == 0:
                    self.join[s] = s.strong
                    self._schedule(s, parent)
        self.pending[parent] -= 1
        if self.pending[parent] == 0:
            del self.pending[parent]
            if parent is None:
                self._end()
            else:
                self._finish(parent, self.parent_of[parent])

    def _end(self) -> None:
        self.done = True
        self.cv.notify_all()

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        if self.running == 0:
            self._end()

    # -- running -------------------------------------------------------------
    def _execute(self, task: Task, parent) -> None:
        chosen, subflow, failure = None, None, None
        try:
            if task.kind == _CONDITION:
                chosen = task.func()
                chosen = None if chosen is None else int(chosen)
            elif task.kind == _SUBFLOW:
                subflow = Subflow("%s.subflow" % task.name)
                task.func(subflow)
            else:
                task.func()
        except BaseException as exc:        # re-raised by run(), unchanged
            failure = exc
        with self.cv:
            self.running -= 1
            if failure is not None:
                self._fail(failure)
            elif self.error is not None:
                self._fail(self.error)
            elif subflow is not None and subflow.tasks:
                try:
                    sources = _check_sources(subflow)
                except ValueError as exc:
                    self._fail(exc)
                    return
                for t in subflow.tasks:
                    self.join[t] = t.strong
                for t in sources:
                    self._schedule(t, task)
            else:
                self._finish(task, parent, chosen)

    def _take(self):
        # a ready compute task, counted as running; None if there is none
        if self.ready and self.error is None:
            self.running += 1
            return self.ready.popleft()
        return None

    def _pump(self) -> None:
        # a pool thread's turn at this run: ready tasks until there are none,
        # then back to the pool, where a kernel's blocks (a task that calls
        # a threaded kernel) or another run can use the thread
        while True:
            with self.cv:
                item = self._take()
                if item is None:
                    self.pumps -= 1
                    return
            self._execute(*item)

    def drive(self) -> None:
        """The calling thread's loop: start and test requests, run tasks."""
        try:
            while True:
                with self.cv:
                    if self.done:
                        break
                    starting = list(self.to_start)
                    self.to_start.clear()
                for task, parent in starting:
                    self._start_request(task, parent)
                self._test_requests()
                with self.cv:
                    if self.done:
                        break
                    item = self._take()
                    if item is None:
                        if self.in_flight or self.to_start:
                            self.cv.wait(_POLL)
                        elif not self.done:
                            self.cv.wait()
                if item is not None:
                    self._execute(*item)
        finally:
            with self.cv:
                if not self.done:       # an exception in this loop: stop the workers
                    self.error = self.error or RuntimeError("task graph run stopped")
                    self._end()
        if self.error is not None:
            raise self.error

    def _start_request(self, task: Task, parent) -> None:
        try:
            started = task.func()
            task.requests = list(started) if isinstance(started, (list, tuple)) else [started]
            for r in task.requests:
                if not isinstance(r, MPI.Request):
                    raise TypeError("request task %r returned %r, not an MPI.Request"
                                    % (task.name, r))
        except BaseException as exc:
            with self.cv:
                self._fail(exc)
            return
        self.in_flight.append((task, parent))

    def _test_requests(self) -> None:
        if not self.in_flight:
            return
        still = []
        for task, parent in self.in_flight:
            try:
                complete = MPI.Request.Testall(task.requests)
            except BaseException as exc:
                with self.cv:
                    self._fail(exc)
                continue
            if complete:
                with self.cv:
                    if self.error is None:
                        self._finish(task, parent)
            else:
                still.append((task, parent))
        self.in_flight = still
