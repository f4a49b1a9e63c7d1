"""The thread count of a rank and its pool (dmsolve.threads): settings,
blocks, fixed lanes, and parallel_for / parallel_map under real
concurrency."""

import gc
import threading
import time
import weakref

import numpy as np
import pytest

import dmsolve
from dmsolve import threads


@pytest.fixture(autouse=True)
def _restore_default():
    saved = threads._default
    yield
    threads._default = saved


def test_default_is_one_thread(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    threads._default = None
    assert dmsolve.get_num_threads() == 1


def test_environment_sets_the_default(monkeypatch):
    monkeypatch.setenv(threads.ENV, " 3 ")
    threads._default = None
    assert dmsolve.get_num_threads() == 3
    assert threads.resolve(None) == 3
    assert threads.resolve(2) == 2


@pytest.mark.parametrize("text", ["zero", "0", "-2", "1.5"])
def test_a_bad_environment_value_is_named(monkeypatch, text):
    monkeypatch.setenv(threads.ENV, text)
    threads._default = None
    with pytest.raises(ValueError, match=threads.ENV):
        dmsolve.get_num_threads()


@pytest.mark.parametrize("bad, kind", [(0, ValueError), (-1, ValueError), (2.0, TypeError),
                                       (True, TypeError), ("2", TypeError), (None, TypeError)])
def test_set_num_threads_refuses_what_is_not_a_positive_int(bad, kind):
    with pytest.raises(kind, match="positive integer"):
        dmsolve.set_num_threads(bad)


def test_set_num_threads_and_using():
    dmsolve.set_num_threads(np.int64(3))
    assert dmsolve.get_num_threads() == 3
    with threads.using(2) as k:
        assert k == 2 and dmsolve.get_num_threads() == 2
        with threads.using(None) as inner:
            assert inner == 2
    assert dmsolve.get_num_threads() == 3
    with pytest.raises(ValueError):
        with threads.using(0):
            pass
    assert dmsolve.get_num_threads() == 3


@pytest.mark.parametrize("n, parts, align", [(0, 3, 1), (7, 3, 1), (100, 4, 64), (1000, 3, 64),
                                             (5, 8, 1), (130, 2, 64)])
def test_split_covers_the_range_in_aligned_blocks(n, parts, align):
    b = threads.split(n, parts, align)
    assert b.size == parts + 1 and b[0] == 0 and b[-1] == n
    assert np.all(np.diff(b) >= 0)
    assert np.all(b[:-1] % align == 0)
    sizes = np.diff(b)
    assert sizes.max() - sizes.min() <= align


def test_row_blocks_keep_small_work_in_one_block():
    assert threads.row_blocks(1000, 4, min_block=1 << 14).size == 2
    b = threads.row_blocks(100_000, 4, min_block=1 << 14)
    assert b.size == 5 and b[-1] == 100_000
    assert threads.row_blocks(3 * (1 << 14), 8, min_block=1 << 14).size == 4


def test_lanes_depend_on_the_length_only():
    lb = threads.lane_bounds(100_000)
    assert lb[0] == 0 and lb[-1] == 100_000
    assert np.all(np.diff(lb)[:-1] == threads.LANE)
    assert threads.lane_bounds(0).tolist() == [0, 0]
    for k in (1, 2, 3, 4):
        blocks = threads.lane_blocks(100_000, k)
        assert blocks[0] == 0 and blocks[-1] == lb.size - 1
        assert blocks.size == min(k, lb.size - 1) + 1


@pytest.mark.parametrize("k", [1, 2, 4])
def test_parallel_for_runs_every_block_once(k):
    seen = np.zeros(101, np.int64)
    lock = threading.Lock()

    def block(i):
        with lock:
            seen[i] += 1

    threads.parallel_for(block, 101, threads=k)
    assert np.all(seen == 1)


def test_parallel_map_keeps_block_order():
    assert threads.parallel_map(lambda i: i * i, 13, threads=3) == [i * i for i in range(13)]
    assert threads.parallel_map(lambda i: i, 0, threads=3) == []


def test_blocks_run_at_once_on_two_threads():
    # each of the two blocks waits for the other: only two threads pass
    barrier = threading.Barrier(2, timeout=20)
    names = threads.parallel_map(lambda i: (barrier.wait(), threading.current_thread().name)[1],
                                 2, threads=2)
    assert len(set(names)) == 2


def test_the_lowest_failing_block_is_raised_after_all_stop():
    running = []

    def block(i):
        running.append(i)
        if i in (3, 5):
            raise KeyError(i)

    with pytest.raises(KeyError) as info:
        threads.parallel_for(block, 8, threads=1)
    assert info.value.args == (3,) and max(running) == 3
    with pytest.raises(KeyError) as info:
        threads.parallel_for(block, 8, threads=2)
    assert info.value.args[0] in (3, 5)


def test_a_keyboard_interrupt_in_a_block_is_raised_unchanged():
    def block(i):
        if i == 1:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        threads.parallel_for(block, 4, threads=2)
    # the pool is still usable
    assert threads.parallel_map(lambda i: i, 4, threads=2) == [0, 1, 2, 3]


def test_nested_parallel_for_finishes():
    out = np.zeros((4, 4), np.int64)

    def outer(i):
        def inner(j):
            out[i, j] = i * 4 + j
        threads.parallel_for(inner, 4, threads=2)

    threads.parallel_for(outer, 4, threads=2)
    assert out.ravel().tolist() == list(range(16))


def test_a_finished_call_keeps_nothing_alive():
    # a pool thread must not hold the last job it ran: the job holds the
    # blocks' function and results, the arrays of a whole call
    class Box:
        pass

    refs = []

    def block(i):
        box = Box()
        refs.append(weakref.ref(box))
        return box

    out = threads.parallel_map(block, 4, threads=2)
    assert len(out) == 4
    del out
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(r() is not None for r in refs):
        gc.collect()            # a late pool thread may still drop the job
        time.sleep(0.01)
    assert all(r() is None for r in refs)
