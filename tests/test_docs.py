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

from docutils import nodes
from docutils.core import publish_doctree

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools"))
import apipages  # noqa: E402  (docs/_ext is not a package)
import check_architecture  # noqa: E402  (nor are bench/ and tools/)
import examplepages  # noqa: E402
import run_all  # noqa: E402

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


def test_the_reference_index_groups_user_modules_before_amg_stages(comm):
    """The reference's index lists each module once, under its package's
    heading, the user modules first and AMG's internal stages under a heading
    of their own, last; it says the *Collective?* column is on the modules'
    pages, not on the index."""
    text = apipages.index()
    headings = re.findall(r"^(.+)\n-+\n", text, re.M)
    sections = dict(zip(headings, re.split(r"^.+\n-+\n", text, flags=re.M)[1:]))
    listed = {h: re.findall(r"^- :mod:`([\w.]+)`", body, re.M) for h, body in sections.items()}
    stages = [m for m in apipages.MODULES if m.startswith("preconditioners.amg.")]
    problems = []
    if headings[:3] != ["dmsolve", "preconditioners", "topology"] or len(headings) != 4:
        problems.append("headings %s" % headings)
    if sorted(sum(listed.values(), [])) != sorted(apipages.MODULES):
        problems.append("not every module exactly once: %s" % listed)
    if listed.get(headings[-1]) != stages or len(stages) < 7:
        problems.append("the last heading holds %s, not the AMG stages" % listed.get(headings[-1]))
    for h in headings[:3]:
        if any(m.split(".")[0] != h or m in stages for m in listed[h]):
            problems.append("%s holds %s" % (h, listed[h]))
    if "*Collective?* column" in text and "each module's page" not in text:
        problems.append("the index names a Collective? column it does not have")
    assert_collective(comm, not problems, "; ".join(problems))


def _rendered(rst: str):
    """``rst`` parsed by docutils with smart quotes on, as Sphinx renders it."""
    return publish_doctree(rst, settings_overrides={
        "smart_quotes": True, "report_level": 5, "halt_level": 5})


def test_example_pages_show_command_lines_as_literal_code(comm):
    """Every command line of an example's page is literal code: smart quotes
    would make ``--n`` an en dash, and the copied command would fail. Each
    page's docstring part is rendered as Sphinx renders it."""
    problems = []
    for name, argv, figures, gist in examplepages.EXAMPLES:
        md = examplepages.page(name, argv, figures, gist, "printed")
        rst = md.split("```{eval-rst}\n", 1)[1].split("\n```\n", 1)[0]
        tree = _rendered(rst)
        literal = "\n".join(n.astext() for n in tree.findall(nodes.literal_block))
        prose = [n.astext() for n in tree.findall(nodes.Text)
                 if not isinstance(n.parent, (nodes.literal_block, nodes.literal))]
        if "mpiexec" not in literal or any("mpiexec" in t or "\u2013" in t for t in prose):
            problems.append("%s: %r" % (name, [t for t in prose if "mpiexec" in t
                                                or "\u2013" in t][:2]))
        title = md.splitlines()[0]
        if not title.startswith("# ") or title.rstrip().endswith(","):
            problems.append("%s: a title cut short: %r" % (name, title))
    assert_collective(comm, not problems, "; ".join(problems))


def _toctree(path: pathlib.Path) -> list[str]:
    """The entries of every toctree of a Markdown page."""
    entries = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", path.read_text(), re.S):
        entries += [line.strip() for line in block.splitlines()
                    if line.strip() and not line.startswith(":")]
    return entries


def test_every_page_is_in_a_section_so_its_navigation_is_not_empty(comm):
    """The site's root lists sections only (each an index page with a
    toctree), and every guide, design note and measurement page is in a
    section: the theme's section navigation lists a page's section, so a
    page hung off the root has an empty one."""
    docs = ROOT / "docs"
    root = _toctree(docs / "index.md")
    problems = ["the root lists a page, not a section: %s" % e
                for e in root if not e.endswith("/index")]
    in_sections = set()
    for section in root:
        path = docs / (section + ".md")
        if not path.exists():                # written at build time (examples, api)
            continue
        folder = pathlib.PurePosixPath(section).parent
        for entry in _toctree(path):
            in_sections.add(entry.lstrip("/") if entry.startswith("/")
                            else str(folder / entry))
    pages = [p for p in [*docs.glob("*.md"), *docs.glob("guide/*.md"), *docs.glob("design/*.md")]
             if p.name != "index.md"]
    for p in pages:
        name = str(p.relative_to(docs).with_suffix(""))
        if name not in in_sections:
            problems.append("%s is in no section" % name)
    assert_collective(comm, not problems, "; ".join(problems))


