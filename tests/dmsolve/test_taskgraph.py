"""Task graphs (dmsolve.taskgraph): order, conditions and loops, subflows,
MPI requests as tasks, errors, and tasks that really run at once."""

import threading
import time

import numpy as np
import pytest

from dmsolve import threads
from dmsolve.taskgraph import Executor, TaskGraph


def record(log, name):
    lock = threading.Lock()

    def task():
        with lock:
            log.append(name)
    return task


@pytest.mark.parametrize("k", [1, 2, 4])
def test_dependencies_are_kept(k):
    # a -> (b, c) -> d, and e alone; each run in any order that keeps the edges
    log = []
    g = TaskGraph("diamond")
    a, b, c, d, e = (g.task(record(log, n), name=n) for n in "abcde")
    a.precede(b, c)
    d.succeed(b, c)
    for _ in range(3):
        log.clear()
        Executor(k).run(g)
        assert sorted(log) == list("abcde")
        assert log.index("a") < min(log.index("b"), log.index("c"))
        assert log.index("d") > max(log.index("b"), log.index("c"))


def test_a_chain_of_many_tasks_runs_in_order():
    log = []
    g = TaskGraph()
    tasks = [g.task(record(log, i)) for i in range(200)]
    for t, u in zip(tasks, tasks[1:]):
        t.precede(u)
    Executor(3).run(g)
    assert log == list(range(200))


def test_independent_tasks_run_at_once():
    barrier = threading.Barrier(2, timeout=20)
    g = TaskGraph()
    g.task(barrier.wait)
    g.task(barrier.wait)
    Executor(2).run(g)          # one thread would wait for 20 s and raise
    assert not barrier.broken


@pytest.mark.parametrize("k", [1, 2])
def test_a_condition_makes_a_loop(k):
    count = [0]
    log = []
    g = TaskGraph("loop")
    init = g.task(record(log, "init"))
    body = g.task(lambda: count.__setitem__(0, count[0] + 1), name="body")
    cond = g.condition(lambda: 0 if count[0] < 7 else 1, name="again?")
    done = g.task(record(log, "done"))
    init.precede(body)
    body.precede(cond)
    cond.precede(body, done)
    Executor(k).run(g)
    assert count[0] == 7 and log == ["init", "done"]


def test_a_condition_out_of_range_runs_no_successor():
    log = []
    g = TaskGraph()
    c = g.condition(lambda: 5)
    c.precede(g.task(record(log, "x")), g.task(record(log, "y")))
    Executor(2).run(g)
    assert log == []


def test_a_subflow_joins_before_its_successors():
    log = []

    def spawn(sf):
        parts = [sf.task(record(log, "part%d" % i)) for i in range(5)]
        merge = sf.task(record(log, "merge"))
        merge.succeed(*parts)

        def deeper(sf2):
            sf2.task(record(log, "deep"))
        sf.subflow(deeper).precede(merge)

    g = TaskGraph()
    s = g.subflow(spawn, name="spawn")
    s.precede(g.task(record(log, "after")))
    Executor(3).run(g)
    assert log[-1] == "after" and log[-2] == "merge"
    assert sorted(log[:-2]) == sorted(["part%d" % i for i in range(5)] + ["deep"])


def test_an_empty_subflow_and_an_empty_graph():
    log = []
    g = TaskGraph()
    g.subflow(lambda sf: None).precede(g.task(record(log, "after")))
    Executor(2).run(g)
    Executor(2).run(TaskGraph())
    assert log == ["after"]


def test_a_failing_task_stops_the_graph_and_is_raised():
    log = []
    g = TaskGraph()
    bad = g.task(lambda: {}["missing"], name="bad")
    bad.precede(g.task(record(log, "never")))
    for k in (1, 2):
        with pytest.raises(KeyError, match="missing"):
            Executor(k).run(g)
    assert log == []


def test_a_keyboard_interrupt_is_raised_unchanged():
    def stop():
        raise KeyboardInterrupt
    g = TaskGraph()
    g.task(stop)
    g.task(lambda: time.sleep(0.01))
    with pytest.raises(KeyboardInterrupt):
        Executor(2).run(g)


def test_bad_graphs_are_refused():
    g = TaskGraph("cycle")
    a, b = g.task(lambda: None), g.task(lambda: None)
    a.precede(b)
    b.precede(a)
    with pytest.raises(ValueError, match="no task without a predecessor"):
        Executor(2).run(g)
    with pytest.raises(ValueError, match="same graph"):
        a.precede(TaskGraph().task(lambda: None))
    with pytest.raises(TypeError, match="callable"):
        g.task(3)
    with pytest.raises(ValueError, match="positive integer"):
        Executor(0)


def test_to_dot_draws_condition_edges_dashed():
    g = TaskGraph("g")
    c = g.condition(lambda: 0, name="c")
    c.precede(g.task(lambda: None, name="x"))
    dot = g.to_dot()
    assert dot.startswith('digraph "g"') and "shape=diamond" in dot
    assert 't0 -> t1 [style=dashed label="0"]' in dot


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("k", [1, 2])
def test_requests_overlap_work_and_order_their_successors(comm, k):
    # a ring exchange as a request task, beside a compute task; the task
    # that reads the message runs after both
    rank, size = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % size, (rank - 1) % size
    send = np.full(1000, float(rank))
    recv = np.zeros(1000)
    seen = {}
    g = TaskGraph("ring")
    exchange = g.request(lambda: [comm.Irecv(recv, source=left, tag=7),
                                  comm.Isend(send, dest=right, tag=7)], name="ring")
    work = g.task(lambda: seen.__setitem__("work", np.sum(np.arange(10.0 ** 5))))
    use = g.task(lambda: seen.__setitem__("got", recv.copy()))
    use.succeed(exchange, work)
    Executor(k).run(g)
    assert np.all(seen["got"] == left)
    assert len(exchange.requests) == 2


def test_a_request_task_must_return_requests():
    g = TaskGraph()
    g.request(lambda: 42, name="not-a-request")
    with pytest.raises(TypeError, match="not an MPI.Request"):
        Executor(2).run(g)


def test_a_task_may_run_threaded_kernels():
    # the task's own blocks wait for each other: they need two threads while
    # the graph runs on two
    barrier = threading.Barrier(2, timeout=20)
    names = []
    g = TaskGraph()
    g.task(lambda: names.extend(threads.parallel_map(
        lambda i: (barrier.wait(), threading.current_thread().name)[1], 2, threads=2)))
    Executor(2).run(g)
    assert len(set(names)) == 2 and not barrier.broken
