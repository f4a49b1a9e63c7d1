"""The public API's contracts: every public call says whether it is collective,
no property communicates, the package layers import downwards only and
through public names, and dmsolve leans on other projects' public APIs."""

import ast
import importlib
import inspect
import os
import pathlib
import re
import subprocess
import sys

import pytest

from dmsolve import DistCSR, DistLinearOperator, Preconditioner, gallery
from dmsolve.bsp import BSP, Inbox
from mpitest import assert_collective, child_env, child_python, on_rank0

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("dmsolve", "preconditioners", "topology")
# every public module: the API reference's list, which tests/test_docs.py
# checks against the packages' modules
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
from apipages import MODULES as PUBLIC_MODULES # noqa: E402


def _ours(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in PACKAGES


def _public_objects(module_name: str):
    """``(name, object)`` of the callables ``module_name`` exports (``__all__``)
    that are defined in our packages; submodules and data are left out."""
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        if callable(obj) and not inspect.ismodule(obj) and _ours(obj):
            yield name, obj


def _public_members(cls):
    """``(name, raw attribute)`` of the public methods and properties that
    ``cls`` and its bases in our packages define (inherited ones included)."""
    seen = set()
    for klass in cls.__mro__:
        if not _ours(klass):
            continue
        for name, raw in vars(klass).items():
            if not name.startswith("_") and name not in seen:
                seen.add(name)
                yield name, raw


def _lacking_note(module_name: str) -> list[str]:
    """Public callables of ``module_name`` whose docstring does not say
    whether they are collective."""
    def says(*docs) -> bool:
        return any("collective" in (d or "").lower() for d in docs)

    missing = []
    for name, obj in _public_objects(module_name):
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue              # raising an exception never communicates
            init = obj.__init__ if _ours(obj.__init__) else None
            if not says(obj.__doc__, getattr(init, "__doc__", None)):
                missing.append(name)
            for attr, raw in _public_members(obj):
                func = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
                if inspect.isfunction(func) and not says(func.__doc__):
                    missing.append("%s.%s" % (name, attr))
        elif not says(obj.__doc__):
            missing.append(name)
    return missing


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_call_says_whether_it_is_collective(comm, module_name):
    """Every public call of the module says whether it is collective."""
    missing = _lacking_note(module_name)
    assert_collective(comm, not missing,
                      "%s: no 'Collective ...' or 'Not collective' in the docstring of %s"
                      % (module_name, ", ".join(missing)))


# -- properties never communicate -------------------------------------------------------

# calls through which a property could communicate: the communicator's methods
# (either case) and the superstep's sync
_COMMUNICATING = re.compile(
    r"\.(?:[Aa]llreduce|[Aa]llgatherv?|[Aa]lltoallv?|[Bb]cast|[Gg]atherv?|[Ss]catterv?|"
    r"Reduce|Exscan|Scan|Barrier|I(?:barrier|allreduce|allgather|alltoall|bcast|send|recv)\w*|"
    r"[Ii]?[Nn]eighbor_\w+|Dup|Split\w*|Create_\w+|[Ss]end|[Rr]ecv|Sendrecv|Start\w*|"
    r"Wait\w*|sync)\s*\(")


def _properties():
    for module_name in PUBLIC_MODULES:
        for name, obj in _public_objects(module_name):
            if inspect.isclass(obj):
                for attr, raw in _public_members(obj):
                    if isinstance(raw, property):
                        yield "%s.%s.%s" % (module_name, name, attr), raw


def test_no_property_calls_mpi(comm):
    """No public property's source makes an MPI call."""
    found = sorted({(label, m.group(0)) for label, prop in _properties()
                    for m in _COMMUNICATING.finditer(inspect.getsource(prop.fget))})
    assert_collective(comm, list(_properties()), "found no properties to check")
    assert_collective(comm, not found, "properties that communicate: %s" % found)


class _RecordingComm:
    """Stands in for a communicator: forwards to it and records every
    attribute a caller reaches for."""

    LOCAL = {"Get_rank", "Get_size", "rank", "size"}

    def __init__(self, comm):
        self._comm = comm
        self.used: list[str] = []

    def __getattr__(self, name):
        self.used.append(name)
        return getattr(self._comm, name)


def _core_objects(comm):
    """One of each core class that has properties, built on ``comm`` (collective)."""
    A = gallery.poisson2d(5, comm)
    x, _ = A.create_vectors()
    op = DistLinearOperator(A.row_layout, A.col_layout, A.matvec)
    ctx = BSP(comm)
    return [A.row_layout, x, A, A.halo, op, Preconditioner(A), ctx, ctx.ledger,
            Inbox({}, {}, False, 0), BSP(comm, virtual=2)]


def test_core_properties_touch_no_communicator(comm):
    """Reading the core classes' properties makes no call on their communicator."""
    objects = _core_objects(comm)
    recorder = _RecordingComm(comm)
    for obj in objects:                 # from here on, every comm is the recorder
        for owner in (obj, getattr(obj, "row_layout", None), getattr(obj, "col_layout", None),
                      getattr(obj, "layout", None)):
            if owner is not None and hasattr(owner, "comm") and \
                    not isinstance(type(owner).__dict__.get("comm"), property):
                owner.comm = recorder
    problems = []
    for obj in objects:
        for name, raw in _public_members(type(obj)):
            if isinstance(raw, property):
                del recorder.used[:]
                try:
                    getattr(obj, name)
                except Exception as e:  # noqa: BLE001 - reported below
                    problems.append("%s.%s raised %r" % (type(obj).__name__, name, e))
                used = sorted(set(recorder.used) - _RecordingComm.LOCAL)
                if used:
                    problems.append("%s.%s called comm.%s" % (type(obj).__name__, name,
                                                             "/".join(used)))
    assert_collective(comm, not problems, "; ".join(problems))


def test_core_classes_with_properties_are_all_checked(comm):
    """Every core class with properties is among those checked."""
    # the test above must not miss a class of the core that grows a property
    checked = {type(o) for o in _core_objects(comm)}
    with_properties = {obj for m in ("dmsolve", "dmsolve.bsp")
                       for _, obj in _public_objects(m)
                       if inspect.isclass(obj) and obj.__module__.startswith(("dmsolve._",
                                                                             "dmsolve.bsp"))
                       and any(isinstance(r, property) for _, r in _public_members(obj))}
    missing = sorted(c.__name__ for c in with_properties - checked)
    assert_collective(comm, not missing, "not checked: %s" % missing)


def test_transpose_is_a_method_not_a_property(comm):
    """Transposing communicates, so it is a method, not a property."""
    A = gallery.poisson2d(4, comm)
    assert_collective(comm, not hasattr(DistCSR, "T"), "DistCSR.T communicates; use transpose()")
    assert_collective(comm, A.transpose().shape == A.shape)


# -- the import graph -------------------------------------------------------------------

def _sources(package: str):
    return sorted((ROOT / package).rglob("*.py"))


def _matches(package: str, pattern: str) -> list[str]:
    rx = re.compile(pattern, re.MULTILINE)
    return ["%s:%d: %s" % (path.relative_to(ROOT), text.count("\n", 0, m.start()) + 1,
                           m.group(0).strip())
            for path in _sources(package)
            for text in [path.read_text()]
            for m in rx.finditer(text)]


def test_dmsolve_never_imports_the_packages_above_it_static(comm):
    """No source file of dmsolve imports preconditioners or topology."""
    hits = _matches("dmsolve", r"^\s*(?:from|import)\s+(?:preconditioners|topology)\b.*$"
                               r"|import_module\(\s*['\"](?:preconditioners|topology)")
    assert_collective(comm, _sources("dmsolve"), "no sources found under dmsolve/")
    assert_collective(comm, not hits, "dmsolve imports a package above it: %s" % hits)


def test_importing_all_of_dmsolve_loads_neither_package_above_it(comm):
    """Importing every module of dmsolve loads neither preconditioners nor topology."""
    code = (
        "import importlib, pkgutil, sys\n"
        "import dmsolve\n"
        "for m in pkgutil.walk_packages(dmsolve.__path__, 'dmsolve.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
        "above = sorted(n for n in sys.modules\n"
        "               if n.split('.')[0] in ('preconditioners', 'topology'))\n"
        "print('modules', len([n for n in sys.modules if n.startswith('dmsolve')]))\n"
        "print('above', above)\n"
    )
    code_, out = child_python(comm, code)
    assert_collective(comm, code_ == 0 and "above []" in out, out)


def test_no_package_imports_another_packages_private_names(comm):
    """No package imports another package's private names."""
    private_of = {
        "dmsolve": r"(?:from\s+dmsolve(?:\.\w+)*\._\w+\s+import"
                   r"|import\s+dmsolve(?:\.\w+)*\._\w+"
                   r"|from\s+dmsolve(?:\.\w+)*\s+import\s+\(?[^\n]*\b_\w+"
                   r"|\bdmsolve(?:\.[a-z]\w*)*\._[a-z]\w*)",
        "preconditioners": r"(?:from\s+preconditioners(?:\.\w+)*\._\w+\s+import"
                           r"|import\s+preconditioners(?:\.\w+)*\._\w+"
                           r"|from\s+preconditioners(?:\.\w+)*\s+import\s+\(?[^\n]*\b_\w+"
                           r"|\bpreconditioners(?:\.[a-z]\w*)*\._[a-z]\w*)",
    }
    hits = []
    for package, others in (("preconditioners", ["dmsolve"]),
                            ("topology", ["dmsolve", "preconditioners"])):
        for other in others:
            hits += _matches(package, private_of[other])
    assert_collective(comm, not hits, "private names of another package: %s" % hits)


def test_the_distribution_ships_every_package_and_the_registry_entry_point(comm):
    """pyproject.toml ships every package and subpackage and the registry's entry point."""
    # pyproject.toml's package list decides what a wheel holds: a subpackage left out
    # of it (dmsolve.krylov, preconditioners.gemslr, ...) works in an editable
    # install and is missing from a real one.
    import tomllib

    from setuptools import find_packages

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = conf["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(str(ROOT), include=found["include"]))
    on_disk = {str(p.parent.relative_to(ROOT)).replace(os.sep, ".")
               for top in ("dmsolve", "preconditioners", "topology")
               for p in (ROOT / top).rglob("__init__.py")}
    entry = conf["project"]["entry-points"]["dmsolve.preconditioners"]
    assert_collective(comm, on_disk and on_disk <= shipped,
                      "packages a wheel would leave out: %s" % sorted(on_disk - shipped))
    assert_collective(comm, entry == {"preconditioners": "preconditioners"}, str(entry))


# -- other projects' public APIs ----------------------------------------------------------

def test_no_private_api_of_mpi4py_or_scipy(comm):
    """dmsolve uses no private API of mpi4py or scipy, but the one guarded exception."""
    # scipy's accumulating products are the one exception, imported and
    # guarded in dmsolve/_interop.py
    hits = []
    for package in PACKAGES:
        hits += [h for h in _matches(package, r"MPI\._[a-zA-Z]\w*|scipy(?:\.\w+)*\._[a-z]\w*")
                 if not h.startswith(os.path.join("dmsolve", "_interop.py") + ":")]
    assert_collective(comm, not hits, "private APIs of mpi4py or scipy: %s" % hits)


def test_import_under_python_OO_without_docstrings(comm):
    """The packages import under python -OO, without docstrings."""
    # docstring templates (krylov, gallery) must not assume a docstring exists
    proc = on_rank0(comm, subprocess.run,
                    [sys.executable, "-OO", "-c", "import dmsolve, preconditioners, topology"],
                    capture_output=True, text=True, timeout=300, env=child_env(), cwd=str(ROOT))
    assert_collective(comm, proc.returncode == 0, proc.stderr[-2000:])


def test_at_least_thirty_distinct_bad_input_cases():
    """The bad-input cases of the unit test files (their ``BAD_INPUTS``
    tables, read from the source) are at least thirty, with ids distinct
    across the suite."""
    ids = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BAD_INPUTS"
                                                    for t in node.targets):
                ids += [case.elts[0].value for case in node.value.elts]
    assert len(set(ids)) == len(ids) >= 30, ids
