"""The code blocks of a Markdown page, and the scripts that run them.

The rules a page's fenced blocks follow (tests/test_docs.py runs them):

- A ``python`` block runs. All the ``python`` blocks of one page run in
  order, as one script (names carry over from block to block), under
  ``mpiexec -n 2`` (``<!-- ranks: N -->`` anywhere in the page says N), in
  a fresh directory. Only rank 0 prints.
- A line ``print(...)  # TEXT`` checks that the line prints ``TEXT`` on rank 0.
- A ``text`` block right after a ``python`` block (blank lines between
  them at most) is what that block prints on rank 0; a ``text`` block right
  after a ``sh`` block is what its last command prints. The lines must come
  out in that order (others may come between them); a line ``...`` matches
  any lines, and a time (``0.105 s``) matches any time.
- A ``sh`` block runs line by line after the page's script, in the same
  directory: ``python ARGS`` and ``mpiexec -n N python ARGS`` (ARGS starting
  with ``-m dmsolve``, ``-m mpi4py`` or ``examples/``) are the commands it
  knows; a ``#`` comment or a blank line is skipped.
- A block that cannot run in the suite (``make``, a cluster's ``srun``,
  ``pip``, a file format) says why in the line right before it:
  ``<!-- not run: REASON -->``. Any other block fails the test.
"""

from __future__ import annotations

import dataclasses
import re
import shlex

FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*(\{[\w-]+\}|[\w+-]*)[^\n]*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(\S.*?)\s*-->\s*$")
RANKS = re.compile(r"<!--\s*ranks:\s*(\d+)\s*-->")
PRINT_CHECK = re.compile(r"^(\s*)print\((.*)\)\s*#\s*(\S.*?)\s*$")
COMMAND = re.compile(r"^(?:mpiexec -n (\d+) )?python (.*)$")
TIME = re.compile(r"\b\d+(?:\.\d+)?(?:e[-+]?\d+)? s\b")


@dataclasses.dataclass
class Block:
    """One fenced block: its language, text, first line number (1-based), and
    why it is not run (None when it runs)."""
    lang: str
    text: str
    line: int
    not_run: str | None
    follows: "Block | None" = None     # the block right before it, if only blank lines between


def blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown``, in order. Not collective."""
    lines = markdown.splitlines()
    out: list[Block] = []
    i = 0
    last_end = None          # the line after the previous block's closing fence
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        body = "\n".join(line[indent:] for line in lines[i + 1:j])
        before = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        why = NOT_RUN.match(before)
        follows = None
        if out and last_end is not None and all(not s.strip() for s in lines[last_end:i]):
            follows = out[-1]
        out.append(Block(lang, body, i + 1, why.group(1) if why else None, follows))
        last_end = j + 1
        i = j + 1
    return out


def ranks(markdown: str) -> int:
    """The ranks a page's script runs on (2 unless the page says). Not collective."""
    m = RANKS.search(markdown)
    return int(m.group(1)) if m else 2


def marker(block: Block) -> str:
    return "@@ block at line %d @@" % block.line


PRELUDE = '''\
import os as _os, sys as _sys
from mpi4py import MPI as _MPI
if _MPI.COMM_WORLD.rank != 0:
    _sys.stdout = open(_os.devnull, "w")
_doc_mismatches = []


def _doc_print(_expected, *args, **kwargs):
    _got = " ".join(str(a) for a in args)
    print(*args, **kwargs)
    if _MPI.COMM_WORLD.rank == 0 and _got != _expected:      # what the page shows: rank 0
        _doc_mismatches.append("printed %r where the page says %r" % (_got, _expected))

'''

EPILOGUE = '''
if _doc_mismatches:
    print("@@ mismatches @@")
    print("\\n".join(_doc_mismatches))
    _sys.stdout.flush()
    _MPI.COMM_WORLD.Abort(3)
'''


def script(page: list[Block]) -> str:
    """The script that runs a page's ``python`` blocks in order, printing a
    marker before each, and checking its ``print(...)  # TEXT`` lines. Not collective."""
    parts = [PRELUDE]
    for block in page:
        if block.lang != "python" or block.not_run:
            continue
        parts.append("print(%r, flush=True)\n" % marker(block))
        for line in block.text.splitlines():
            m = PRINT_CHECK.match(line)
            if m:
                line = "%s_doc_print(%r, %s)" % (m.group(1), m.group(3), m.group(2))
            parts.append(line + "\n")
        parts.append("_sys.stdout.flush()\n")
    parts.append(EPILOGUE)
    return "".join(parts)


def split_output(page: list[Block], output: str) -> dict[int, str]:
    """What each ``python`` block printed, by the block's line. Not collective."""
    found: dict[int, str] = {}
    starts = []
    for block in page:
        if block.lang == "python" and not block.not_run:
            pos = output.find(marker(block))
            if pos >= 0:
                starts.append((pos, block))
    starts.sort(key=lambda s: s[0])
    for k, (pos, block) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(output)
        text = output[pos + len(marker(block)):end]
        found[block.line] = text.split("@@ mismatches @@")[0]
    return found


def commands(block: Block) -> list[tuple[int, list[str]]]:
    """``(ranks, argv after python)`` of each line of a ``sh`` block; a line
    it cannot run raises ValueError. Not collective."""
    out = []
    for line in block.text.splitlines():
        line = line.split("  #")[0].strip()
        if not line or line.startswith("#"):
            continue
        m = COMMAND.match(line)
        argv = shlex.split(m.group(2)) if m else []
        if not m or not argv or not (argv[:2] in (["-m", "dmsolve"], ["-m", "mpi4py"])
                                     or argv[0].startswith("examples/")):
            raise ValueError("line %d: cannot run %r; say why before the block with "
                             "<!-- not run: REASON -->" % (block.line, line))
        out.append((int(m.group(1) or 1), argv))
    return out


def _normal(line: str) -> str:
    return TIME.sub("<time>", line.rstrip())


def missing_lines(expected: str, output: str) -> list[str]:
    """The lines of ``expected`` that ``output`` does not print in order
    (``...`` matches any lines, a time any time). Not collective."""
    got = [_normal(line) for line in output.splitlines()]
    pos = 0
    missing = []
    for line in expected.splitlines():
        want = _normal(line)
        if want.strip() in ("...", ""):
            continue
        try:
            pos = got.index(want, pos) + 1
        except ValueError:
            missing.append(line)
    return missing
