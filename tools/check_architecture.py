"""Check the shape of the code: the rules of docs/architecture.md.

Run ``python tools/check_architecture.py`` from the checkout (no MPI, no
imports of the packages: it reads their source). It prints every breach and
exits 1 if there is one. The rules:

- no import cycle among the modules of dmsolve, preconditioners and topology,
  counting imports inside functions; a function imports only optional
  extras (petsc4py, matplotlib, ...), never the project's own modules;
- numba is imported in one place, inside the functions of dmsolve/jit.py
  (kernels are declared with ``dmsolve.jit.njit`` and made on their first
  call), so that importing the packages loads no numba;
- the subpackages import one way (no cycle among folders either), and no
  private name (``_x``) is imported from another subpackage;
- no module over 800 lines unless it is a numba kernel file (every function
  in it compiled by numba); no function over 150 lines and none with more
  than 8 positional parameters, numba kernels aside;
- in topology, only the domain kinds ask what kind a domain is;
- no file in the tree holds a machine path or an account of who worked when.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import defaultdict

PACKAGES = ("dmsolve", "preconditioners", "topology")
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 150
MAX_POSITIONAL = 8
#: Third-party modules a function may import at call time: optional extras,
#: and heavy modules only some calls need, which would otherwise load with
#: ``import dmsolve`` or ``import topology`` (scipy.linalg and the scipy
#: modules that import it, about 10 MiB; meshio, 4 MiB and 30 ms; xml.sax,
#: which loads urllib, 30 ms). A name covers its submodules.
LAZY_ALLOWED = ("petsc4py", "matplotlib", "pyamg", "gudhi", "schurilu", "networkx",
                "sphinx", "psutil", "resource",
                "scipy.linalg", "scipy.sparse.linalg", "scipy.sparse.csgraph", "meshio",
                "xml.sax")
#: The one module that imports numba, at a kernel's first call.
JIT_MODULE = "dmsolve/jit.py"
#: In topology, the folder whose classes may ask what kind a domain is.
DOMAIN_FOLDER = "topology/domains"
#: Attributes whose test is a question about a domain's kind.
KIND_ATTRIBUTES = ("cubical", "out_of_core", "virtual_planes")
#: Words of a work history, and machine paths.
FORBIDDEN = [
    (re.compile(r"/(work|root|home|Users)/[A-Za-z0-9_.-]+"), "a machine path"),
    (re.compile(r"/tmp/[A-Za-z0-9_.-]"), "a machine path"),
    (re.compile(r"\bsessions?\b", re.I), "an account of who worked when"),
    (re.compile(r"\bhelper (session|agent)s?\b", re.I), "an account of who worked when"),
    (re.compile(r"\bstop \d+\b", re.I), "an account of who worked when"),
    (re.compile(r"\bissues? ?#?\d+\b", re.I), "an issue number"),
    (re.compile(r"\btickets?\b", re.I), "an issue number"),
    (re.compile(r"\bworktrees?\b", re.I), "a branch or work tree"),
]
#: Files the forbidden-word check skips: this file states the rules.
FORBIDDEN_SKIP = ("tools/check_architecture.py",)
#: The one table of raw MPI tags (BSP contexts hand out theirs with ``ctx.tags``).
TAG_TABLE = "dmsolve/bsp/_comm.py"


def module_name(path: str) -> str:
    name = path[:-3].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def source_files(root: str) -> dict[str, str]:
    """Module name -> path of every .py file of the packages."""
    mods = {}
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, pkg)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("__", ".")))
            for f in sorted(filenames):
                if f.endswith(".py"):
                    path = os.path.join(dirpath, f)
                    mods[module_name(os.path.relpath(path, root))] = path
    return mods


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([target] if target else []))


def _is_kernel(node) -> bool:
    """Whether a function is compiled by numba (``@njit``, ``@jit``, ...)."""
    for dec in node.decorator_list:
        text = ast.unparse(dec)
        if re.search(r"\b(njit|jit|vectorize|guvectorize|cfunc|generated_jit|overload)\b", text):
            return True
    return False


class Module:
    """What the checks need of one source file."""

    def __init__(self, name: str, path: str, mods: dict[str, str]):
        self.name = name
        self.path = path
        self.is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as f:
            self.text = f.read()
        self.lines = self.text.count("\n")
        self.tree = ast.parse(self.text, path)
        self.imports = []       # (target module, imported names, line, inside a function)
        self.functions = []     # (node, is numba kernel)
        self._walk(self.tree, False, mods)

    def _walk(self, node, in_function: bool, mods) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.append((child, _is_kernel(child)))
                self._walk(child, True, mods)
                continue
            if isinstance(child, ast.Import):
                for a in child.names:
                    self.imports.append((a.name, [], child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(self.name, self.is_package, child.level, child.module)
                for a in child.names:
                    sub = base + "." + a.name
                    if sub in mods:
                        # a module imported by name: its name counts as imported
                        self.imports.append((sub, [a.name], child.lineno, in_function))
                    else:
                        self.imports.append((base, [a.name], child.lineno, in_function))
            self._walk(child, in_function, mods)

    @property
    def is_kernel_file(self) -> bool:
        return bool(self.functions) and all(k for _, k in self.functions)


def _lazy_allowed(target: str) -> bool:
    """Whether a function may import ``target`` (see LAZY_ALLOWED)."""
    return any(target == name or target.startswith(name + ".") for name in LAZY_ALLOWED)


def _own(target: str, mods: dict[str, str]) -> str | None:
    """The project module an import lands in (the longest known prefix)."""
    while target:
        if target in mods:
            return target
        target = target.rpartition(".")[0]
    return None


def _folder(module: Module) -> str:
    return module.name if module.is_package else module.name.rpartition(".")[0]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_code(root: str) -> list[str]:
    mods = source_files(root)
    modules = {name: Module(name, path, mods) for name, path in mods.items()}
    problems = []
    edges: dict[str, set[str]] = defaultdict(set)
    folder_edges: dict[str, set[str]] = defaultdict(set)
    for m in modules.values():
        rel = os.path.relpath(m.path, root)
        for target, names, line, in_function in m.imports:
            own = _own(target, mods)
            if own is None:
                top = target.split(".")[0]
                if top == "numba":
                    if rel != JIT_MODULE or not in_function:
                        problems.append("%s:%d: imports %s (kernels take njit from dmsolve.jit, "
                                        "which loads numba on their first call)"
                                        % (rel, line, target))
                    continue
                if in_function and not _lazy_allowed(target):
                    problems.append("%s:%d: imports %s inside a function" % (rel, line, target))
                continue
            if in_function:
                problems.append("%s:%d: imports the project's %s inside a function"
                                % (rel, line, own))
            if own == m.name:
                continue
            edges[m.name].add(own)
            src, dst = _folder(m), _folder(modules[own])
            if own == src:
                # the folder's own __init__: the same folder
                dst = src
            if src != dst and not src.startswith(dst + "."):
                folder_edges[src].add(dst)
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                if private and src.split(".")[0] == dst.split(".")[0]:
                    problems.append("%s:%d: imports private %s from another subpackage (%s)"
                                    % (rel, line, ", ".join(private), own))
        for node, kernel in m.functions:
            if kernel:
                continue
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                problems.append("%s:%d: %s is %d lines (at most %d)"
                                % (rel, node.lineno, node.name, length, MAX_FUNCTION_LINES))
            args = node.args.posonlyargs + node.args.args
            npos = len(args) - (1 if args and args[0].arg in ("self", "cls") else 0)
            if npos > MAX_POSITIONAL:
                problems.append("%s:%d: %s takes %d positional parameters (at most %d)"
                                % (rel, node.lineno, node.name, npos, MAX_POSITIONAL))
        if m.lines > MAX_MODULE_LINES and not m.is_kernel_file:
            problems.append("%s: %d lines (at most %d outside numba kernel files)"
                            % (rel, m.lines, MAX_MODULE_LINES))
        if m.name.startswith("topology.") and not rel.startswith(DOMAIN_FOLDER):
            problems += _kind_tests(m, rel)
        if rel != TAG_TABLE:
            problems += _numbered_tags(m, rel)
    for comp in _cycles(edges):
        problems.append("import cycle among modules: " + " -> ".join(comp))
    for comp in _cycles(folder_edges):
        problems.append("import cycle among folders: " + " -> ".join(comp))
    return problems


def _kind_tests(m: Module, rel: str) -> list[str]:
    """Places where topology code outside the domain kinds asks a domain's kind."""
    out = []
    for node in ast.walk(m.tree):
        if isinstance(node, ast.Attribute) and node.attr in KIND_ATTRIBUTES:
            out.append("%s:%d: asks .%s (a domain's kind is its type)"
                       % (rel, node.lineno, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant)
              and node.args[1].value in KIND_ATTRIBUTES + ("stencil",)):
            out.append("%s:%d: asks %s(..., %r) (a domain's kind is its type)"
                       % (rel, node.lineno, node.func.id, node.args[1].value))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) \
                and node.left.attr == "stencil" and any(isinstance(c, ast.Constant)
                                                        and c.value is None
                                                        for c in node.comparators):
            out.append("%s:%d: asks whether .stencil is None (a domain's kind is its type)"
                       % (rel, node.lineno))
    return out


