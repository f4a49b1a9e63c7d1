"""Tests of dmsolve.bsp.piece_components (distributed union-find over pieces)
at any number of ranks.

Every rank builds the same global piece graph from a seed, keeps its own
pieces and a share of the links, and checks its answer against
scipy.sparse.csgraph.connected_components of the whole graph (the root of a
component is its smallest piece by (key, rank, index))."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.csgraph import connected_components

from dmsolve.bsp import Ledger, piece_components
from mpitest import Checks, assert_raises_collective, same_on_all_ranks

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD
R, P = COMM.rank, COMM.size


#: the chain test's bound: supersteps <= C_CHAIN * log2(length)
C_CHAIN = 4


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange of every BSP built in the test (read at construction)."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


@pytest.fixture(params=["hook", "tree"])
def method(request):
    """Both algorithms must give the same components, roots and signs."""
    return request.param


def tree_steps(p):
    """Supersteps of method="tree" with links: announce, up and down the tree."""
    return 1 + 2 * math.ceil(math.log2(p)) if p > 1 else 0


class Graph:
    """A global piece graph: piece ``g`` is piece ``index[g]`` of rank
    ``owner[g]``, with key ``keys[g]``; edges ``(a, b)`` between global
    pieces with parities ``sign``."""

    def __init__(self, owner, keys, a, b, sign=None):
        self.owner = np.asarray(owner, np.int64)
        self.keys = np.asarray(keys, np.int64)
        self.index = np.zeros(self.owner.size, np.int64)
        for r in range(P):
            on = self.owner == r
            self.index[on] = np.arange(np.count_nonzero(on))
        self.a, self.b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        self.sign = np.ones(self.a.size, np.int64) if sign is None else np.asarray(sign)
        self.mine = np.flatnonzero(self.owner == R)      # global ids, in local order

    def local_keys(self):
        return self.keys[self.mine]

    def links(self, holder):
        """This rank's links: edge ``e`` is given by the rank holding end
        ``holder[e]`` (0: a, 1: b, 2: both)."""
        ll, lr, lv, ls = [], [], [], []
        for e in range(self.a.size):
            for side, (u, v) in enumerate(((self.a[e], self.b[e]), (self.b[e], self.a[e]))):
                if holder[e] in (side, 2) and self.owner[u] == R:
                    ll.append(self.index[u]), lr.append(self.owner[v])
                    lv.append(self.index[v]), ls.append(self.sign[e])
        return tuple(np.array(x, dtype=np.int64) for x in (ll, lr, lv, ls))

    def serial(self, holder, parity=False):
        """The same graph on one rank (COMM_SELF), links given by the same
        ends: with distinct keys the rounds must be the same as on any
        number of ranks (the labels evolve alike; only where they live
        differs)."""
        ends = [(self.a[e], self.b[e]) for e in range(self.a.size) if holder[e] in (0, 2)]
        ends += [(self.b[e], self.a[e]) for e in range(self.a.size) if holder[e] in (1, 2)]
        sign = [self.sign[e] for e in range(self.a.size) if holder[e] in (0, 2)]
        sign += [self.sign[e] for e in range(self.a.size) if holder[e] in (1, 2)]
        u, v = (np.array(x, dtype=np.int64).reshape(-1) for x in zip(*ends)) if ends \
            else (np.zeros(0, np.int64),) * 2
        return piece_components(self.keys, u, np.zeros(u.size, np.int64), v, MPI.COMM_SELF,
                                parity=np.array(sign, np.int64) if parity else None)

    def reference(self):
        """Per global piece: the root's global id (smallest (key, rank, index))."""
        n = self.owner.size
        g = sp.coo_matrix((np.ones(self.a.size), (self.a, self.b)), shape=(n, n))
        _, comp = connected_components(g, directed=False)
        order = np.lexsort((self.index, self.owner, self.keys))
        root = np.full(comp.max() + 1 if n else 0, -1)
        for x in order[::-1]:
            root[comp[x]] = x
        return root[comp]


