"""Kernels run on blocks of their items by a rank's threads (item_blocks,
run_blocks): the blocks cover the items in order, never split a group, and
the joined outputs are those of one call on all the items, at any thread
count."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.threads import using
from mpitest import assert_collective, assert_equal_collective
from topology.kernels import BLOCKS_PER_THREAD, PATH_BLOCK, item_blocks, run_blocks

COMM = MPI.COMM_WORLD


def kernel(shift, qry, pos):
    """Per item: one row ``pos + shift`` always, and the query again when
    ``pos`` is even (outputs of unknown length, in item order)."""
    return pos + shift, qry[pos % 2 == 0], np.column_stack((qry, pos))


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_joined_blocks_equal_one_call(threads):
    """Several blocks at 2 and 4 threads, one at 1; the same arrays."""
    n = 5 * PATH_BLOCK + 13 + COMM.rank
    rng = np.random.default_rng(COMM.rank)
    qry, pos = np.arange(n, dtype=np.int64), rng.integers(0, 100, n)
    whole = kernel(7, qry, pos)
    cut = item_blocks(n, threads)
    with using(threads):
        got = run_blocks(kernel, (7,), (qry, pos))
    expect = 1 if threads == 1 else min(threads * BLOCKS_PER_THREAD, n // PATH_BLOCK)
    assert_equal_collective(cut.size - 1, expect)
    for a, b in zip(got, whole):
        assert_equal_collective(a, b)


@pytest.mark.parametrize("threads", [2, 4])
def test_groups_stay_in_one_block(threads):
    """With sorted group keys every boundary is the first item of a group,
    and a kernel that needs a whole group sees it whole."""
    rng = np.random.default_rng(11)
    qry = np.sort(rng.integers(0, 900, 6 * PATH_BLOCK))
    cut = item_blocks(qry.size, threads, groups=qry)
    inner = cut[1:-1]
    starts = np.all(qry[inner] != qry[inner - 1])
    assert_collective(COMM, cut.size > 2 and bool(starts) and cut[0] == 0
                      and cut[-1] == qry.size and bool(np.all(np.diff(cut) > 0)), str(cut))

    def group_sizes(q):
        u, c = np.unique(q, return_counts=True)
        return u, c
    with using(threads):
        u, c = run_blocks(group_sizes, (), (qry,), groups=qry)
    ref = np.unique(qry, return_counts=True)
    assert_equal_collective(u, ref[0])
    assert_equal_collective(c, ref[1])


def test_empty_and_small_batches_make_one_call():
    """Fewer items than two blocks' worth, or none: one call on them all."""
    calls = []

    def count(a):
        calls.append(a.size)
        return a * 2
    with using(4):
        out = run_blocks(count, (), (np.arange(PATH_BLOCK + 1),))
        run_blocks(count, (), (np.zeros(0, np.int64),))
    assert_equal_collective(out, 2 * np.arange(PATH_BLOCK + 1))
    assert_equal_collective(calls, [PATH_BLOCK + 1, 0])
