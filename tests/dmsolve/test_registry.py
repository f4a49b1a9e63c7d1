"""dmsolve.Registry: one rule for names, one wording for errors, decorators,
descriptors parsed in one place, and the preconditioners registered through
the entry point."""

import subprocess
import sys

from mpi4py import MPI

from dmsolve import PRECONDITIONERS, Registry, split_descriptor
from mpitest import Checks, assert_collective, assert_raises_collective, child_env, on_rank0

COMM = MPI.COMM_WORLD


def _shapes() -> Registry:
    reg = Registry("shape")
    reg.register("unit-square", "square", aliases=("box",))
    reg.register("Disc", "disc")
    reg.register("nothing", None)           # None is an object like any other
    return reg


def test_names_ignore_case_and_dash_underscore():
    """Registry names ignore case and treat dashes and underscores alike."""
    reg = _shapes()
    with Checks(COMM) as checks:
        checks.add(reg["Unit_Square"] == "square", "Unit_Square finds unit-square")
        checks.add(reg["BOX"] == "square", "an alias resolves", reg.canonical("BOX"))
        checks.add(reg.canonical("box") == "unit-square", "the canonical name of an alias")
        checks.add(reg["disc"] == "disc", "registered as Disc, found as disc")
        checks.add(reg["nothing"] is None and "nothing" in reg, "None can be registered")
        checks.add(reg.names() == ["disc", "nothing", "unit-square"], "names, sorted, no aliases",
                   reg.names())
        checks.add(list(reg) == reg.names() and len(reg) == 3, "iteration and length")
        checks.add("box" in reg and "circle" not in reg and 3 not in reg, "membership")


def test_unknown_name_and_wrong_type_say_the_same_everywhere():
    """An unknown name or a wrong type raises the same message on every rank."""
    reg = _shapes()
    assert_raises_collective(COMM, ValueError, reg.__getitem__, "circle",
                             match=r"unknown shape 'circle'; available: disc, nothing, "
                                   r"unit-square$")
    assert_raises_collective(COMM, TypeError, reg.__getitem__, 3,
                             match="shape name must be a string, got int")
    assert_raises_collective(COMM, ValueError, reg.register, "UNIT_square", 1,
                             match="already registered")
    assert_raises_collective(COMM, ValueError, reg.register, "other", 1, aliases=("disc",),
                             match="already registered")
    assert_raises_collective(COMM, TypeError, reg.register, "", 1, match="non-empty string")


def test_decorator_replace_and_unregister():
    """Registration by decorator, replacement and unregistering work as documented."""
    reg = _shapes()

    @reg.register("triangle", aliases=("tri",))
    def triangle():
        return 3

    first = reg["tri"]()
    reg.register("triangle", lambda: 4, replace=True)
    replaced = reg["triangle"]()
    alias_gone = "tri" not in reg
    reg.unregister("Triangle")
    with Checks(COMM) as checks:
        checks.add(first == 3, "decorator registers and returns the function")
        checks.add(replaced == 4, "replace=True overrides")
        checks.add(alias_gone, "replacing drops the old aliases")
        checks.add("triangle" not in reg, "unregistered")


def test_descriptors_are_parsed_in_one_place():
    """``(name, options)`` descriptors are parsed in one place, with one wording for errors."""
    reg = _shapes()
    with Checks(COMM) as checks:
        checks.add(split_descriptor("jacobi") == ("jacobi", {}), "a name")
        checks.add(split_descriptor(("jacobi", {"omega": 0.8})) == ("jacobi", {"omega": 0.8}),
                   "a (name, options) pair")
        checks.add(split_descriptor(["jacobi", None]) == ("jacobi", {}), "None options")
        opts = {"a": 1}
        _, _, got = reg.resolve(("box", opts))
        got["b"] = 2
        checks.add(opts == {"a": 1}, "resolve copies the options")
        checks.add(reg.resolve("Box")[:2] == ("unit-square", "square"), "resolve a name")
    assert_raises_collective(COMM, TypeError, split_descriptor, ("jacobi", [1]),
                             match=r"options must be a dict")
    assert_raises_collective(COMM, TypeError, split_descriptor, 3, "smoother",
                             match="smoother must be a name or a")


def test_preconditioners_fill_the_core_registry_through_the_entry_point():
    """The preconditioners reach dmsolve's registry through the entry point, in a process that
    imports only dmsolve."""
    # a fresh process that imports only dmsolve: the lookup itself finds the
    # preconditioners package through its entry point (PETSc's PCRegister)
    code = ("import sys, dmsolve\n"
            "before = 'preconditioners' in sys.modules\n"
            "names = dmsolve.PRECONDITIONERS.names()\n"
            "print(before, 'preconditioners' in sys.modules, ','.join(names))\n")
    proc = on_rank0(COMM, subprocess.run, [sys.executable, "-c", code], capture_output=True,
                    text=True, timeout=300, env=child_env())
    out = proc.stdout.split()
    assert_collective(COMM, proc.returncode == 0 and out[:2] == ["False", "True"]
                      and set(out[2].split(",")) >= {"amg", "asm", "bjacobi", "cheby",
                                                     "gemslr", "jacobi", "none"},
                      proc.stdout + proc.stderr)
    assert_collective(COMM, "gemslr" in PRECONDITIONERS)
