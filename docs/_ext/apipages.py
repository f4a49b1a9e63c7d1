"""The API reference's pages, written from the public modules' ``__all__``.

One page per public module (``api/<module>.rst``): its docstring, then an
autosummary table per kind (classes, functions, exceptions, data) of the
names in its ``__all__``, each with a stub page, and a column that says
whether the call is collective, in the words of its docstring. Written at
every build (docs/conf.py), so a name added to ``__all__`` is in the
reference without anyone editing a page; tests/test_docs.py checks that
every public module is listed here.
"""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re

PACKAGES = ("dmsolve", "preconditioners", "topology")

# Every public module, in the reference's order (tests/test_docs.py checks
# that none is missing).
MODULES = [
    "dmsolve",
    "dmsolve.krylov",
    "dmsolve.bsp",
    "dmsolve.threads",
    "dmsolve.taskgraph",
    "dmsolve.gallery",
    "dmsolve.partition",
    "dmsolve.io",
    "dmsolve.checkpoint",
    "dmsolve.reproducible",
    "dmsolve.validate",
    "dmsolve.spgemm",
    "dmsolve.petsc",
    "dmsolve.cli",
    "preconditioners",
    "preconditioners.smoothers",
    "preconditioners.amg",
    "preconditioners.amg.strength",
    "preconditioners.amg.aggregate",
    "preconditioners.amg.tentative",
    "preconditioners.amg.smooth",
    "preconditioners.amg.galerkin",
    "preconditioners.amg.coarse",
    "preconditioners.amg.cycle",
    "preconditioners.amg.smoothed_aggregation",
    "preconditioners.amg.reproducible",
    "preconditioners.gemslr",
    "topology",
    "topology.io",
]

# Public modules left out of the reference, with the reason.
_STAGE = ("a stage of topology (docs/architecture.md): the names users need are re-exported "
          "by topology; the rest are the building blocks the stages above it share")
INTERNAL: dict[str, str] = {
    "topology.kernels": _STAGE,
    "topology.core": _STAGE,
    "topology.morse": _STAGE,
    "topology.persistence": _STAGE,
    "topology.outofcore": _STAGE,
    "topology.domains": _STAGE,
    "topology.signals": _STAGE,
    "dmsolve.jit": "the decorator the packages' numba kernels are declared with (numba "
                   "loads on a kernel's first call), not a call of the API",
}

_NOTE = re.compile(r"(?:Not collective|Collective)\b.*?\.(?=\s|$)", re.S)


def collective_note(obj) -> str:
    """What ``obj``'s docstring says about being collective: its first
    sentence that says so ("Collective on ``comm``.", "Not collective."),
    or "" if it says nothing (data, exceptions)."""
    docs = [inspect.getdoc(obj) or ""]
    if inspect.isclass(obj) and obj.__init__ is not object.__init__:
        docs.append(inspect.getdoc(obj.__init__) or "")
    for doc in docs:
        m = _NOTE.search(doc)
        if m:
            return " ".join(m.group(0).split())
    for doc in docs:
        for sentence in re.split(r"(?<=\.)\s+", doc):
            if "collective" in sentence.lower():
                return " ".join(sentence.split())
    return ""


def _kind(obj) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        return "exception" if issubclass(obj, BaseException) else "class"
    if callable(obj):
        return "function"
    return "data"


_TITLES = [("module", "Modules"), ("class", "Classes"), ("function", "Functions"),
           ("exception", "Exceptions"), ("data", "Data and registries")]


def canonical(obj, module: str, name: str) -> str:
    """The module whose page documents ``obj`` (exported by ``module`` as
    ``name``): the first of MODULES that exports the same object, so that a
    class or function exported by several modules has one page. Plain values
    (numbers, strings, tuples) are documented where they are exported."""
    if isinstance(obj, (int, float, str, bytes, tuple)):
        return module
    for other in MODULES:
        mod = importlib.import_module(other)
        if name in (getattr(mod, "__all__", None) or []) and getattr(mod, name) is obj:
            return other
    return module


