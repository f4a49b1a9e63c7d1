"""The Examples sections of the public docstrings run here, so none can go stale.

Every public name of dmsolve, preconditioners and topology (the ``__all__`` of
each module docs/_ext/apipages.py lists for the API reference) is searched by
``doctest.DocTestFinder``: its docstring and, for a class, those of its
methods; a public module's own docstring too. Each name with examples is one
case (``dmsolve.cg``, ``topology.persistence_diagram``), run by a
``doctest.DocTestRunner`` (ELLIPSIS and NORMALIZE_WHITESPACE) on every rank at
once. An example is collective and prints the same on every rank at any
number of ranks; a mismatch or an exception on any rank fails every rank with
the doctest's report, and so does an Examples section whose every line is
marked ``+SKIP`` (it would check nothing).

An example runs in the namespace of the module that defines it (as under
``python -m doctest``), plus ``np``, ``MPI`` and ``comm = MPI.COMM_WORLD``,
which some examples assume. A name that several modules export runs once,
under the first module of the list. Data (registries, constants) is left
out: it has no docstring of its own, only its type's. Also checked: that the
finder finds the examples of the names listed here (a broken finder cannot
pass with fewer cases), and that the runner fails a wrong output.
"""

import doctest
import importlib
import inspect
import io
import sys

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import ROOT, assert_collective

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
from apipages import MODULES, PACKAGES  # noqa: E402  (docs/_ext is not a package)

pytestmark = pytest.mark.timeout(600)   # the first run compiles numba's kernels

OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Docstrings with an Examples section the finder must find (each is one
# DocTest: a function's, a class's or a method's). Raise it when you add one.
MIN_EXAMPLES = 37

# The names whose examples must be found, in the order of MODULES: a finder
# that loses them fails here instead of passing with fewer cases.
EXPECTED = [
    "dmsolve.Registry", "dmsolve.cg", "dmsolve.pipecg", "dmsolve.gmres", "dmsolve.fgmres",
    "dmsolve.bicgstab", "dmsolve.minres", "dmsolve.solve",
    "dmsolve.bsp.BSP", "dmsolve.bsp.psort", "dmsolve.bsp.piece_components",
    "dmsolve.gallery.problem_size", "dmsolve.gallery.block_constants",
    "dmsolve.gallery.rigid_body_modes", "dmsolve.validate.agreed",
    "dmsolve.petsc.to_petsc", "dmsolve.petsc.petsc_pc",
    "topology.Grid", "topology.SimplicialComplex", "topology.connected_components",
    "topology.freudenthal_cells", "topology.boundary_matrix", "topology.hodge_laplacian",
    "topology.hodge_decomposition", "topology.betti_numbers", "topology.global_order",
    "topology.critical_points", "topology.classify", "topology.discrete_gradient",
    "topology.persistence_diagram", "topology.merge_tree", "topology.component_filter",
    "topology.denoise_flow", "topology.interpolate_flow", "topology.infer_triangles",
    "topology.fill_triangles", "topology.hodge_eigenpairs",
]


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in PACKAGES


def _globs() -> dict:
    return {"np": np, "MPI": MPI, "comm": MPI.COMM_WORLD}


def _collect() -> dict[str, list[doctest.DocTest]]:
    """``{"module.name": [DocTest, ...]}`` of the public names that have
    examples, in the order of MODULES and ``__all__``. Not collective."""
    finders = {True: doctest.DocTestFinder(), False: doctest.DocTestFinder(recurse=False)}
    seen: set[tuple] = set()
    cases: dict[str, list[doctest.DocTest]] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        entries = [(module_name, module, False)]     # the module's own docstring
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n in dir(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isroutine(obj):
                if _ours(obj):
                    entries.append(("%s.%s" % (module_name, name), obj, True))
        for label, obj, recurse in entries:
            tests = []
            for test in finders[recurse].find(obj, label, extraglobs=_globs()):
                key = (test.filename, test.docstring)
                if test.examples and key not in seen:
                    seen.add(key)
                    tests.append(test)
            if tests:
                cases[label] = sorted(tests, key=lambda t: t.name)
    return cases


CASES = _collect()


def _run(tests: list[doctest.DocTest]) -> tuple[int, int, str]:
    """Run ``tests``; return (failed, attempted, the failure reports)."""
    runner = doctest.DocTestRunner(optionflags=OPTIONS, verbose=False)
    report = io.StringIO()
    failed = attempted = 0
    for test in tests:
        result = runner.run(test, out=report.write)
        failed += result.failed
        attempted += result.attempted
    return failed, attempted, report.getvalue()


@pytest.mark.parametrize("label", list(CASES))
def test_examples_run_and_print_what_they_say(comm, label):
    if label.startswith("dmsolve.petsc."):
        # the optional extra, as tests/test_petsc.py (CI installs it: make petsc)
        pytest.importorskip("petsc4py", reason="petsc4py not installed: run `make petsc`")
    failed, attempted, report = _run(CASES[label])
    assert_collective(comm, failed == 0,
                      "%s: %d of %d examples failed at %d ranks:\n%s"
                      % (label, failed, attempted, comm.size, report))
    # an Examples section whose every line is +SKIP checks nothing
    assert_collective(comm, attempted > 0, "%s: every example is marked +SKIP: none runs"
                      % label)


def test_the_examples_are_found(comm):
    found = sum(len(tests) for tests in CASES.values())
    missing = [name for name in EXPECTED if name not in CASES]
    assert_collective(comm, not missing, "no examples found for %s" % missing)
    assert_collective(comm, found >= MIN_EXAMPLES,
                      "found %d docstrings with examples, expected at least %d"
                      % (found, MIN_EXAMPLES))


def test_the_runner_fails_a_wrong_output(comm):
    def sample():
        """
        >>> print(comm.size > 0, 2 + 2)
        True 5
        """
    tests = doctest.DocTestFinder().find(sample, "sample", globs=_globs())
    failed, attempted, report = _run(tests)
    assert_collective(comm, (failed, attempted) == (1, 1) and "True 5" in report
                      and "True 4" in report, report)
