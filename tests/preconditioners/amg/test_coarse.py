"""AMG coarse levels: small levels gathered onto fewer ranks (the solve is
unchanged, idle ranks hold nothing, levels stay Galerkin products),
sub-communicators cached and freed, errors on a gathered level raised on
every rank, and the coarsest level relaxed or solved densely."""

import gc
import os
import resource
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
import preconditioners.amg.coarse as coarse
from dmsolve import DistCSR, Layout, block_ranges
from dmsolve.bsp import Ledger, free_inner_comm
from dmsolve.krylov import cg
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective)
from preconditioners.amg import IdleLevel, Level
from preconditioners.amg.coarse import (IdleCoarseSolver, active_ranks, coarse_layout,
                                        free_sub_communicators, level_communicator,
                                        plan_coarse_level, sub_communicator, sub_layout)

COMM = MPI.COMM_WORLD


# -- problems ---------------------------------------------------------------------------

def _poisson2d_empty_rank(comm):
    """2D Poisson 50^2 with the last rank owning no rows (at 2+ ranks)."""
    n = 50
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    K = (sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n))).tocsr()
    owners = max(1, comm.size - 1)
    ranges = np.concatenate((block_ranges(K.shape[0], owners),
                             np.full(comm.size - owners, K.shape[0])))
    return DistCSR.from_global(K, comm, layout=Layout(ranges, comm))


def _two_candidates(A):
    """Constants and a linear ramp in the global index: k = 2 columns."""
    lay = A.row_layout
    i = np.arange(lay.start, lay.stop, dtype=np.float64)
    return np.column_stack((np.ones(lay.local_size), i / lay.global_size))


PROBLEMS = {
    "poisson2d-64": lambda c: gallery.poisson2d(64, c),
    "poisson2d-80": lambda c: gallery.poisson2d(80, c),
    "poisson3d-20": lambda c: gallery.poisson3d(20, c),
    "aniso-32": lambda c: gallery.anisotropic_diffusion(32, c, epsilon=0.01),
    "empty-rank": _poisson2d_empty_rank,
}


# (problem, options): every case gathers its coarse levels at 2+ ranks
CASES = [
    pytest.param("poisson2d-64", {}, id="poisson2d-64"),
    pytest.param("poisson3d-20", {}, id="poisson3d-20"),
    pytest.param("poisson2d-64", {"B": "two"}, id="poisson2d-64-B2"),
    pytest.param("poisson2d-64", {"cycle": "W", "max_coarse": 20}, id="poisson2d-64-W"),
    pytest.param("poisson2d-64", {"max_levels": 2, "max_dense_coarse": 5000},
                 id="poisson2d-64-max_levels-2"),
    pytest.param("poisson2d-80", {"max_levels": 2, "max_dense_coarse": 100},
                 id="poisson2d-80-relax-coarse"),
    pytest.param("empty-rank", {"max_coarse": 20}, id="poisson2d-50-empty-rank"),
    pytest.param("poisson2d-64", {"min_rows_per_rank": 100, "max_coarse": 10},
                 id="poisson2d-64-min_rows-100"),
    # 704 coarse rows onto 3 ranks: at 4 ranks a sub-communicator of 3
    pytest.param("poisson2d-64", {"min_rows_per_rank": 300, "max_coarse": 10},
                 id="poisson2d-64-min_rows-300"),
    pytest.param("aniso-32", {"theta": 0.08, "max_coarse": 20}, id="aniso-32-theta"),
]


def _solve(problem, opts, **more):
    A = PROBLEMS[problem](COMM)
    opts = dict(opts, **more)
    if opts.get("B") == "two":
        opts["B"] = _two_candidates(A)
    M = preconditioners.make("amg", A, **opts)
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-10, M=M, maxiter=200)
    return A, M, x, info


def _comm_ranks_shrink_by_at_most(sizes, factor):
    return all(b <= a and b * factor >= a for a, b in zip(sizes, sizes[1:]))


