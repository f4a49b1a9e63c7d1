"""scipy's own tests of its iterative solvers, run on dmsolve's.

scipy's ``sparse/linalg/_isolve/tests/test_iterative.py`` and ``test_minres.py``
(from the installed scipy) are loaded with scipy's ``bicgstab``, ``cg``,
``gmres`` and ``minres`` replaced, while the modules are built, by dmsolve's
methods behind scipy's interface (:func:`scipy_interface`): scipy's matrices,
arrays and ``LinearOperator``s and numpy vectors go straight into
``dmsolve.cg`` etc., which distribute them over the ranks of the run. Every
case of theirs for those four solvers runs here, one test each, at any
number of ranks.

Where scipy and dmsolve deliberately differ, the case is marked xfail
(strict: it fails the day it passes) with the reason, explained for users in
the section "Coming from scipy" of docs/guide/choosing.md.
:func:`test_pass_counts` runs every case with
scipy's solvers and with ours and asserts both tallies.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import scipy
import scipy.sparse.linalg._isolve as isolve
from mpi4py import MPI

import dmsolve
from dmsolve import ConvergedReason

from mpitest import assert_collective

COMM = MPI.COMM_WORLD
SCIPY_TESTS = Path(scipy.__file__).parent / "sparse" / "linalg" / "_isolve" / "tests"
MODULES = ("test_iterative", "test_minres")

#: scipy's solvers that dmsolve has a method for (its other six stay out)
NAMES = ("bicgstab", "cg", "gmres", "minres")

#: Cases scipy skips itself for these solvers (gh-8829 breakdown cases, the
#: atol of minres, tfqmr-only tests, gh-15533, solver-specific tests);
#: :func:`test_pass_counts` checks that both runs skip exactly these.
SCIPY_SKIPS = frozenset({
    "test_iterative::test_maxiter[sym-nonpd-bicgstab]",
    "test_iterative::test_precond_dummy[sym-nonpd-bicgstab]",
    "test_iterative::test_x0_equals_Mb[nonsymposdef-bicgstab]",
    "test_iterative::test_atol[minres]",
    "test_iterative::test_invalid_atol[minres-legacy]",
    "test_iterative::test_invalid_atol[minres-None]",
    "test_iterative::test_invalid_atol[minres--1]",
    "test_iterative::test_maxiter_worsening[bicgstab]",
    "test_iterative::test_maxiter_worsening[cg]",
    "test_iterative::test_maxiter_worsening[minres]",
})

#: Where dmsolve keeps its own behaviour, and why (docs/guide/choosing.md).
KNOWN_DIFFERENCES = {
    "test_iterative::test_atol[gmres]":
        "dmsolve's gmres preconditions on the left by default, as PETSc, and then tests "
        "||M (b - A x)|| <= max(rtol*||M b||, atol), where scipy tests ||b - A x||: with M "
        "scaled by 1e6 or 1e-6 the two disagree; side='right' tests ||b - A x|| "
        "(test_atol[gmres-side-right] passes)",
    "test_iterative::TestGMRES::test_defective_precond_breakdown":
        "rounding: with a singular M the solve stops with FALSE_CONVERGENCE, as it should, "
        "at an x whose first entry is -8e-17 where scipy's order of operations leaves 0, "
        "and the test compares M A x with M b at atol=0",
}

#: Cases of scipy's tests run with a dmsolve option, beside scipy's own.
EXTRA_CASES = frozenset({"test_iterative::test_atol[gmres-side-right]"})

#: The tallies of test_pass_counts, by scipy's version (its tests change with
#: it): scipy's cases for the four solvers, those scipy's solvers pass (all but
#: :data:`SCIPY_SKIPS`), those dmsolve's pass (all but the skips and
#: :data:`KNOWN_DIFFERENCES`; the extra cases apart).
TALLIES = {"1.17": (301, 291, 289)}


# -- scipy's interface on dmsolve's methods ---------------------------------------------

def _info(info, maxiter: int) -> int:
    """scipy's ``info``: 0 converged, ``maxiter`` when it ran out, -1 otherwise."""
    if info.converged:
        return 0
    return maxiter if info.reason is ConvergedReason.MAXITER else -1


def scipy_interface(name: str, side: str = "left") -> Callable:
    """dmsolve's method ``name`` behind scipy's signature and ``(x, info)``.

    Of dmsolve's defaults, those scipy lacks are turned off: no divergence
    test (``divtol=None``). gmres follows scipy's ``restart`` (default 20),
    ``maxiter`` in restart cycles and ``callback_type`` (``"legacy"`` with a
    DeprecationWarning when a callback comes without one, as scipy), and
    dmsolve's ``side`` (default ``"left"``, as PETSc: the test is on
    ``||M (b - A x)||``; ``"right"`` tests ``||b - A x||``, as scipy's gmres).
    """
    method = getattr(dmsolve, name)

    def run(A, b, x0, maxiter, callback, **options):
        n = np.shape(b)[0]
        maxiter = 10 * n if maxiter is None else maxiter
        x, info = method(A, b, x0, maxiter=maxiter, callback=callback, divtol=None,
                         **options)
        return x, _info(info, maxiter)

    def solver(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
        return run(A, b, x0, maxiter, callback, rtol=rtol, atol=atol, M=M)

    def minres(A, b, x0=None, *, rtol=1e-5, shift=0.0, maxiter=None, M=None, callback=None,
               show=False, check=False):
        return run(A, b, x0, maxiter, callback, rtol=rtol, M=M, shift=shift, check=check)

    def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
              callback=None, callback_type=None):
        return _gmres(method, A, b, x0, rtol, atol, restart, maxiter, M, callback,
                      callback_type, side)

    chosen = {"minres": minres, "gmres": gmres}.get(name, solver)
    chosen.__name__ = chosen.__qualname__ = name
    return chosen


