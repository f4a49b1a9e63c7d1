"""Every code block of README.md and the guides runs here, so none can go stale.

The rules a page follows are in tests/docblocks.py: a page's ``python`` blocks
run in order as one script in a child ``mpiexec -n 2`` job, a ``text`` block
right after a block is what it must print, ``print(...)  # TEXT`` checks one
line, a ``sh`` block's ``python``/``mpiexec`` lines run after the script, and
a block that cannot run here says why (``<!-- not run: REASON -->``).

Also here: every public module is in the API reference (docs/_ext/apipages.py
writes it from the modules' ``__all__``).
"""

import importlib
import pathlib
import pkgutil
import re
import sys

import pytest

import docblocks
from mpitest import ROOT, Checks, assert_collective, run_mpi_job

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import apipages  # noqa: E402  (docs/_ext is not a package)

pytestmark = pytest.mark.timeout(600)

# README.md and the guides: every Markdown page of docs/ a person reads
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                *(ROOT / "docs" / "guide").glob("*.md")])
RUNS = ("python", "sh", "text")


def _id(path: pathlib.Path) -> str:
    return str(path.relative_to(ROOT))


def _examples_absolute(argv):
    return [str(ROOT / a) if a.startswith("examples/") else a for a in argv]


@pytest.mark.parametrize("path", PAGES, ids=_id)
def test_every_block_is_run_or_says_why(comm, path):
    """A page's blocks are all of a kind the runner knows, or say why not."""
    problems = []
    for block in docblocks.blocks(path.read_text()):
        if block.not_run or block.lang.startswith("{"):     # a MyST directive, not code
            continue
        if block.lang not in RUNS:
            problems.append("line %d: a %r block; mark it <!-- not run: REASON -->"
                            % (block.line, block.lang))
        elif block.lang == "text" and (block.follows is None or block.follows.lang == "text"
                                       or block.follows.not_run):
            problems.append("line %d: a text block that follows no block that runs"
                            % block.line)
        elif block.lang == "sh":
            try:
                docblocks.commands(block)
            except ValueError as e:
                problems.append(str(e))
    assert_collective(comm, not problems, "%s: %s" % (_id(path), "; ".join(problems)))


def _pages_with_code():
    return [p for p in PAGES
            if any(not b.not_run and b.lang in ("python", "sh")
                   for b in docblocks.blocks(p.read_text()))]


@pytest.mark.parametrize("path", _pages_with_code(), ids=_id)
def test_page_runs_and_prints_what_it_says(comm, shared_tmp_path, path):
    """Every code block of the page runs and prints what the page says."""
    text = path.read_text()
    page = docblocks.blocks(text)
    checks = Checks(comm)
    runs = [b for b in page if not b.not_run]
    printed: dict[int, str] = {}
    if any(b.lang == "python" for b in runs):
        script = shared_tmp_path / "page.py"
        if comm.rank == 0:
            script.write_text(docblocks.script(page))
        code, out, _ = run_mpi_job(comm, docblocks.ranks(text), ["-m", "mpi4py", script],
                                   cwd=shared_tmp_path, timeout=500)
        checks.add(code == 0, "the page's python blocks run", out[-3000:])
        printed = docblocks.split_output(page, out)
        checks.add("@@ mismatches @@" not in out, "print(...)  # TEXT lines",
                   out.split("@@ mismatches @@")[-1][:2000])
    for block in runs:
        if block.lang != "sh":
            continue
        out = ""                                    # what the block's last command printed
        for nprocs, argv in docblocks.commands(block):
            code, out, _ = run_mpi_job(comm, nprocs, _examples_absolute(argv),
                                       cwd=shared_tmp_path, timeout=300)
            checks.add(code == 0, "line %d: %s" % (block.line, " ".join(argv)), out[-2000:])
        printed[block.line] = out
    for block in runs:
        if block.lang == "text" and block.follows is not None:
            got = printed.get(block.follows.line, "")
            missing = docblocks.missing_lines(block.text, got)
            checks.add(not missing, "line %d: the output the page shows" % block.line,
                       "not printed: %r; printed:\n%s" % (missing[:5], got[-2000:]))
    checks.assert_all()


def test_runner_catches_a_wrong_figure(comm, shared_tmp_path):
    """The runner fails a page whose printed figure is wrong (seen failing)."""
    page = docblocks.blocks("```python\nprint(2 + 2)  # 5\n```\n\n"
                            "```python\nprint('a'); print('b')\n```\n\n```text\nb\na\n```\n")
    script = shared_tmp_path / "wrong.py"
    if comm.rank == 0:
        script.write_text(docblocks.script(page))
    code, out, _ = run_mpi_job(comm, 1, ["-m", "mpi4py", script], cwd=shared_tmp_path)
    printed = docblocks.split_output(page, out)
    assert_collective(comm, code != 0 and "printed '4' where the page says '5'" in out, out)
    assert_collective(comm, docblocks.missing_lines(page[2].text, printed[page[1].line])
                      == ["a"], repr(printed))
    with pytest.raises(ValueError, match="not run"):
        docblocks.commands(docblocks.blocks("```sh\nmake demo\n```\n")[0])


# -- the API reference ---------------------------------------------------------------------

def _public_modules():
    """Every module of our packages a user may import: no part of its
    dotted name starts with an underscore."""
    names = []
    for package in apipages.PACKAGES:
        names.append(package)
        mod = importlib.import_module(package)
        for info in pkgutil.walk_packages(mod.__path__, package + "."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def test_every_public_module_is_in_the_reference(comm):
    """Every public module is in the API reference."""
    listed = set(apipages.MODULES)
    missing = [m for m in _public_modules() if m not in listed and m not in apipages.INTERNAL]
    assert_collective(comm, not missing, "public modules missing from docs/_ext/apipages.py "
                      "MODULES (or INTERNAL, with a reason): %s" % missing)


def test_every_public_name_is_in_the_reference(comm, tmp_path):
    """Every public name is in the API reference."""
    apipages.write_pages(tmp_path)
    missing = []
    for module in apipages.MODULES:
        text = (tmp_path / (module + ".rst")).read_text()
        for name in getattr(importlib.import_module(module), "__all__", None) or []:
            entry = re.compile(r"^(   (~[\w.]+\.)?%s|\.\. py:data:: %s|- :mod:`%s\.%s`)$"
                               % (re.escape(name), re.escape(name), re.escape(module), re.escape(name)), re.M)
            if not entry.search(text):
                missing.append("%s.%s" % (module, name))
    assert_collective(comm, not missing, "not in the reference: %s" % missing)


def test_the_collective_column_quotes_the_docstring(comm):
    """The reference's collective column quotes each docstring's note."""
    import dmsolve
    import topology
    notes = {name: apipages.collective_note(obj) for name, obj in
             [("cg", dmsolve.cg), ("Layout.block", dmsolve.Layout.block),
              ("block_range", dmsolve.block_range), ("Grid", topology.Grid)]}
    assert_collective(comm, notes["cg"].startswith("Collective on"), repr(notes))
    assert_collective(comm, notes["block_range"].lower().endswith("not collective."), repr(notes))
    assert_collective(comm, notes["Grid"].startswith("Collective"), repr(notes))