def _comment_above(module: str, name: str) -> str:
    """The ``#`` comment lines right above ``name``'s assignment in the
    sources of ``module``'s package, joined; "" if none."""
    top = importlib.import_module(module.split(".")[0])
    assign = re.compile(r"^%s\s*(?::[^=]*)?=" % re.escape(name))
    for path in sorted(pathlib.Path(top.__file__).parent.rglob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if assign.match(line):
                above = []
                k = i - 1
                while k >= 0 and lines[k].lstrip().startswith("#"):
                    above.insert(0, lines[k].lstrip().lstrip("#:").strip())
                    k -= 1
                if above:
                    return " ".join(above)
    return ""


def _data(module: str, name: str, obj) -> list[str]:
    from dmsolve import Registry     # noqa: PLC0415 - the docs import dmsolve anyway
    if isinstance(obj, Registry):
        value = "Registry(%r, names=%s)" % (obj.kind, ", ".join(obj.names()) or "filled on use")
        text = ("The registry of %s names (a :class:`dmsolve.Registry`): look up, "
                "list and add by name." % obj.kind)
    else:
        value = repr(obj)
        text = _comment_above(module, name)
    lines = [".. py:data:: %s" % name, "   :value: %s" % " ".join(value.split())[:200], ""]
    if text:
        lines += ["   " + text.replace("`", "``").replace("````", "``"), ""]
    return lines


def page(module: str) -> str:
    """The reST text of ``module``'s reference page."""
    mod = importlib.import_module(module)
    names = list(getattr(mod, "__all__", None) or [])
    by_kind: dict[str, list[str]] = {}
    for name in names:
        by_kind.setdefault(_kind(getattr(mod, name)), []).append(name)
    lines = ["``%s``" % module, "=" * (len(module) + 4), "",
             ".. automodule:: %s" % module, "   :no-members:", "",
             ".. currentmodule:: %s" % module, ""]
    for kind, title in _TITLES:
        members = by_kind.get(kind)
        if not members:
            continue
        lines += [title, "-" * len(title), ""]
        if kind == "module":
            lines += ["- :mod:`%s.%s`" % (module, n) for n in members] + [""]
            continue
        if kind == "data":
            for n in members:
                lines += _data(module, n, getattr(mod, n))
            continue
        here = [n for n in members if canonical(getattr(mod, n), module, n) == module]
        elsewhere = [n for n in members if n not in here]
        if here:
            lines += [".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
            lines += ["   %s" % n for n in here] + [""]
        if elsewhere:
            lines += ["Also exported here (each documented once, where linked):", "",
                      ".. autosummary::", "   :nosignatures:", ""]
            for n in elsewhere:
                full = "%s.%s" % (canonical(getattr(mod, n), module, n), n)
                if full.startswith(module + "."):
                    full = full[len(module) + 1:]
                lines.append("   ~%s" % full)
            lines.append("")
    return "\n".join(lines)


def groups() -> list[tuple[str, str, list[str]]]:
    """The index's groups: ``(heading, what the group holds, its modules)``.
    The user modules come first, by package; the AMG set-up's stages (one
    module each, for a reader of the algorithm or a user who swaps a stage)
    under their own heading, last."""
    stages = [m for m in MODULES if m.startswith("preconditioners.amg.")]
    by_package = {pkg: [m for m in MODULES if m.split(".")[0] == pkg and m not in stages]
                  for pkg in PACKAGES}
    return [
        ("dmsolve", "Distributed vectors and matrices, the Krylov solvers, the BSP "
         "layer, threads and task graphs inside a rank, test problems, partitioning, files, checkpoints and the command line.",
         by_package["dmsolve"]),
        ("preconditioners", "Every preconditioner by name (``preconditioners.make``), "
         "the smoothers, algebraic multigrid and GeMSLR.", by_package["preconditioners"]),
        ("topology", "Grids and simplicial complexes, and the analyses of a field on them "
         "(critical points, persistence, merge trees, components, Hodge decomposition).",
         by_package["topology"]),
        ("Inside AMG: the set-up's stages", "One module per stage of smoothed "
         "aggregation (strength, aggregation, tentative prolongator, its smoothing, "
         "the Galerkin product, the coarse solve, the cycle) and the two hierarchies "
         "built from them. ``preconditioners.make(\"amg\", A)`` is all most users "
         "need; these pages are for reading the algorithm or replacing a stage.", stages),
    ]


def summary(module: str) -> str:
    """The first sentence of ``module``'s docstring, on one line."""
    doc = importlib.import_module(module).__doc__ or ""
    text = " ".join(doc.strip().split("\n\n")[0].split())
    sentence = re.split(r"(?<=\.)\s", text, maxsplit=1)[0]
    sentence = sentence.removeprefix(module + ": ")      # "dmsolve: dmsolve: ..."
    return sentence.rstrip(":").rstrip(",") if sentence else ""


def index() -> str:
    """The reST text of the reference's index: the modules, grouped."""
    lines = ["API reference", "=============", "",
             "One page per public module: its docstring, then tables of its classes, "
             "functions, exceptions and data, each name linked to its own page. On "
             "each module's page, the tables' *Collective?* column quotes each call's "
             "docstring: a collective "
             "call must be made by every rank of the communicator it names, in the "
             "same order; a call that is not collective may be made by any rank "
             "alone.", ""]
    for title, text, modules in groups():
        lines += [title, "-" * len(title), "", text, ""]
        lines += ["- :mod:`%s`: %s" % (m, summary(m)) for m in modules] + [""]
        lines += [".. toctree::", "   :hidden:", "", *("   %s" % m for m in modules), ""]
    return "\n".join(lines)


def write_pages(outdir) -> list[pathlib.Path]:
    """Write ``index.rst`` and one page per module into ``outdir``; pages
    whose text did not change are left alone (Sphinx then does not re-read
    them). Returns the paths."""
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    texts = {"index": index()}
    texts.update({m: page(m) for m in MODULES})
    paths = []
    for name, text in texts.items():
        path = outdir / (name + ".rst")
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        paths.append(path)
    return paths