def _level_ranks(sizes):
    """The ranks of COMM on each level, given the levels' communicator sizes:
    each level's ranks are active_ranks of the level above's."""
    ranks = [np.arange(sizes[0])]
    for b in sizes[1:]:
        prev = ranks[-1]
        ranks.append(prev if b == prev.size else prev[active_ranks(prev.size, b)])
    return ranks


# -- the same cycle, bit for bit --------------------------------------------------------

@pytest.mark.parametrize("problem,opts", CASES)
def test_agglomeration_leaves_the_solve_unchanged(problem, opts):
    """Gathering small levels onto fewer ranks leaves the solve's iterations and answer
    unchanged."""
    A, M, x, info = _solve(problem, opts)
    _, M0, x0, info0 = _solve(problem, opts, agglomerate=False)
    d, d0 = M.describe(), M0.describe()
    with Checks(COMM) as checks:
        checks.add(info.converged and info0.converged, "both converge",
                   (info.reason, info0.reason))
        checks.add(d["levels"] == d0["levels"], "levels", (d["levels"], d0["levels"]))
        checks.add(d["coarse"] == d0["coarse"], "coarse", (d["coarse"], d0["coarse"]))
        checks.add(d0["level_comm_ranks"] == [COMM.size] * len(d0["levels"]),
                   "without agglomeration every level is on every rank",
                   d0["level_comm_ranks"])
        checks.add(_comm_ranks_shrink_by_at_most(d["level_comm_ranks"],
                                                 coarse.MAX_RANK_REDUCTION),
                   "ranks shrink by at most MAX_RANK_REDUCTION", d["level_comm_ranks"])
    if COMM.size <= coarse.MAX_RANK_REDUCTION:
        # the same layouts, so the same arithmetic: residual histories, the
        # solution and every level's operator agree to the last bit
        assert_equal_collective(np.array(info.residual_norms), np.array(info0.residual_norms))
        assert_equal_collective(x.local, x0.local)
        for k in range(len(d["levels"])):
            assert_equal_collective(M.gather_operator(k).toarray(),
                                    M0.gather_operator(k).toarray())
    else:       # the 4x limit gives other coarse layouts: not the same aggregates
        assert_collective(COMM, abs(info.iterations - info0.iterations) <= 2,
                          "%d vs %d iterations" % (info.iterations, info0.iterations))
    if COMM.size > 1 and problem != "empty-rank" and "min_rows_per_rank" not in opts:
        # (min_rows_per_rank=100 keeps level 1 on all ranks)
        assert_collective(COMM, d["level_comm_ranks"][-1] < COMM.size,
                          "the coarsest level was agglomerated: %s" % d["level_comm_ranks"])


# -- idle ranks hold nothing ---------------------------------------------------------------

def test_idle_ranks_hold_no_rows_of_the_levels_they_skip():
    """Ranks idle on a gathered level hold none of its rows."""
    A, M, x, info = _solve("poisson2d-64", {"max_coarse": 10})
    sizes = M.describe()["level_comm_ranks"]
    nlev = len(sizes)
    ranks = _level_ranks(sizes)
    with Checks(COMM) as checks:
        checks.add(len(M.levels) == nlev - 1, "one Level per level but the coarsest")
        checks.add(info.converged, "converges", info.reason)
        for k, L in enumerate(M.levels):
            inside = COMM.rank in ranks[k]
            checks.add(isinstance(L, Level if inside else IdleLevel), "level %d kind" % k,
                       type(L).__name__)
            if inside:
                # the active ranks, in their order, own the level's rows
                checks.add(L.comm.Get_size() == sizes[k] and
                           L.comm.Get_rank() == int(np.flatnonzero(ranks[k] == COMM.rank)[0]),
                           "level %d communicator" % k)
                checks.add(L.P.comm is L.comm and L.A.row_layout.size == sizes[k],
                           "level %d operators on it" % k)
                if COMM.rank not in ranks[k + 1]:
                    checks.add(L.P.col_layout.local_size == 0 and L.bc.local.size == 0,
                               "level %d: no coarse rows here" % k)
            else:
                checks.add(L.A is None and L.P is None and L.comm is None,
                           "level %d holds nothing" % k)
        inside = COMM.rank in ranks[-1]
        checks.add(isinstance(M.coarse, IdleCoarseSolver) != inside, "coarse solver kind",
                   type(M.coarse).__name__)
        if inside:
            checks.add(M.coarse_A.comm.Get_size() == sizes[-1], "coarsest on its ranks")
        else:
            checks.add(M.coarse_A is None and M.coarse.nbytes == 0, "no coarse storage")
        if COMM.size > 1:
            checks.add(sizes[0] == COMM.size and sizes[-1] == 1, "gathered", sizes)