def random_graph(case: str, seed: int):
    rng = np.random.default_rng(seed)
    n = {"empty": 0, "one-piece": 1}.get(case, 7 + 13 * P)
    owner = rng.integers(0, P, n)
    if case == "ends-empty" and P > 1:       # the first and last rank have no pieces
        owner = rng.integers(1, max(P - 1, 2), n) % P
    if case == "one-rank-holds-all":
        owner = np.full(n, P - 1)
    keys = rng.integers(0, 5 if case == "ties" else 10**12, n)
    ne = {"no-links": 0, "dense": 4 * n, "empty": 0, "one-piece": 0}.get(case, n)
    a, b = rng.integers(0, max(n, 1), (2, ne))
    if case == "self-loops" and ne:
        b[:3] = a[:3]
    sign = rng.choice([-1, 1], ne)
    return Graph(owner, keys, a, b, sign), rng.integers(0, 3, ne)


CASES = ["sparse", "dense", "ties", "no-links", "empty", "one-piece", "ends-empty",
         "one-rank-holds-all", "self-loops"]


@pytest.mark.parametrize("case", CASES)
def test_components_equal_scipy(case, method):
    """Piece components, roots included, equal scipy's connected components of the whole graph
    for every case and both methods."""
    gr, holder = random_graph(case, 11 + CASES.index(case))
    ledger = Ledger(COMM)
    out = piece_components(gr.local_keys(), *gr.links(holder)[:3], COMM, ledger=ledger,
                           method=method)
    root = gr.reference()[gr.mine]
    with Checks(COMM) as checks:
        checks.add(np.array_equal(out.root_key, gr.keys[root]), "root keys")
        checks.add(np.array_equal(out.root_rank, gr.owner[root]), "root ranks")
        checks.add(np.array_equal(out.root_index, gr.index[root]), "root indices")
        checks.add(out.sign is None and out.consistent is None, "no signs without parity")
        checks.add(out.root_key.dtype == np.int64 and out.root_key.shape == (gr.mine.size,),
                   "dtype and shape")
        checks.add(same_on_all_ranks(COMM, (out.rounds, out.supersteps)), "same counts")
        checks.add(ledger.summary()["supersteps"] == out.supersteps, "ledger counts")
        if case != "ties" and method == "hook":
            one = gr.serial(holder)
            checks.add(out.rounds == one.rounds, "rounds as on one rank",
                       (out.rounds, one.rounds))
        if P == 1:
            checks.add(out.supersteps == 0, "no supersteps on one rank", out.supersteps)
        elif case in ("no-links", "empty", "one-piece"):
            checks.add(out.supersteps == 1, "one superstep without links", out.supersteps)
        elif method == "hook":
            checks.add(out.supersteps == 2 * out.rounds, "two supersteps per round")
        else:
            checks.add(out.supersteps == tree_steps(P), "up and down the rank tree",
                       out.supersteps)


def _signed(case: str):
    """A graph with parities: ``orientable`` random signs s and parities
    s_a s_b on a connected random graph plus a cycle; ``odd-cycle``: a cycle
    over all ranks whose parities multiply to -1 (a Moebius band of pieces),
    plus an orientable second component."""
    rng = np.random.default_rng(5)
    n = 5 + 4 * P
    owner = np.arange(n) % P
    keys = rng.permutation(n) * 3 + 1
    if case == "orientable":
        s = rng.choice([-1, 1], n)
        a = np.concatenate((np.arange(n - 1), rng.integers(0, n, n)))
        b = np.concatenate((np.arange(1, n), rng.integers(0, n, n)))
        return Graph(owner, keys, a, b, s[a] * s[b]), s
    half = n // 2
    a = np.concatenate((np.arange(half), np.arange(half, n - 1)))
    b = np.concatenate(((np.arange(half) + 1) % half, np.arange(half + 1, n)))
    sign = np.ones(a.size, np.int64)
    sign[:half] = -1
    if half % 2 == 0:
        sign[0] = 1                         # an odd number of -1 around the cycle
    return Graph(owner, keys, a, b, sign), None


def _gathered(gr, out):
    """Every piece's sign, by global id, on every rank."""
    signs = np.zeros(gr.owner.size, np.int64)
    for ids, s in COMM.allgather((gr.mine, out.sign)):
        signs[ids] = s
    return signs


