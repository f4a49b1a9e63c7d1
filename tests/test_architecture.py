"""The rules of docs/architecture.md hold for the whole checkout:
``tools/check_architecture.py`` (import cycles and imports inside functions,
private names across folders, module and function sizes, hand-numbered message
tags, domain-kind questions outside topology's domains, machine paths and
work-history words in any tracked file) reports no problem."""

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