# -- the hierarchy is what the serial formulas give ------------------------------------

@pytest.mark.parametrize("reduction", [None, 2], ids=["default-limit", "limit-2"])
def test_levels_are_galerkin_products_of_the_gathered_matrices(reduction, monkeypatch):
    """Gathered levels are Galerkin products of the gathered matrices."""
    if reduction is not None:
        monkeypatch.setattr(coarse, "MAX_RANK_REDUCTION", reduction)
    limit = coarse.MAX_RANK_REDUCTION
    A, M, x, info = _solve("poisson2d-64", {"max_coarse": 10})
    d = M.describe()
    sizes = d["level_comm_ranks"]
    Ak = A.to_scipy()
    for k in range(len(M.levels)):
        P = M.gather_prolongator(k)
        Ac = M.gather_operator(k + 1)
        assert_allclose_collective(Ac.toarray(), (P.T @ Ak @ P).toarray(), rtol=1e-12,
                                   atol=1e-13, err_msg="level %d" % (k + 1))
        Ak = Ac
    with Checks(COMM) as checks:
        checks.add(info.converged and info.iterations <= 12, "converges",
                   (info.reason, info.iterations))
        checks.add(_comm_ranks_shrink_by_at_most(sizes, limit), "shrink by <= %d" % limit,
                   sizes)
        if reduction == 2 and COMM.size >= 3:
            # 3 or 4 ranks -> 2 -> 1: a sub-communicator split from a sub-communicator
            checks.add(sizes[:3] == [COMM.size, 2, 1], "4 (3) -> 2 -> 1", sizes)


# -- agglomeration happens, and the ranks shrink at most 4x -----------------------------