def _gmres(method, A, b, x0, rtol, atol, restart, maxiter, M, callback, callback_type,
           side):
    """scipy's gmres interface (see :func:`scipy_interface`)."""
    if callback is not None and callback_type is None:
        warnings.warn("gmres called without specifying `callback_type`", DeprecationWarning,
                      stacklevel=3)
        callback_type = "legacy"
    if callback is None:
        callback_type = None
    n = np.shape(b)[0]
    restart = min(20 if restart is None else restart, n)
    cycles = 10 * n if maxiter is None else maxiter
    # scipy's maxiter counts restart cycles, but inner iterations for a legacy callback
    inner = cycles if callback_type == "legacy" else cycles * restart
    bnorm = float(np.linalg.norm(b))
    options = {}
    if callback_type in ("legacy", "pr_norm"):
        # scipy's pr_norm: the (preconditioned) residual estimate over ||b||
        def monitor(it, rnorm):
            if it > 0:
                callback(rnorm / bnorm)
        options["monitor"] = monitor
    calls = [0]
    if callback_type == "x":
        # scipy calls it once per restart cycle, with the cycle's iterate
        def per_cycle(x):
            calls[0] += 1
            if calls[0] % restart == 0:
                callback(x)
        options["callback"] = per_cycle
    x, info = method(A, b, x0, rtol=rtol, atol=atol, maxiter=inner, M=M, restart=restart,
                     divtol=None, side=side, **options)
    if callback_type == "x" and calls[0] % restart:
        callback(x)
    return x, _info(info, cycles)


# -- scipy's test modules, built on either set of solvers -------------------------------

def load(module: str, ours: bool):
    """A fresh copy of scipy's test module ``module``, built with scipy's
    solvers (``ours=False``) or dmsolve's, its solver list cut to :data:`NAMES`."""
    spec = importlib.util.spec_from_file_location(
        "scipy_isolve_%s_%s" % (module, "dmsolve" if ours else "scipy"),
        SCIPY_TESTS / (module + ".py"))
    mod = importlib.util.module_from_spec(spec)
    saved = {name: getattr(isolve, name) for name in NAMES}
    try:
        if ours:
            for name in NAMES:
                setattr(isolve, name, scipy_interface(name))
        with warnings.catch_warnings():
            # scipy's suite registers its marks (fail_slow) in its own conftest
            warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
            spec.loader.exec_module(mod)
    finally:
        for name, func in saved.items():
            setattr(isolve, name, func)
    solvers = [getattr(mod, name) for name in NAMES if hasattr(mod, name)]
    if hasattr(mod, "_SOLVERS"):
        mod._SOLVERS = [s for s in mod._SOLVERS if s in solvers]
        mod.cases = [c for c in mod.cases if c.solver in solvers]
    return mod


@dataclass(frozen=True)
class Call:
    """One case of scipy's suite: ``func(**kwargs)``, named ``id``."""

    id: str
    func: Callable
    kwargs: dict

    def run(self) -> str:
        """Run it: ``"passed"``, ``"failed: ..."``, ``"skipped"`` or ``"xfailed"``."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                with np.errstate(all="ignore"):
                    self.func(**self.kwargs)
        except pytest.skip.Exception:
            return "skipped"
        except pytest.xfail.Exception:
            return "xfailed"
        except (pytest.fail.Exception, Exception) as e:  # noqa: BLE001 - the outcome
            return "failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200]
                                       if str(e) else "")
        return "passed"


def _parametrized(func) -> list[tuple[list[str], list, list]]:
    """``(argnames, values, ids)`` of each ``pytest.mark.parametrize`` on ``func``."""
    out = []
    for mark in getattr(func, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        values = list(mark.args[1])
        ids = mark.kwargs.get("ids")
        if ids is None:
            ids = [getattr(v, "name", None) or getattr(v, "__name__", None) or str(v)
                   for v in values]
        out.append((names, values, list(ids)))
    return out


def _fixture_values(mod, arg: str):
    """The values and ids of scipy's fixtures ``case`` and ``solver``."""
    if arg == "case":
        return mod.cases, [c.name for c in mod.cases]
    if arg == "solver":
        return mod._SOLVERS, [s.__name__ for s in mod._SOLVERS]
    raise KeyError(arg)