def test_solve_your_own_matrix_is_linked_from_the_index_and_the_first_solve(comm):
    """The "Solve your own matrix" page is linked from the site's index and
    from the first solve's "Next", which points at pages of the site only."""
    docs = ROOT / "docs"
    index = (docs / "index.md").read_text()
    first = (docs / "guide" / "first-solve.md").read_text()
    nxt = first.split("## Next", 1)[-1]
    page = (docs / "guide" / "own-matrix.md").read_text()
    problems = []
    if "(guide/own-matrix.md)" not in index:
        problems.append("index.md does not link guide/own-matrix.md")
    if "(own-matrix.md)" not in nxt:
        problems.append("first-solve's Next does not link own-matrix.md")
    if "README" in nxt:
        problems.append("first-solve's Next points at the README, not on the site")
    if "own-matrix" not in _toctree(docs / "guide" / "index.md"):
        problems.append("own-matrix is not in the guide's toctree")
    for needed in ("dmsolve.solve(S, b", "read_matrix", ".gather(", "write_vector",
                   "python -m dmsolve solve --matrix"):
        if needed not in page:
            problems.append("own-matrix.md does not show %s" % needed)
    assert_collective(comm, not problems, "; ".join(problems))


#: The tracker references the code-shape check refuses in the tree (one list)
TRACKER = [pattern for pattern, what in check_architecture.FORBIDDEN
           if what == "an issue number"]


def test_benchmark_headings_carry_no_tracker_numbers(comm):
    """The measurement pages' headings, and the section titles
    bench/run_all.py writes them from, name what is measured, not a tracker
    entry a reader cannot see."""
    titles = [title for *_, title in run_all.BENCHMARKS.values()]
    for page in ["benchmarks.md", "scaling.md", "scaling-n20.md"]:
        titles += re.findall(r"^#+ (.*)$", (ROOT / "docs" / page).read_text(), re.M)
    bad = [t for t in titles if any(p.search(t) for p in TRACKER)]
    assert_collective(comm, TRACKER and titles and not bad,
                      "headings with tracker numbers: %s" % bad)


def test_wide_tables_scroll_instead_of_being_clipped(comm):
    """The site's style sheet lets a wide table scroll sideways and wraps
    long cells, and docs/conf.py loads it."""
    conf = (ROOT / "docs" / "conf.py").read_text()
    css = ROOT / "docs" / "_static" / "dmsolve.css"
    text = css.read_text() if css.exists() else ""
    problems = []
    if not re.search(r'html_static_path = \["_static"\]', conf) \
            or "dmsolve.css" not in conf:
        problems.append("docs/conf.py does not load _static/dmsolve.css")
    if not re.search(r"pst-scrollable-table-container\s*\{[^}]*overflow-x:\s*auto", text):
        problems.append("no sideways scroll for tables")
    if not re.search(r"td[^{]*\{[^}]*overflow-wrap", text):
        problems.append("long cells do not wrap")
    assert_collective(comm, not problems, "; ".join(problems))


def test_make_docs_says_what_it_is_doing(comm, tmp_path, monkeypatch):
    """``make docs`` runs for minutes: it names each stage (the Makefile,
    with the time it took here), and the examples' runs report one line
    each (docs/conf.py passes a ``report``)."""
    monkeypatch.setattr(examplepages, "OUT", tmp_path)
    monkeypatch.setattr(examplepages, "run", lambda name, argv, figures: "printed\n")
    lines: list[str] = []
    examplepages.write_pages(report=lines.append)
    names = [n for n, *_ in examplepages.EXAMPLES]
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", makefile, re.M)
    problems = []
    if len(lines) != len(names) or not all(
            "examples/%s.py" % n in line and "%d/%d" % (k, len(names)) in line
            for k, (n, line) in enumerate(zip(names, lines), 1)):
        problems.append("the examples' lines: %s" % lines)
    if "report=" not in (ROOT / "docs" / "conf.py").read_text():
        problems.append("docs/conf.py does not pass a report to write_pages")
    if not recipe or not re.search(r'@echo "docs: .*\d+ s', recipe.group(1)):
        problems.append("make docs does not say how long it takes: %r"
                        % (recipe.group(1) if recipe else None))
    assert_collective(comm, not problems, "; ".join(problems))