@pytest.mark.mpi(min_size=3)
def test_small_levels_are_agglomerated_onto_a_few_ranks():
    """Small levels are gathered onto a few ranks, shrinking at most 4x per level."""
    A, M, x, info = _solve("poisson2d-64", {"max_coarse": 10})
    d = M.describe()
    sizes = d["level_comm_ranks"]
    with Checks(COMM) as checks:
        # 704 rows < 2000 per rank: level 1 on one rank, and 4x at most
        checks.add(sizes[0] == COMM.size and sizes[1] == -(-COMM.size // 4) and sizes[1] < 3,
                   "level 1 agglomerated", sizes)
        checks.add([L["ranks"] for L in d["levels"]][1:] == sizes[1:],
                   "ranks owning rows are the level's ranks", (d["levels"], sizes))
        checks.add(_comm_ranks_shrink_by_at_most(sizes, 4), "at most 4x per level", sizes)
    # with a small min_rows_per_rank the 704 rows stay on 3 ranks (at 4: a sub-communicator)
    _, M3, _, _ = _solve("poisson2d-64", {"max_coarse": 10, "min_rows_per_rank": 300})
    sizes = M3.describe()["level_comm_ranks"]
    assert_collective(COMM, sizes[1] == 3 and sizes[2] == 1, "704 rows on 3 ranks: %s" % sizes)


def test_plan_coarse_level_limits_the_reduction():
    """plan_coarse_level limits how far the rank count is reduced."""
    size = COMM.size
    # a few rows on every rank: all would go to rank 0 without the limit
    for limit in (None, 2, 4):
        lay, first, active = plan_coarse_level(3, COMM, 1000, max_reduction=limit)
        want = 1 if limit is None else -(-size // limit)
        with Checks(COMM) as checks:
            checks.add(active == want, "active ranks with limit %s" % limit, (active, want))
            checks.add(first == 3 * COMM.rank, "first coarse id", first)
            checks.add(lay.global_size == 3 * size and lay.agreed, "layout")
            idle = np.setdiff1d(np.arange(size), active_ranks(size, active))
            checks.add(np.all(lay.local_sizes[idle] == 0), "idle ranks own nothing",
                       lay.local_sizes)
            checks.add(np.array_equal(lay.local_sizes[active_ranks(size, active)],
                                      np.diff(block_ranges(3 * size, active))),
                       "balanced over the active ranks", lay.ranges)
    # without a limit plan_coarse_level is coarse_layout
    for counts in ((3, 1000), (2000, 2000), (0, 1)):
        lay, first = coarse_layout(counts[0], COMM, counts[1])
        lay2, first2, _ = plan_coarse_level(counts[0], COMM, counts[1], max_reduction=None)
        assert_collective(COMM, first == first2 and np.array_equal(lay.ranges, lay2.ranges),
                          "coarse_layout %s" % (counts,))
    # natural layout on the hierarchy's communicator, balanced once gathered
    lay, _, active = plan_coarse_level(2000, COMM, 2000)
    lay_g, _, active_g = plan_coarse_level(2000, COMM, 2000, gathered=True)
    with Checks(COMM) as checks:
        checks.add(active == active_g == size, "all ranks stay")
        checks.add(np.array_equal(lay.ranges, 2000 * np.arange(size + 1)), "natural")
        checks.add(np.array_equal(lay_g.ranges, block_ranges(2000 * size, size)), "balanced")


# -- the gathered levels are spread: rank 0 is not special --------------------------------

@pytest.mark.parametrize("size,active,want", [
    (4, 1, [3]), (4, 2, [1, 3]), (4, 3, [0, 1, 3]), (4, 4, [0, 1, 2, 3]), (7, 2, [2, 6]),
    (16, 4, [3, 7, 11, 15]), (13, 4, [2, 5, 8, 12]), (1, 1, [0])])
def test_active_ranks_end_each_group(size, active, want):
    """active_ranks names the last rank of each of ``active`` nearly equal groups."""
    assert active_ranks(size, active).tolist() == want


def test_active_ranks_refuses_bad_counts():
    """active_ranks refuses more active ranks than ranks, or none."""
    for size, active in ((4, 0), (4, 5)):
        with pytest.raises(ValueError, match="active ranks"):
            active_ranks(size, active)


def _stored_bytes(M):
    """This rank's bytes of the hierarchy's operators, prolongators and coarse solve."""
    ops = [L.A for L in M.levels] + [M.coarse_A]
    return (sum(A.local_nbytes for A in ops if A is not None)
            + sum(L.P.local_nbytes for L in M.levels if L.active) + M.coarse.nbytes)


@pytest.mark.mpi(min_size=2)
def test_rank0_holds_no_more_than_its_share(monkeypatch):
    """Gathered coarse levels do not land on rank 0: its stored hierarchy and the
    bytes it receives in the Galerkin products are at most 1.2x the mean over
    the ranks, and the coarsest level lives on the last rank."""
    received = []
    record = Ledger.record_superstep

    def spy(self, label, work_s, comm_s, bytes_sent, bytes_recv, *args, **kw):
        if label.startswith("galerkin"):
            received.append(bytes_recv)
        return record(self, label, work_s, comm_s, bytes_sent, bytes_recv, *args, **kw)

    A = gallery.poisson3d(20, COMM)
    monkeypatch.setattr(Ledger, "record_superstep", spy)
    M = preconditioners.make("amg", A)
    monkeypatch.undo()
    d = M.describe()
    stored = np.array(COMM.allgather(_stored_bytes(M)), dtype=float)
    recv = np.array(COMM.allgather(sum(received)), dtype=float)
    with Checks(COMM) as checks:
        checks.add(d["level_comm_ranks"][-1] < COMM.size, "gathered", d["level_comm_ranks"])
        checks.add(stored[0] <= 1.2 * stored.mean(), "rank 0 stores %.0f bytes, mean %.0f"
                   % (stored[0], stored.mean()), stored)
        checks.add(recv[0] <= 1.2 * recv.mean(), "rank 0 receives %.0f bytes, mean %.0f"
                   % (recv[0], recv.mean()), recv)
        last = COMM.rank == COMM.size - 1
        checks.add(isinstance(M.coarse, IdleCoarseSolver) != last,
                   "the coarsest level on the last rank only", type(M.coarse).__name__)
    _, info = cg(A, gallery.rhs(A, "random"), rtol=1e-8, M=M, maxiter=50)
    assert_collective(COMM, info.converged, "cg converges: %s" % info.reason)


def test_level_communicator_holds_the_active_ranks():
    """level_communicator holds the ranks active_ranks names, in order, and is cached."""
    size = COMM.size
    dup = COMM.Dup()
    active = max(1, size // 2)
    ranks = active_ranks(size, active)
    sub = level_communicator(dup, active)
    lay = Layout(np.concatenate(([0], np.cumsum(np.isin(np.arange(size), ranks) * 5))), dup)
    rel = sub_layout(lay, sub)
    with Checks(COMM) as checks:
        checks.add(level_communicator(dup, active) is sub, "cached")
        checks.add((sub is None) == (COMM.rank not in ranks), "the active ranks")
        if sub is not None:
            checks.add(sub.Get_size() == active and
                       sub.Get_rank() == int(np.flatnonzero(ranks == COMM.rank)[0]),
                       "numbered in order")
            checks.add(rel.comm is sub and rel.global_size == 5 * active and
                       rel.local_size == 5 and rel.start == 5 * sub.Get_rank(), "relabelled")
        else:
            checks.add(rel is None, "None outside")
    freed = free_sub_communicators(dup)
    assert_collective(COMM, freed == (1 if sub is not None and active < size else 0), "freed")
    dup.Free()


# -- sub-communicators: made once, cached, freed on request -------------------------------

class _SplitCounter(MPI.Intracomm):
    """A communicator that counts the Splits made from it and its splits."""

    splits = [0]

    def Split(self, color=0, key=0):
        self.splits[0] += 1
        new = super().Split(color, key)
        return new if new == MPI.COMM_NULL else _SplitCounter(new)


def test_sub_communicators_are_cached_and_can_be_freed():
    """Sub-communicators are made once, cached, and freed on request."""
    dup = COMM.Dup()
    comm = _SplitCounter(dup)
    A = gallery.poisson2d(64, comm)
    _SplitCounter.splits[0] = 0
    opts = {"max_coarse": 10, "min_rows_per_rank": 300}
    M1 = preconditioners.make("amg", A, **opts)
    made = _SplitCounter.splits[0]
    M2 = preconditioners.make("amg", A, **opts)
    M3 = preconditioners.make("amg", A, **opts)
    sizes = M1.describe()["level_comm_ranks"]
    # a split of level k's ranks for each shrinking step, made by level k's
    # ranks; this rank lies inside the new communicator when active there
    ranks = _level_ranks(sizes)
    steps = [k for k in range(len(sizes) - 1) if sizes[k + 1] < sizes[k]]
    want = sum(1 for k in steps if COMM.rank in ranks[k])
    inside = sum(1 for k in steps if COMM.rank in ranks[k + 1])
    with Checks(COMM) as checks:
        checks.add(made == want, "splits on the first set-up", (made, want, sizes))
        checks.add(_SplitCounter.splits[0] == made, "no split on later set-ups",
                   _SplitCounter.splits[0])
        for k, (L1, L2, L3) in enumerate(zip(M1.levels, M2.levels, M3.levels)):
            checks.add(L1.comm is L2.comm is L3.comm, "level %d: the same communicator" % k)
        checks.add(M1.describe()["levels"] == M3.describe()["levels"], "same hierarchy")
    # the hierarchies still work, then are dropped and the communicators freed
    r = gallery.rhs(A, "random")
    assert_equal_collective(M1(r).local, M3(r).local)
    del M1, M2, M3
    gc.collect()
    freed = free_sub_communicators(comm)
    again = free_sub_communicators(comm)
    # a later set-up makes them again
    M4 = preconditioners.make("amg", A, **opts)
    with Checks(COMM) as checks:
        checks.add(freed == inside, "freed this rank's sub-communicators", (freed, inside))
        checks.add(again == 0, "nothing left to free", again)
        checks.add(_SplitCounter.splits[0] == 2 * made, "split again after freeing",
                   _SplitCounter.splits[0])
        checks.add(M4.describe()["level_comm_ranks"] == sizes, "same shape", sizes)
    _, info = cg(A, gallery.rhs(A, "ones"), rtol=1e-8, M=M4, maxiter=50)
    assert_collective(COMM, info.converged, "cg with the new hierarchy: %s" % info.reason)
    del M4
    gc.collect()
    free_sub_communicators(comm)
    A.free()
    free_inner_comm(comm)
    comm.Free()


def test_sub_communicator_and_sub_layout():
    """sub_communicator and sub_layout give the expected ranks and ranges."""
    size = COMM.size
    with Checks(COMM) as checks:
        checks.add(sub_communicator(COMM, size) is COMM, "all ranks: the communicator itself")
        checks.add(free_sub_communicators(MPI.COMM_SELF) == 0, "nothing cached, nothing freed")
    assert_raises_collective(COMM, ValueError, sub_communicator, COMM, 0, match="are not ranks")
    assert_raises_collective(COMM, ValueError, sub_communicator, COMM, size + 1,
                             match="are not ranks")
    if size == 1:
        return
    dup = COMM.Dup()
    sub = sub_communicator(dup, 1)
    lay = Layout(np.concatenate(([0], np.full(size, 7))), dup)
    rel = sub_layout(lay, sub)
    with Checks(COMM) as checks:
        checks.add(sub_communicator(dup, 1) is sub, "cached")
        checks.add((sub is None) == (COMM.rank > 0), "rank 0 only")
        if sub is not None:
            checks.add(rel.comm is sub and rel.global_size == 7 and rel.local_size == 7,
                       "relabelled")
        else:
            checks.add(rel is None, "None outside")
    # a rank outside that owns rows cannot be relabelled away
    bad = Layout(block_ranges(7 * size, size), dup)
    exc = None
    try:
        sub_layout(bad, sub)
    except RuntimeError as e:
        exc = e
    assert_collective(COMM, (exc is not None) == (size > 1), "refused: %s" % exc)
    assert_collective(COMM, free_sub_communicators(dup) == (1 if COMM.rank == 0 else 0),
                      "freed")
    dup.Free()


# -- describe() and the summary -------------------------------------------------------------

def test_describe_reports_rows_and_nonzeros_of_every_level():
    """describe() reports the rows and nonzeros of every level."""
    A, M, x, info = _solve("poisson3d-20", {"max_coarse": 10})
    d = M.describe()
    nlev = len(d["levels"])
    with Checks(COMM) as checks:
        checks.add(d["levels"][0] == {"rows": 8000, "nnz": A.global_nnz(), "ranks": COMM.size},
                   "finest", d["levels"][0])
        for k in range(nlev):
            G = M.gather_operator(k)
            checks.add(d["levels"][k]["rows"] == G.shape[0] and d["levels"][k]["nnz"] == G.nnz,
                       "level %d rows and nnz" % k, (d["levels"][k], G.shape, G.nnz))
        checks.add(len(d["level_comm_ranks"]) == nlev, "a size per level")
        checks.add(d["coarse"]["rows"] == d["levels"][-1]["rows"], "coarse rows")
        oc = sum(L["nnz"] for L in d["levels"]) / d["levels"][0]["nnz"]
        checks.add(abs(d["operator_complexity"] - oc) < 1e-12, "operator complexity")
        lines = repr(M).splitlines()
        checks.add(len(lines) == nlev + 1, "repr: a line per level", lines)
        checks.add(all(lines[k + 1].split()[:4] == ["level", "%d:" % k,
                                                     str(d["levels"][k]["rows"]), "rows"]
                       for k in range(nlev)), "repr levels", lines)
    # every rank reports the same
    same = COMM.allgather((d["levels"], d["level_comm_ranks"], d["coarse"],
                           d["hierarchy_bytes_max_rank"]))
    assert_collective(COMM, all(s == same[0] for s in same), "the same summary everywhere")


# -- an error on a gathered level --------------------------------------------------------------

def _zero_coarse_diagonal(comm):
    """Blocks [[1,-1,-1],[-1,1,-1],[-1,-1,4]] (entries summing to zero) chained
    through their last rows: unsmoothed aggregation makes one aggregate of
    each block (at 1 to 4 ranks: 1260 rows, blocks never cut) on the symmetric
    strength graph (the positive couplings count), and the coarse diagonal
    (the sum of a block) is zero."""
    nb = 420
    blk = np.array([[1.0, -1, -1], [-1, 1, -1], [-1, -1, 4]])
    K = sp.kron(sp.eye(nb), blk).tolil()
    for b in range(nb - 1):
        K[3 * b + 2, 3 * b + 5] = K[3 * b + 5, 3 * b + 2] = 0.5
    return DistCSR.from_global(K.tocsr(), comm)


def test_an_error_on_a_gathered_level_is_raised_on_every_rank():
    """An error on a gathered level is raised on every rank, idle ones included."""
    A = _zero_coarse_diagonal(COMM)
    match = (r"amg level 1 \(420 rows\): smoother 'chebyshev': the diagonal of A is zero "
             r"or not finite in 420 rows, the first at global row 0")
    for agglomerate in (True, False):
        assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A,
                                 strength="symmetric", smooth="none", max_coarse=10,
                                 agglomerate=agglomerate, match=match)
    # and with reports on, which wait for the end on a gathered level
    seen = []
    assert_raises_collective(COMM, ValueError, preconditioners.make, "amg", A, smooth="none",
                             strength="symmetric", max_coarse=10,
                             progress=lambda *a: seen.append(a[1]), match=match)
    assert_collective(COMM, seen == ["level 0: 1260 rows, %d nonzeros" % A.global_nnz()],
                      "the finest level was reported: %s" % seen)
    # afterwards the communicators still work
    M = preconditioners.make("amg", gallery.poisson2d(40, COMM), max_coarse=10)
    assert_collective(COMM, len(M.describe()["levels"]) >= 3)


def test_agglomerate_must_be_a_bool():
    """agglomerate must be a bool."""
    A = gallery.poisson2d(10, COMM)
    assert_raises_collective(COMM, TypeError, preconditioners.make, "amg", A, agglomerate=1,
                             match="agglomerate must be True or False")


# -- AMG that cannot coarsen --------------------------------------------------------

def _max_local_rows(A):
    return int(A.row_layout.local_sizes.max())


@pytest.mark.parametrize("opts", [{"max_levels": 1}, {"max_coarse": 10 ** 9}],
                         ids=["max_levels-1", "max_coarse-above-N"])
def test_no_coarsening_relaxes_the_coarsest_level(opts):
    """A matrix that cannot coarsen is relaxed on the coarsest level, not solved densely."""
    A = gallery.poisson2d(60, COMM)                   # 3600 rows > max_dense_coarse
    M = preconditioners.make("amg", A, **opts)
    d = M.describe()
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-8, M=M, maxiter=1000)
    rel = (b - A @ x).norm() / b.norm()
    with Checks(COMM) as checks:
        checks.add(len(d["levels"]) == 1, "one level", d["levels"])
        checks.add(d["coarse"] == {"solver": "relax", "rows": 3600, "stored_bytes_max_rank": 0,
                                   "max_dense_coarse": 2000, "sweeps": 2}, "coarse", d["coarse"])
        # the dense pseudo-inverse was 3600^2 * 8 bytes = 104 MB on every rank; now
        # A's CSR (some 64 bytes a row) and its sliced ELL copy (some 45)
        checks.add(d["hierarchy_bytes_max_rank"] <= 150 * _max_local_rows(A),
                   "hierarchy bytes", d["hierarchy_bytes_max_rank"])
        checks.add(M.symmetric is True, "Chebyshev relaxation is symmetric")
        checks.add(info.converged and rel <= 1e-8, "cg converges", (info.reason, rel))


def test_dense_coarse_solve_up_to_max_dense_coarse_rows():
    """The coarsest level is solved densely up to max_dense_coarse rows, and relaxed above."""
    A = gallery.poisson2d(20, COMM)                   # 400 rows, no coarsening allowed
    dense = preconditioners.make("amg", A, max_levels=1, max_dense_coarse=400)
    relax = preconditioners.make("amg", A, max_levels=1, max_dense_coarse=399,
                                 coarse_sweeps=3)
    r = gallery.rhs(A, "random")
    # the dense solve is exact: M = A^-1
    err = (A @ dense(r) - r).norm() / r.norm()
    with Checks(COMM) as checks:
        checks.add(dense.describe()["coarse"]["solver"] == "dense", "dense at 400 rows")
        checks.add(dense.describe()["coarse"]["stored_bytes_max_rank"]
                   == 8 * 400 * (_max_local_rows(A) + 1), "only own rows of the inverse kept",
                   dense.describe()["coarse"])
        checks.add(err <= 1e-10, "dense coarse solve is exact", err)
        checks.add(relax.describe()["coarse"]["solver"] == "relax"
                   and relax.describe()["coarse"]["sweeps"] == 3, "relaxed at 399",
                   relax.describe()["coarse"])


def _address_space_limit(extra_bytes):
    """A soft address-space limit ``extra_bytes`` above what this process maps
    now, so that a set-up that tries to allocate tens of GB fails with
    MemoryError instead of taking the shared machine down. Returns the old
    limits (for ``resource.setrlimit``)."""
    old = resource.getrlimit(resource.RLIMIT_AS)
    if not os.path.exists("/proc/self/status"):       # not Linux: no limit
        return old
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    soft = vm + extra_bytes
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (soft, old[1]))
    return old


