"""V-paths followed across ranks (follow_paths): paths handed from rank to
rank end after one superstep per crossing, and an error on one rank is
raised on all."""

import numpy as np
from mpi4py import MPI

from dmsolve import Layout
from mpitest import assert_equal_collective, assert_raises_collective
from topology.morse import follow_paths

COMM = MPI.COMM_WORLD


def _hops():
    """Paths (query, hops left) that hop to the next rank until their hop
    count is spent: ``(advance, arrive)`` for :func:`follow_paths`."""

    def advance(q, hops):
        last = hops == 0
        nxt = (COMM.rank + 1) % COMM.size
        out = np.column_stack((q[~last], np.full(int((~last).sum()), nxt), hops[~last] - 1))
        return q[last], out.astype(np.int64)

    def arrive(rows):
        return rows[:, 0].copy(), rows[:, 2].copy()

    return advance, arrive


def test_follow_paths_hands_paths_from_rank_to_rank():
    """A path that crosses ``h`` rank boundaries ends ``h`` supersteps later,
    plus the last (silent) one; exit rows given up front start on their owner."""
    layout = Layout.block(COMM.size, COMM)          # vertex r is rank r's
    advance, arrive = _hops()
    h = 2 * COMM.size + 1
    items = (np.array([COMM.rank], np.int64), np.array([h], np.int64))
    # and one more path per rank, handed straight to the next rank
    exits = np.array([[100 + COMM.rank, (COMM.rank + 1) % COMM.size, 0]], np.int64)
    done, steps = follow_paths(COMM, layout, advance, arrive, items, exits, label="hops")
    done = np.sort(np.concatenate(done))
    prev = (COMM.rank - 1) % COMM.size
    assert_equal_collective(steps, h + 1)
    assert_equal_collective(done, np.sort([(COMM.rank - h) % COMM.size, 100 + prev]))


def test_follow_paths_error_on_one_rank_raises_on_every_rank():
    """An exception while following paths on one rank is raised on all, in
    the same superstep: no rank is left waiting."""
    layout = Layout.block(COMM.size, COMM)
    advance, arrive = _hops()

    def failing(q, hops):
        if COMM.rank == COMM.size - 1 and hops.size and hops.min() == 1:
            raise ValueError("broken path")
        return advance(q, hops)

    items = (np.array([COMM.rank], np.int64), np.array([3], np.int64))
    assert_raises_collective(COMM, ValueError, follow_paths, COMM, layout, failing, arrive,
                             items, np.zeros((0, 3), np.int64), label="hops",
                             match="broken path")