def calls(module: str, ours: bool) -> list[Call]:
    """Every case of ``module`` for the solvers of :data:`NAMES`, with scipy's ids."""
    mod = load(module, ours)
    keep = set(NAMES)
    out = []
    functions = [(name, f) for name, f in vars(mod).items()
                 if name.startswith("test_") and inspect.isfunction(f)]
    for cname, cls in vars(mod).items():
        if cname.startswith("Test") and inspect.isclass(cls):
            functions += [("%s::%s" % (cname, name), getattr(cls(), name))
                          for name in vars(cls) if name.startswith("test_")]
    for name, func in functions:
        params = list(inspect.signature(func).parameters)
        if "capsys" in params:
            continue            # test_show: tfqmr's printing only
        if name.startswith("TestQMR"):
            continue            # qmr only
        axes = []               # (argnames, values, ids), in the order of the arguments
        marked = _parametrized(func)
        for arg in params:
            group = [m for m in marked if arg in m[0]]
            if not group:
                axes.append(([arg], *_fixture_values(mod, arg)))
            elif group[0][0][0] == arg:
                axes.append(group[0])
        combos = [({}, [])]
        for names, values, ids in reversed(axes):
            combos = [({**kw, **(dict(zip(names, v)) if len(names) > 1 else {names[0]: v})},
                       [i] + idl) for kw, idl in combos for v, i in zip(values, ids)]
        for kw, idl in combos:
            # the solver of the case (a Case of test_precond_inverse has none: it
            # loops over _SOLVERS, cut to NAMES by load)
            solver = kw.get("solver", getattr(kw.get("case"), "solver", None))
            if solver is not None and solver.__name__ not in keep:
                continue
            cid = "%s::%s%s" % (module, name, "[%s]" % "-".join(map(str, idl)) if idl else "")
            out.append(Call(cid, func, kw))
    if ours and module == "test_iterative":
        out.append(Call("test_iterative::test_atol[gmres-side-right]", mod.test_atol,
                        {"solver": scipy_interface("gmres", side="right")}))
    return out


def all_calls(ours: bool) -> list[Call]:
    """The cases of both modules."""
    return [c for module in MODULES for c in calls(module, ours)]


OURS = all_calls(ours=True)

#: The outcomes test_scipy_case saw, by case: test_pass_counts runs only the
#: others again (the same on every rank: every rank runs the same tests).
_OUTCOMES: dict[str, str] = {}


def _param(call: Call):
    reason = KNOWN_DIFFERENCES.get(call.id)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(call, id=call.id, marks=marks)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("call", [_param(c) for c in OURS if c.id not in SCIPY_SKIPS])
def test_scipy_case(call):
    """One case of scipy's suite passes on dmsolve's solvers, on every rank."""
    outcome = _OUTCOMES[call.id] = call.run()
    outcomes = COMM.allgather(outcome)
    assert_collective(COMM, outcome == "passed", "%s: %s" % (call.id, outcomes))


@pytest.mark.timeout(1200)
def test_pass_counts():
    """The tallies of scipy's suite: with scipy's solvers, and with dmsolve's,
    where every case outside :data:`KNOWN_DIFFERENCES` passes."""
    tallies = {}
    for ours in (False, True):
        outcomes = {c.id: (_OUTCOMES.get(c.id) if ours else None) or c.run()
                    for c in all_calls(ours)}
        every = COMM.allgather(outcomes)
        assert_collective(COMM, all(o == outcomes for o in every),
                          "the ranks saw the same outcomes")
        tallies[ours] = outcomes
    scipy_runs, ours_runs = tallies[False], tallies[True]
    assert_collective(COMM, set(scipy_runs) == set(ours_runs) - EXTRA_CASES,
                      "the same cases run")
    for runs in (scipy_runs, ours_runs):
        skipped = {k for k, v in runs.items() if v == "skipped"}
        assert_collective(COMM, skipped == SCIPY_SKIPS, str(sorted(skipped ^ SCIPY_SKIPS)))
    failed = {k: v for k, v in scipy_runs.items() if v not in ("passed", "skipped")}
    assert_collective(COMM, not failed, "scipy's solvers: %s" % failed)
    failed = {k: v for k, v in ours_runs.items() if v not in ("passed", "skipped")}
    assert_collective(COMM, set(failed) == set(KNOWN_DIFFERENCES), str(failed))
    scipy_passed = sum(v == "passed" for v in scipy_runs.values())
    ours_passed = sum(v == "passed" for k, v in ours_runs.items() if k not in EXTRA_CASES)
    tally = (len(scipy_runs), scipy_passed, ours_passed)
    assert_collective(COMM, ours_passed == scipy_passed - len(KNOWN_DIFFERENCES),
                      "cases, scipy's passed, dmsolve's passed: %s" % (tally,))
    expected = TALLIES.get(".".join(scipy.__version__.split(".")[:2]))
    assert_collective(COMM, expected is None or tally == expected,
                      "cases, scipy's passed, dmsolve's passed: %s, not %s" % (tally, expected))
