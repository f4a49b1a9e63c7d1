"""The rules of docs/architecture.md hold for the whole checkout:
``tools/check_architecture.py`` (import cycles and imports inside functions,
numba imported only inside dmsolve/jit.py, private names across folders,
module and function sizes, hand-numbered message tags, domain-kind questions
outside topology's domains, machine paths and work-history words in any
tracked file) reports no problem."""

import importlib.util

from mpitest import ROOT, assert_collective, on_rank0


def _checker():
    """tools/check_architecture.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "check_architecture", ROOT / "tools" / "check_architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_architecture_reports_no_problem(comm):
    """check_code and check_words, run on rank 0 from the checkout's root,
    find nothing; on failure every problem is printed and named in the
    assertion."""
    def problems():
        checker = _checker()
        return checker.check_code(str(ROOT)) + checker.check_words(str(ROOT))

    found = on_rank0(comm, problems)
    if found and comm.rank == 0:
        print("\n".join(found))
    assert_collective(comm, not found, "%d architecture problem(s):\n%s"
                      % (len(found), "\n".join(found)))


def test_numba_is_imported_only_inside_dmsolve_jit(comm, tmp_path):
    """The checker flags numba imported anywhere but inside the functions of
    dmsolve/jit.py, and lets a function import scipy.linalg (a heavy module
    only some calls need) but not scipy.sparse."""
    def problems():
        (tmp_path / "dmsolve").mkdir()
        (tmp_path / "topology").mkdir()
        (tmp_path / "dmsolve" / "__init__.py").write_text("")
        (tmp_path / "dmsolve" / "jit.py").write_text(
            "import numba.core\n\ndef load():\n    import numba\n    return numba\n")
        (tmp_path / "topology" / "__init__.py").write_text("")
        (tmp_path / "topology" / "_kernel.py").write_text(
            "from numba import njit\n\n"
            "def solve():\n    import scipy.linalg as sla\n    from numba import types\n"
            "    import scipy.sparse\n    return sla, types, scipy.sparse\n")
        return sorted(_checker().check_code(str(tmp_path)))

    found = on_rank0(comm, problems)
    expected = [
        "dmsolve/jit.py:1: imports numba.core (kernels take njit from dmsolve.jit, which loads "
        "numba on their first call)",
        "topology/_kernel.py:1: imports numba (kernels take njit from dmsolve.jit, which loads "
        "numba on their first call)",
        "topology/_kernel.py:5: imports numba (kernels take njit from dmsolve.jit, which loads "
        "numba on their first call)",
        "topology/_kernel.py:6: imports scipy.sparse inside a function",
    ]
    assert_collective(comm, found == expected, "found %s" % found)