@pytest.mark.parametrize("holder", ["one-side", "both-sides"])
def test_parity_on_an_orientable_graph(holder, method):
    """On an orientable signed graph every piece's sign agrees with the parities of its links,
    with both methods."""
    gr, s = _signed("orientable")
    h = np.zeros(gr.a.size, int) if holder == "one-side" else np.full(gr.a.size, 2)
    out = piece_components(gr.local_keys(), *gr.links(h)[:3], COMM, parity=gr.links(h)[3],
                           method=method)
    root = gr.reference()
    signs = _gathered(gr, out)
    with Checks(COMM) as checks:
        checks.add(np.array_equal(out.root_key, gr.keys[root[gr.mine]]), "root keys")
        checks.add(out.consistent is True, "consistent", out.consistent)
        checks.add(out.sign.dtype == np.int8, "int8 signs")
        # relative to the root: s_u s_root, and +1 on the root itself
        checks.add(np.array_equal(signs, s * s[root]), "signs relative to the root")
        checks.add(np.all(signs[gr.a] == gr.sign * signs[gr.b]), "every link satisfied")


def test_parity_on_an_odd_cycle_does_not_hang_and_is_deterministic(method):
    """An odd cycle of parities (not orientable) ends, with the same answer on every run and
    rank count."""
    gr, _ = _signed("odd-cycle")
    h = np.zeros(gr.a.size, int)
    runs = [piece_components(gr.local_keys(), *gr.links(h)[:3], COMM, parity=gr.links(h)[3],
                             method=method)
            for _ in range(2)]
    out = runs[0]
    root = gr.reference()
    signs = _gathered(gr, out)
    half = gr.owner.size // 2
    cyc = np.arange(half)
    tail = np.arange(half, gr.a.size)
    violated = signs[gr.a[cyc]] != gr.sign[cyc] * signs[gr.b[cyc]]
    with Checks(COMM) as checks:
        checks.add(np.array_equal(out.root_key, gr.keys[root[gr.mine]]), "root keys")
        checks.add(out.consistent is False, "reported inconsistent", out.consistent)
        checks.add(np.all(np.abs(signs) == 1), "signs are +-1")
        checks.add(violated.sum() >= 1, "an odd cycle violates a link", violated.sum())
        checks.add(np.all(signs[gr.a[tail]] == gr.sign[tail] * signs[gr.b[tail]]),
                   "the orientable path keeps its links")
        checks.add(np.array_equal(runs[1].sign, out.sign), "deterministic")
        roots = np.flatnonzero(root == np.arange(root.size))
        checks.add(np.all(signs[roots] == 1), "+1 on every root piece")


@pytest.mark.parametrize("order", ["increasing", "decreasing", "random"])
def test_a_chain_zigzagging_over_the_ranks_takes_log_rounds(order, method):
    """A path of L >= 60 pieces visiting the ranks 0, 1, .., p-1, p-1, ..,
    0, 0, 1, ... (every link between neighbours in the path crosses a rank
    boundary except at the turns): min-label propagation would need about L
    supersteps; hooking and pointer jumping needs at most C_CHAIN log2 L,
    the rank tree 2 ceil(log2 p) + 1 whatever L."""
    L = max(60, 4 * P)
    t = np.arange(L)
    lap, off = t // P, t % P
    owner = np.where(lap % 2 == 0, off, P - 1 - off)
    keys = {"increasing": t, "decreasing": L - t,
            "random": np.random.default_rng(2).permutation(L)}[order]
    gr = Graph(owner, keys, t[:-1], t[1:], np.where(t[:-1] % 3 == 0, -1, 1))
    h = np.random.default_rng(3).integers(0, 2, L - 1)
    ledger = Ledger(COMM)
    ll, lr, lv, ls = gr.links(h)
    out = piece_components(gr.local_keys(), ll, lr, lv, COMM, parity=ls, ledger=ledger,
                           method=method)
    s = np.concatenate(([1], np.cumprod(gr.sign)))     # sign(t+1) = sign(t) * parity
    root = int(np.argmin(keys))
    with Checks(COMM) as checks:
        checks.add(np.all(out.root_key == keys.min()), "one component")
        checks.add(np.array_equal(out.sign, (s * s[root])[gr.mine]), "signs along the path")
        steps = ledger.summary()["supersteps"]
        checks.add(steps == out.supersteps, "ledger", (steps, out.supersteps))
        if method == "tree":
            checks.add(steps == tree_steps(P), "up and down the rank tree", steps)
            return
        checks.add(steps <= C_CHAIN * math.log2(L), "supersteps %d > %d log2(%d)"
                   % (steps, C_CHAIN, L))
        checks.add(P == 1 or steps == 2 * out.rounds, "two supersteps per round", steps)
        one = gr.serial(h, parity=True)
        checks.add(out.rounds == one.rounds, "rounds as on one rank", (out.rounds, one.rounds))


