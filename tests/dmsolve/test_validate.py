"""dmsolve.validate, the one door for option checks: one wording for each
refusal, the canonical value returned, and errors agreed across ranks."""

import math

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve import Registry
from dmsolve.validate import agreed, check_bool, check_choice, check_int, check_real
from mpitest import Checks, assert_collective, assert_raises_collective

COMM = MPI.COMM_WORLD


def _shapes() -> Registry:
    reg = Registry("shape")
    reg.register("unit-square", "square", aliases=("box",))
    reg.register("Disc", "disc")
    reg.register("nothing", None)           # None is an object like any other
    return reg


@pytest.mark.parametrize("call, kind, match", [
    (lambda: check_int("n", 2.0), TypeError, "n must be an integer"),
    (lambda: check_int("n", True), TypeError, "n must be an integer"),
    (lambda: check_int("n", 0, low=1), ValueError, "n must be a positive integer, got 0"),
    (lambda: check_int("n", 1.5, low=1), TypeError, "n must be a positive integer, got float"),
    (lambda: check_int("n", -1, low=0), ValueError, "non-negative integer"),
    (lambda: check_int("n", 5, low=1, high=4), ValueError, r"in \[1, 4\], got 5"),
    (lambda: check_int("n", None), TypeError, "got NoneType"),
    (lambda: check_real("theta", math.nan), ValueError, "theta must be a finite real number"),
    (lambda: check_real("rtol", -1e-3, low=0), ValueError, "non-negative real number"),
    (lambda: check_real("omega", 0, low=0, low_open=True), ValueError, "positive real number"),
    (lambda: check_real("omega", 2.0, low=0, high=2, low_open=True, high_open=True),
     ValueError, r"in \(0, 2\), got 2.0"),
    (lambda: check_real("x", np.inf, low=0), ValueError, "got inf"),
    (lambda: check_real("x", "1"), TypeError, "x must be a real number, got str"),
    (lambda: check_real("x", False), TypeError, "got bool"),
    (lambda: check_bool("flag", 1), TypeError, "flag must be True or False"),
    (lambda: check_choice("sweep", "sideways", ("forward", "backward")), ValueError,
     r"unknown sweep 'sideways'; available: backward, forward"),
    (lambda: check_choice("sweep", 1, ("forward",)), TypeError, "sweep must be a string"),
], ids=["int-float", "int-bool", "int-low1", "int-low1-type", "int-low0", "int-range", "int-none",
        "real-nan", "real-negative", "real-open-low", "real-open-high", "real-inf", "real-str",
        "real-bool", "bool-int", "choice-unknown", "choice-type"])
def test_checks_refuse_with_one_wording(call, kind, match):
    """Each check refuses a bad value with the one wording, naming the argument."""
    assert_raises_collective(COMM, kind, call, match=match)


def test_checks_return_the_canonical_value():
    """Each check returns the canonical value."""
    reg = _shapes()
    with Checks(COMM) as checks:
        checks.add(check_int("n", np.int32(3), low=1) == 3, "numpy integers accepted")
        checks.add(type(check_real("x", 1, low=0)) is float, "reals become float")
        checks.add(check_real("x", None, allow_none=True) is None, "allow_none")
        checks.add(check_bool("b", np.bool_(True)) is True, "numpy bool accepted")
        checks.add(check_choice("sweep", "Forward", ("forward", "backward")) == "forward",
                   "a choice is canonical")
        checks.add(check_choice("shape", "BOX", reg) == "unit-square", "a registry choice")


def test_agreed_raises_the_same_error_on_every_rank():
    """agreed() raises a check failing on one rank on every rank."""
    # the check fails on the last rank only: every rank must raise it
    def bad_on_last_rank():
        with agreed(COMM):
            check_int("nparts", 0 if COMM.rank == COMM.size - 1 else 2, low=1)
    where = "" if COMM.size == 1 else r" \[raised on rank %d\]" % (COMM.size - 1)
    assert_raises_collective(COMM, ValueError, bad_on_last_rank,
                             match=r"nparts must be a positive integer, got 0%s" % where)

    def fine():
        with agreed(COMM):
            return check_real("x", 0.5, low=0, high=1)
    assert_collective(COMM, fine() == 0.5)