#: BSP calls that take a message tag, and the position of the tag argument
TAG_CALLS = {"send": 2, "send_rows": 2, "send_keyed": 0, "concat": 0, "concat_with_sources": 0,
             "messages": 0, "reduced": 0, "from_source": 1, "sources": 0}


def _numbered_tags(m: Module, rel: str) -> list[str]:
    """BSP message tags numbered by hand: an int literal, or a module-level
    int constant, where a BSP call takes its tag."""
    consts = set()
    for node in m.tree.body:
        if isinstance(node, ast.Assign):
            targets = []
            for t in node.targets:
                targets += t.elts if isinstance(t, ast.Tuple) else [t]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for t, v in zip(targets, values):
                if isinstance(t, ast.Name) and isinstance(v, ast.Constant) \
                        and isinstance(v.value, int) and not isinstance(v.value, bool):
                    consts.add(t.id)

    def hand_numbered(expr) -> bool:
        if isinstance(expr, ast.BinOp):
            return hand_numbered(expr.left) or hand_numbered(expr.right)
        if isinstance(expr, ast.Constant):
            return isinstance(expr.value, int) and not isinstance(expr.value, bool)
        return isinstance(expr, ast.Name) and expr.id in consts

    out = []
    for node in ast.walk(m.tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in TAG_CALLS):
            continue
        pos = TAG_CALLS[node.func.attr]
        tag = next((kw.value for kw in node.keywords if kw.arg == "tag"), None)
        if tag is None and len(node.args) > pos:
            tag = node.args[pos]
        if tag is not None and hand_numbered(tag):
            out.append("%s:%d: a message tag numbered by hand (%s); take it from ctx.tags"
                       % (rel, node.lineno, ast.unparse(tag)))
    return out


def tracked_files(root: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
    return [f for f in out.stdout.decode().split("\0") if f]


def check_words(root: str) -> list[str]:
    problems = []
    for rel in tracked_files(root):
        if rel in FORBIDDEN_SKIP:
            continue
        path = os.path.join(root, rel)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern, what in FORBIDDEN:
                hit = pattern.search(line)
                if hit:
                    problems.append("%s:%d: %s (%r)" % (rel, lineno, what, hit.group(0)))
    return problems


def main(argv=None) -> int:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check_code(root) + check_words(root)
    for p in problems:
        print(p)
    print("%d problem%s" % (len(problems), "" if len(problems) == 1 else "s"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