def test_links_given_by_the_larger_end_only(method):
    """Nothing moves in the first round when every link is given by its end
    with the larger key (the smaller end learns of it only then): the first
    round must not end the loop."""
    t = np.arange(2 * P)
    gr = Graph(t % P, 100 - t, t[:-1], t[1:])
    ll, lr, lv, _ = gr.links(np.zeros(t.size - 1, int))     # given by a = t[:-1]
    out = piece_components(gr.local_keys(), ll, lr, lv, COMM, method=method)
    with Checks(COMM) as checks:
        checks.add(np.all(out.root_key == 100 - t.max()), "one component", out.root_key)
        checks.add(np.all(out.root_rank == (t.max() % P)), "its root", out.root_rank)


@pytest.mark.mpi(min_size=2)
def test_max_supersteps_raises_on_every_rank(method):
    """A run that needs more supersteps than allowed raises on every rank."""
    t = np.arange(60)
    gr = Graph(t % P, t, t[:-1], t[1:])
    ll, lr, lv, _ = gr.links(np.zeros(59, int))
    few = 3 if method == "hook" else tree_steps(P) - 1
    assert_raises_collective(COMM, RuntimeError, piece_components, gr.local_keys(), ll, lr,
                             lv, COMM, max_supersteps=few, method=method,
                             match="within %d supersteps" % few)
    # enough supersteps: the same call succeeds
    out = piece_components(gr.local_keys(), ll, lr, lv, COMM, max_supersteps=40, method=method)
    assert same_on_all_ranks(COMM, out.supersteps) and np.all(out.root_key == 0)


def _bad(what):
    keys = np.arange(3, dtype=np.int64)
    one = np.array([0], np.int64)
    nxt = np.array([(R + 1) % P], np.int64)
    if what == "keys-float":
        return (keys * 1.0, one, nxt, one), {}, TypeError
    if what == "local-out-of-range":
        return (keys, np.array([3 if R == P - 1 else 0]), nxt, one), {}, ValueError
    if what == "remote-out-of-range":
        return (keys, one, nxt, np.array([7 if R == 0 else 0])), {}, ValueError
    if what == "rank-out-of-range":
        return (keys, one, np.array([P]), one), {}, ValueError
    if what == "lengths":
        return (keys, one, nxt, np.zeros(2, np.int64)), {}, ValueError
    if what == "parity-not-sign":
        return (keys, one, nxt, one), {"parity": np.array([2])}, ValueError
    if what == "parity-on-some-ranks":
        return (keys, one, nxt, one), ({"parity": one} if R == 0 else {}), ValueError
    if what == "max-supersteps-zero":
        return (keys, one, nxt, one), {"max_supersteps": 0}, ValueError
    raise ValueError(what)


@pytest.mark.parametrize("what", ["keys-float", "local-out-of-range", "remote-out-of-range",
                                  "rank-out-of-range", "lengths", "parity-not-sign",
                                  "parity-on-some-ranks", "max-supersteps-zero"])
def test_bad_input_raises_on_every_rank(what, method):
    """Each bad input, given on one rank, raises the same exception on every rank."""
    args, kwargs, exc = _bad(what)
    if what == "parity-on-some-ranks" and P == 1:
        kwargs = {"parity": np.array([3], np.int64)}     # one rank: a bad parity instead
    assert_raises_collective(COMM, exc, piece_components, *args, COMM, method=method, **kwargs)


@pytest.mark.parametrize("others", ["hook", "tree"])
def test_unknown_method_raises_on_every_rank(others):
    """A bad method on the last rank only: every rank raises, none waits."""
    none = np.zeros(0, np.int64)
    method = "bfs" if R == P - 1 else others
    assert_raises_collective(COMM, ValueError, piece_components, np.zeros(1, np.int64), none,
                             none, none, COMM, method=method, match="method must be")