def test_diagonal_matrix_of_1e5_rows_stays_small_and_converges():
    """A diagonal matrix of 1e5 rows stays within a small memory bound and converges."""
    # a diagonal matrix has no couplings to aggregate: the coarsest level is A
    # itself. A dense pseudo-inverse would take 10^10 entries (80 GB) per rank.
    n = 10 ** 5
    lay = dmsolve.Layout.block(n, COMM)
    i = np.arange(*lay.owned_range)
    d = 1.0 + (i % 7)
    A = DistCSR.from_local_rows(sp.csr_matrix((d, (i - lay.start, i)), shape=(i.size, n)), lay)
    preconditioners.make("amg", gallery.poisson2d(20, COMM))     # kernels compiled before
    old = _address_space_limit(2 * 2 ** 30)
    tracemalloc.start()
    error = None
    try:
        M = preconditioners.make("amg", A)
        peak = tracemalloc.get_traced_memory()[1]
    except MemoryError as e:        # the old dense coarse solve
        error, peak = "MemoryError: %s" % e, None
    finally:
        tracemalloc.stop()
        resource.setrlimit(resource.RLIMIT_AS, old)
    assert_collective(COMM, error is None, "set-up failed: %s" % error)
    desc = M.describe()
    b = gallery.rhs(A, "random")
    x, info = cg(A, b, rtol=1e-10, M=M, maxiter=10)
    rel = (b - A @ x).norm() / b.norm()
    local = _max_local_rows(A)
    with Checks(COMM) as checks:
        checks.add(desc["levels"] == [{"rows": n, "nnz": n, "ranks": COMM.size}], "levels",
                   desc["levels"])
        checks.add(desc["coarse"]["solver"] == "relax" and desc["coarse"]["rows"] == n
                   and desc["coarse"]["stored_bytes_max_rank"] == 0, "coarse", desc["coarse"])
        checks.add(desc["hierarchy_bytes_max_rank"] <= 40 * local, "hierarchy bytes",
                   desc["hierarchy_bytes_max_rank"])
        # everything the set-up allocated at once, smoothers included: O(local rows)
        checks.add(peak <= 200 * local, "set-up peak %d bytes for %d local rows" % (peak, local))
        # Gauss-Seidel is exact on a diagonal matrix
        checks.add(info.converged and info.iterations == 1 and rel <= 1e-10, "cg",
                   (info.reason, info.iterations, rel))
