"""Row blocks and reduction lanes of the threaded kernels (dmsolve._blocks):
plans that follow dmsolve.threads' block and lane sizes, every block run
once, and lane sums added in lane order whatever thread took a lane."""

import threading

import numpy as np

from dmsolve import threads
from dmsolve._blocks import lane_plan, lane_total, parallel_blocks, row_blocks, run_lanes
from threaded import small_blocks


def test_row_blocks_follow_the_block_size_and_alignment(monkeypatch):
    """Blocks of at least MIN_BLOCK rows, boundaries aligned, read at call time."""
    small_blocks(monkeypatch, rows=100)
    b = row_blocks(1000, 4, 64)
    assert b[0] == 0 and b[-1] == 1000 and b.size == 5
    assert all(int(v) % 64 == 0 for v in b[:-1])
    assert row_blocks(150, 4).size == 2                 # too few rows: one block
    monkeypatch.setattr(threads, "MIN_BLOCK", 10)
    assert row_blocks(150, 4).size == 5


def test_lane_plan_depends_on_the_length_only(monkeypatch):
    """The lanes are the same at any thread count; the blocks of lanes cover them."""
    small_blocks(monkeypatch, lane=10)
    lanes2, blocks2 = lane_plan(95, 2)
    lanes4, blocks4 = lane_plan(95, 4)
    assert lanes2.tolist() == lanes4.tolist() == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95]
    assert blocks2.tolist() == [0, 5, 10] and blocks4[-1] == 10 and blocks4.size == 5


def test_every_block_runs_once_on_the_threads(monkeypatch):
    """parallel_blocks calls each block once, whichever thread takes it."""
    seen = []
    lock = threading.Lock()

    def block(lo, hi):
        with lock:
            seen.append((lo, hi))

    bounds = np.array([0, 3, 7, 7, 12])
    parallel_blocks(block, bounds, 4)
    assert sorted(seen) == [(0, 3), (3, 7), (7, 7), (7, 12)]
    parallel_blocks(block, np.array([0, 5]), 4)             # one block: the caller
    assert seen[-1] == (0, 5)


def test_lane_sums_are_added_in_lane_order(monkeypatch):
    """run_lanes fills one partial sum per lane; lane_total adds them in
    lane order (a different order would round differently here)."""
    small_blocks(monkeypatch, lane=1)
    values = np.array([1e16, 1.0, -1e16, 1.0])

    def lanes(bounds, l0, l1, partial):
        for i in range(l0, l1):
            partial[i] = values[bounds[i]:bounds[i + 1]].sum()

    for k in (1, 2, 4):
        partial = run_lanes(lanes, values.size, k)
        assert partial.tolist() == values.tolist()
        assert lane_total(partial) == ((1e16 + 1.0) - 1e16) + 1.0 == 1.0
    pairs = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert lane_total(pairs).tolist() == [9.0, 12.0]
