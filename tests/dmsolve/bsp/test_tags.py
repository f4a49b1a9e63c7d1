"""Message tags by name (``ctx.tags``): fresh, named and agreed across ranks,
apart from the plain tags, refused when badly named or exhausted; and no
module of dmsolve or preconditioners numbers a tag by hand.

Every test runs on both exchanges of BSP.sync (dense and sparse, forced
through DMSOLVE_BSP_EXCHANGE, which BSP reads at construction)."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.bsp import BSP
from mpitest import ROOT, Checks, assert_collective, assert_raises_collective, same_on_all_ranks

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP built in the test uses."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


# -- tags by name ------------------------------------------------------------------------

def test_tags_are_fresh_named_and_agree_across_ranks():
    """ctx.tags hands out fresh tags, by name, the same on every rank."""
    ctx = BSP(COMM)
    first = ctx.tags("edges", "records")
    second = ctx.tags("edges")                  # the same name again: a new tag
    third = ctx.tags(*["c%d" % i for i in range(5)])
    values = list(first) + list(second) + list(third)
    with Checks(COMM) as checks:
        checks.add(type(first).__name__ == "Tags" and first._fields == ("edges", "records"),
                   "a namedtuple with the names as fields", first)
        checks.add(first.edges == first[0] and first.records == first[1], "fields", first)
        checks.add(len(set(values)) == len(values), "distinct", values)
        checks.add(all(isinstance(t, int) and 2**29 <= t < 2**30 for t in values),
                   "ints in the upper half of the tag range", values)
        checks.add(BSP(COMM).tags("edges") == first[:1], "each context counts alone")
        empty = ctx.tags()
        checks.add(empty == () and empty._fields == () and ctx.tags("x")[0] == third[-1] + 1,
                   "no names: an empty namedtuple, no tag used", empty)
    assert_collective(COMM, same_on_all_ranks(COMM, values), "ranks disagree: %s" % values)


def test_named_and_plain_tags_deliver_apart():
    """Messages on named tags and on plain tags are delivered apart."""
    rank, size = COMM.rank, COMM.size
    left, right = (rank - 1) % size, (rank + 1) % size
    ctx = BSP(COMM)
    t = ctx.tags("left", "right", "sums")
    ctx.send(left, np.array([rank]), tag=t.left)
    ctx.send_rows(np.array([right]), np.array([[rank, 1]]), tag=t.right)
    ctx.send_keyed(t.sums, np.array([rank, right]), np.array([1.0, 2.0]), lambda k: k % size)
    ctx.send(rank, np.array([-rank]))                                # a plain tag: 0
    inbox = ctx.sync()
    keys, vals = inbox.reduced(t.sums)
    with Checks(COMM) as checks:
        checks.add({0, t.left, t.right, t.sums} <= set(inbox.tags()), "tags", inbox.tags())
        checks.add(inbox.concat(t.left).tolist() == [right], "left", inbox.concat(t.left))
        checks.add(inbox.concat(t.right).tolist() == [[left, 1]], "right",
                   inbox.concat(t.right))
        checks.add(inbox.concat(0).tolist() == [-rank], "plain", inbox.concat(0))
        checks.add(keys.tolist() == [rank] and vals.tolist() == [3.0], "keyed", (keys, vals))


@pytest.mark.parametrize("names, exc, match", [
    (("a", 3), TypeError, "must be strings"),
    (("a", "a"), ValueError, "bad tag names"),
    (("2a",), ValueError, "bad tag names"),
    (("_a",), ValueError, "bad tag names"),
], ids=["not-a-string", "twice", "not-an-identifier", "underscore"])
def test_bad_tag_names_raise_on_every_rank(names, exc, match):
    """A bad tag name raises on every rank."""
    ctx = BSP(COMM)
    assert_raises_collective(COMM, exc, ctx.tags, *names, match=match)
    assert_collective(COMM, ctx.tags("a")[0] == 2**29, "a failed call hands out nothing")


def test_tags_run_out_with_an_error():
    """Asking for more tags than the range holds is an error, not a reused tag."""
    from dmsolve.bsp._tags import TagAllocator
    tags = TagAllocator(10, 13)
    assert_collective(COMM, tuple(tags.take(("a", "b"))) == (10, 11), "two of three")
    assert_raises_collective(COMM, RuntimeError, tags.take, ("c", "d"), match="1 tags left")
    assert_collective(COMM, tuple(tags.take(("c",))) == (12,), "the last one")


# the argument that is a tag, by method: (position, keyword)
_TAG_ARGUMENT = {"send": (2, "tag"), "send_rows": (2, "tag"), "send_keyed": (0, "tag"),
                 "concat": (0, "tag"), "concat_with_sources": (0, "tag"),
                 "messages": (0, "tag"), "from_source": (1, "tag"), "sources": (0, "tag"),
                 "reduced": (0, "tag")}


def test_dmsolve_and_preconditioners_number_no_tags_by_hand():
    """Their BSP messages take tags from ``ctx.tags`` (or the default, 0):
    no integer literal as a tag, no module constant named like a tag."""
    import ast
    import pathlib
    root = ROOT
    hits = []
    for path in sorted(p for pkg in ("dmsolve", "preconditioners")
                       for p in (root / pkg).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _TAG_ARGUMENT:
                at, key = _TAG_ARGUMENT[node.func.attr]
                args = node.args[at:at + 1] + [k.value for k in node.keywords if k.arg == key]
                if any(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in args):
                    hits.append("%s:%d" % (path.relative_to(root), node.lineno))
        for node in tree.body:
            if isinstance(node, ast.Assign):
                names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                if any((n.startswith("_T_") or "TAG" in n.upper()) and n != "TAG_LIMIT"
                       for n in names) and \
                        any(isinstance(c, ast.Constant) and isinstance(c.value, int)
                            for c in ast.walk(node.value)):
                    hits.append("%s:%d %s" % (path.relative_to(root), node.lineno, names))
    # the one table of raw MPI tags on the private communicator
    hits = [h for h in hits if not h.startswith(str(pathlib.Path("dmsolve/bsp/_comm.py")))]
    assert_collective(COMM, not hits, "tags numbered by hand: %s" % hits)


def test_raw_mpi_tags_of_the_private_communicator_come_from_one_table():
    """NBX's, the neighbour patterns' and the partitioners' gather's MPI tags
    on dmsolve's private duplicate communicator never overlap, and all are
    below the least MPI_TAG_UB the standard allows."""
    from dmsolve.bsp import _comm
    pattern = set(_comm.PATTERN_TAGS)
    reserved = list(_comm.NBX_TAGS) + [_comm.GATHER_TAG]
    tags = [_comm.next_tag(COMM) for _ in range(3)]
    with Checks(COMM) as checks:
        checks.add(len(set(reserved)) == len(reserved) and not pattern & set(reserved),
                   "disjoint", reserved)
        checks.add(max(pattern | set(reserved)) < 32767, "below 32767")
        checks.add(set(tags) <= pattern and len(set(tags)) == 3, "next_tag", tags)
    assert_collective(COMM, same_on_all_ranks(COMM, tags), "ranks disagree: %s" % tags)
