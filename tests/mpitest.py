"""Collective assertions for tests that run on every rank.

A failure seen on one rank only is agreed on before anybody fails, so every
rank reports the failure and none is left waiting in the next collective.
"""

from __future__ import annotations

import re
import time

import numpy as np
from mpi4py import MPI


def _agree_or_fail(comm, message: str | None) -> None:
    msgs = comm.allgather(message)
    bad = [(r, m) for r, m in enumerate(msgs) if m is not None]
    if bad:
        raise AssertionError("; ".join("rank %d: %s" % rm for rm in bad))


def wait_idle(comm) -> None:
    """Wait, sleeping, until every rank of ``comm`` gets here.

    For tests where one rank runs a child MPI job: the others would spin in
    the next collective and take a core from the child and its launcher
    (2 cores run the whole suite).
    """
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.01)


def assert_collective(comm, ok: bool, message: str = "assertion failed") -> None:
    """Fail on every rank if ``ok`` is false on any rank."""
    _agree_or_fail(comm, None if ok else message)


def assert_allclose_collective(actual, desired, comm=MPI.COMM_WORLD, rtol=1e-14,
                               atol=0.0, err_msg="") -> None:
    """``numpy.testing.assert_allclose`` agreed across ranks."""
    msg = None
    try:
        np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol,
                                   err_msg=err_msg)
    except AssertionError as e:
        msg = str(e)
    _agree_or_fail(comm, msg)


def assert_equal_collective(actual, desired, comm=MPI.COMM_WORLD, err_msg="") -> None:
    """``numpy.testing.assert_array_equal`` agreed across ranks."""
    msg = None
    try:
        np.testing.assert_array_equal(actual, desired, err_msg=err_msg)
    except AssertionError as e:
        msg = str(e)
    _agree_or_fail(comm, msg)


def assert_raises_collective(comm, exc_type, func, *args, match: str | None = None,
                             **kwargs):
    """Assert that ``func(*args, **kwargs)`` raises ``exc_type`` on every rank.

    Returns this rank's exception.
    """
    caught = None
    problem = None
    try:
        func(*args, **kwargs)
    except exc_type as e:
        caught = e
        if match is not None and not re.search(match, str(e)):
            problem = "message %r does not match %r" % (str(e), match)
    except Exception as e:  # noqa: BLE001 - reported to every rank
        problem = "raised %s(%s) instead of %s" % (type(e).__name__, e,
                                                  exc_type.__name__)
    else:
        problem = "did not raise %s" % exc_type.__name__
    _agree_or_fail(comm, problem)
    return caught


def same_on_all_ranks(comm, value) -> bool:
    """Whether a picklable ``value`` is equal on every rank (for arrays too)."""
    values = comm.allgather(value)
    first = values[0]
    for v in values[1:]:
        if isinstance(first, np.ndarray):
            if not (isinstance(v, np.ndarray) and first.shape == v.shape
                    and np.array_equal(first, v)):
                return False
        elif v != first:
            return False
    return True
