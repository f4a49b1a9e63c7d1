"""Collective assertions for tests that run on every rank.

A failure seen on one rank only is agreed on before anybody fails, so every
rank reports the failure and none is left waiting in the next collective.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
from mpi4py import MPI

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


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


def child_env() -> dict[str, str]:
    """``os.environ`` without the MPI launcher's variables, so that a child
    process starts its own MPI world, and with the repository on PYTHONPATH.
    Not collective."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPIR_", "OMPI_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_mpi_job(comm, nprocs: int, args, *, cwd=None, timeout: float = 120):
    """Run ``mpiexec -n NPROCS python ARGS`` from rank 0 while the other ranks
    wait idle. Collective on ``comm``.

    Returns ``(returncode, stdout + stderr, seconds)`` on every rank;
    ``returncode`` is None if the job did not end within ``timeout`` seconds
    or could not start.
    """
    result = None
    if comm.rank == 0:
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        t0 = time.monotonic()
        try:
            proc = subprocess.run([mpiexec, "-n", str(nprocs), sys.executable, *map(str, args)],
                                  capture_output=True, text=True, timeout=timeout,
                                  env=child_env(), cwd=cwd)
            result = (proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"") + (e.stderr or b"")
            result = (None, out.decode(errors="replace") if isinstance(out, bytes) else out,
                      timeout)
        except OSError as e:     # reported on every rank rather than raised on rank 0 only
            result = (None, repr(e), 0.0)
    wait_idle(comm)
    return comm.bcast(result, root=0)


def on_rank0(comm, func, *args, **kwargs):
    """Run ``func(*args, **kwargs)`` on rank 0 only; return its result on every
    rank. Collective on ``comm``.

    The other ranks wait idle meanwhile. An exception on rank 0 fails every
    rank (AssertionError naming it) instead of leaving the others waiting.
    """
    result = error = None
    if comm.rank == 0:
        try:
            result = func(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - reported to every rank
            error = "on rank 0: %s: %s" % (type(e).__name__, e)
    wait_idle(comm)
    result, error = comm.bcast((result, error), root=0)
    if error is not None:
        raise AssertionError(error)
    return result


def assert_collective(comm, ok: bool, message: str = "assertion failed") -> None:
    """Fail on every rank if ``ok`` is false on any rank."""
    _agree_or_fail(comm, None if ok else message)


class Checks:
    """Named conditions, checked together on every rank of ``comm``.

    ::

        checks = Checks(comm)
        checks.add(inbox.tags() == [0, 7], "tags", inbox.tags())
        checks.add(x.dtype == np.float64, "dtype")
        checks.assert_all()

    ``assert_all`` (collective on ``comm``) fails on every rank if any
    condition failed on any rank, naming each failed condition and the ranks
    where it failed. Used as a ``with`` block, it runs ``assert_all`` at the
    end, and an exception raised inside the block on some ranks counts as a
    failed condition instead of leaving the other ranks waiting.
    """

    def __init__(self, comm):
        self.comm = comm
        self.failed: list[str] = []

    def add(self, ok, name: str, detail=None) -> bool:
        """Record condition ``name``; ``detail`` is reported if it fails. Not collective."""
        ok = bool(ok)
        if not ok:
            self.failed.append(name if detail is None else "%s (%s)" % (name, detail))
        return ok

    def assert_all(self) -> None:
        """Fail on every rank if a condition failed on any rank. Collective on ``comm``."""
        where: dict[str, list[int]] = {}
        for rank, failed in enumerate(self.comm.allgather(self.failed)):
            for name in failed:
                where.setdefault(name, []).append(rank)
        self.failed = []
        if where:
            raise AssertionError("failed checks: " + "; ".join(
                "%s on rank%s %s" % (name, "s" if len(ranks) > 1 else "",
                                     ", ".join(map(str, ranks)))
                for name, ranks in where.items()))

    def __enter__(self) -> "Checks":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.add(False, "raised %s: %s" % (exc_type.__name__, exc))
        self.assert_all()
        return True     # an exception raised inside the block is reported above


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


def load_example(name: str):
    """Import ``examples/NAME.py`` as a module (its ``main`` does not run). Not collective."""
    spec = importlib.util.spec_from_file_location("example_" + name, EXAMPLES / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    # registered, so that pickle finds its classes (an example's own exception
    # travels pickled between ranks, as it does from a script's __main__)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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


def child_python(comm, code: str):
    """Run ``python -c code`` in a fresh process (its own MPI world) on rank
    0, from the checkout's root; return ``(returncode, output)`` on every rank
    (``returncode`` None if it did not end within 300 s). Collective on
    ``comm``."""
    result = None
    if comm.rank == 0:
        try:
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                  text=True, timeout=300, env=child_env(), cwd=str(ROOT))
            result = (proc.returncode, proc.stdout + proc.stderr)
        except subprocess.TimeoutExpired:
            result = (None, "timed out after 300 s")  # still reach wait_idle below
    wait_idle(comm)
    return comm.bcast(result, root=0)
