"""Reproducible mode (``reproducible=True``): exact sums checked against rational
arithmetic, and the same bits of x, iterations, reason and residual history at every
rank count and for block, METIS and RCB row partitions; the refusals at its door."""

import functools
import hashlib
import math
import operator
import sys
from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import dmsolve
import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR, DistVector, Layout
from dmsolve._reprosum import accumulators, dot_into, normalize, sum_into, to_float
from dmsolve.krylov import bicgstab, cg, fgmres, gmres, minres, pipecg
from dmsolve.partition import partition, redistribute
from dmsolve.reproducible import exact_dot, exact_dots, exact_sum
from mpitest import Checks, assert_collective, assert_raises_collective, wait_idle

METHODS = {"cg": cg, "pipecg": pipecg, "gmres": gmres, "fgmres": fgmres,
           "bicgstab": bicgstab, "minres": minres}
NONSYMMETRIC = ("gmres", "fgmres", "bicgstab")
RTOL = 1e-8
MAX = sys.float_info.max
TINY = math.ldexp(1.0, -1074)          # the smallest subnormal


# -- _reprosum against rational arithmetic ---------------------------------------------

def fraction_float(total: Fraction) -> float:
    """``total`` rounded once to the nearest float64 (ties to even), or +-inf."""
    try:
        return float(total)             # int / int: correctly rounded in CPython
    except OverflowError:
        return math.inf if total > 0 else -math.inf


def exact_reference(values) -> float:
    """The correctly rounded sum of ``values`` (finite) by rational arithmetic."""
    return fraction_float(sum((Fraction(float(v)) for v in values), Fraction(0)))


def wide_range(rng, n: int) -> np.ndarray:
    """Random float64 of every binade (subnormals included), then pairs that
    cancel exactly and a few huge terms that cancel: totals whose naive sums are
    wrong in most digits."""
    mant = rng.random(n) + 0.5
    exps = rng.integers(-1074, 960, n)
    x = np.ldexp(mant, exps) * rng.choice([-1.0, 1.0], n)
    x[rng.random(n) < 0.1] = 0.0
    sub = rng.integers(1, 2 ** 52, n // 8).astype(np.float64) * TINY
    big = np.array([1e300, -1e300, 2.0 ** 900, -(2.0 ** 900), 1.0, -1.0 + 2.0 ** -52])
    x = np.concatenate([x, sub, -x[: n // 4], big])
    rng.shuffle(x)
    return x


@pytest.mark.parametrize("seed", range(4))
def test_exact_sum_and_dot_are_correctly_rounded(comm, seed):
    """exact_sum and exact_dot equal the correctly rounded rational sum."""
    rng = np.random.default_rng(seed)
    n = 3 * 512 + 37                    # crosses the kernels' chunks of 512
    x = wide_range(rng, n)
    with Checks(comm) as checks:
        ref = exact_reference(x)
        checks.add(exact_sum(x) == ref, "exact_sum", (exact_sum(x), ref))
        checks.add(exact_sum(x) == math.fsum(x), "fsum")
        # products over the whole range: some overflow-free, some underflow to
        # subnormals or zero; the reference sums the products as rounded
        y = np.ldexp(rng.random(x.size) + 0.5, rng.integers(-200, 40, x.size))
        ref = exact_reference(x * y)
        checks.add(exact_dot(x, y) == ref, "exact_dot", (exact_dot(x, y), ref))
        small = np.ldexp(rng.random(n), rng.integers(-1074, -1000, n)) * rng.choice([-1, 1], n)
        checks.add(exact_sum(small) == exact_reference(small), "subnormal sum")


@pytest.mark.parametrize("low,high", [(-1074, -1020), (-960, -840), (-1000, -975), (-60, 60),
                                      (0, 20), (-200, 200), (940, 1010), (990, 1012)])
def test_exact_sum_every_exponent_window(comm, low, high):
    """exact_sum is correctly rounded for chunks on either side of every threshold between the
    fast path and the exponent buckets."""
    # chunks whose largest entry sits on either side of the kernels' thresholds
    # between a fast path and the exponent buckets (near under- and overflow),
    # chunks of a narrow range (the fewest error-free parts) and of a wide one,
    # where small entries leave a rest below the fast path's parts
    rng = np.random.default_rng(abs(low) + high)
    with Checks(comm) as checks:
        for trial in range(4):
            n = int(rng.integers(1, 1600))
            x = np.ldexp(rng.random(n) + 0.5, rng.integers(low, high, n)) * rng.choice([-1, 1], n)
            if trial % 2:
                x = np.concatenate([x, -x[: n // 2]])      # exact cancellations
                rng.shuffle(x)
            y = np.ldexp(rng.random(x.size) + 0.5, rng.integers(-20, 5, x.size))
            got, want = exact_sum(x), exact_reference(x)
            checks.add(got == want, "sum, trial %d" % trial, (got, want))
            got, want = exact_dot(x, y), exact_reference(x * y)
            checks.add(got == want, "dot, trial %d" % trial, (got, want))


def test_exact_sum_rounds_ties_and_overflow_exactly(comm):
    """exact_sum rounds ties to even and overflows exactly."""
    ulp_half = 2.0 ** 970               # half an ulp of MAX
    cases = [
        ([1.0, 2.0 ** -53], 1.0),                                     # tie: to even
        ([1.0, 2.0 ** -53, TINY], np.nextafter(1.0, 2.0)),            # just past the tie
        ([1.0 + 2.0 ** -52, 2.0 ** -53], 1.0 + 2.0 ** -51),           # tie: up to even
        ([2.0 ** 100, 1.0, -(2.0 ** 100)], 1.0),                      # cancellation
        ([TINY, TINY, TINY], 3 * TINY),                               # subnormal total
        ([2.0 ** -1022, -TINY], 2.0 ** -1022 - TINY),
        ([MAX, MAX, -MAX], MAX),                                      # no spurious overflow
        ([MAX, ulp_half / 2], MAX),
        ([MAX, ulp_half, -TINY], MAX),                                # below the tie
        ([MAX, ulp_half], math.inf),                                  # tie: to even is 2**1024
        ([MAX, MAX], math.inf),
        ([-MAX, -MAX], -math.inf),
        ([], 0.0),
        ([-0.0, 0.0], 0.0),
    ]
    with Checks(comm) as checks:
        for values, want in cases:
            got = exact_sum(np.array(values, dtype=np.float64))
            checks.add(got == want, "exact_sum(%r)" % (values,), "%r != %r" % (got, want))
        # products that overflow are infinities, as in IEEE arithmetic
        got = exact_dot(np.array([1e200, 1.0]), np.array([1e200, 2.0]))
        checks.add(got == math.inf, "dot overflow", got)
        got = exact_dot(np.array([1e200, 1e200]), np.array([1e200, -1e200]))
        checks.add(math.isnan(got), "dot inf - inf", got)


def test_exact_sum_infinities_and_nan(comm):
    """exact_sum gives IEEE's answer with infinities and NaN."""
    inf, nan = math.inf, math.nan
    cases = [([1.0, inf, -5.0], inf), ([-inf, MAX, MAX], -inf), ([inf, inf], inf)]
    with Checks(comm) as checks:
        for values, want in cases:
            got = exact_sum(np.array(values))
            checks.add(got == want, "exact_sum(%r)" % (values,), got)
        for values in ([inf, -inf], [nan, 1.0], [1.0, nan, inf], [0.0, -inf, nan]):
            got = exact_sum(np.array(values))
            checks.add(math.isnan(got), "exact_sum(%r) is NaN" % (values,), got)
        # a NaN or infinity in a long vector, past the first chunk
        x = np.ones(2000)
        x[1500] = -inf
        checks.add(exact_sum(x) == -inf, "-inf at 1500")
        x[1700] = inf
        checks.add(math.isnan(exact_sum(x)), "inf - inf at 1500, 1700")
        checks.add(math.isnan(exact_dot(np.array([0.0]), np.array([inf]))), "0 * inf")


@pytest.mark.parametrize("kind", ["sum", "dot"])
def test_exact_sum_order_and_split_independent(comm, kind):
    """exact_sum gives the same bits in any order and any split over ranks."""
    rng = np.random.default_rng(7)
    x = wide_range(rng, 4000)
    y = np.ldexp(rng.random(x.size) + 0.5, rng.integers(-100, 40, x.size))
    whole = exact_sum(x) if kind == "sum" else exact_dot(x, y)
    with Checks(comm) as checks:
        for trial in range(5):
            perm = rng.permutation(x.size)
            xs, ys = x[perm], y[perm]
            # uneven pieces, empty ones included: the parts of ranks
            cuts = np.sort(rng.integers(0, x.size + 1, 6 + trial))
            pieces = np.split(np.arange(x.size), cuts)
            acc = accumulators(len(pieces))
            for j, idx in enumerate(pieces):
                if kind == "sum":
                    sum_into(np.ascontiguousarray(xs[idx]), acc[j])
                else:
                    dot_into(np.ascontiguousarray(xs[idx]), np.ascontiguousarray(ys[idx]),
                             acc[j])
            normalize(acc)
            total = acc.sum(axis=0, keepdims=True)      # MPI.SUM of int64 words
            got = to_float(total[0])
            checks.add(np.float64(got).tobytes() == np.float64(whole).tobytes(),
                       "trial %d, %d pieces" % (trial, len(pieces)), (got, whole))
            normalize(total)                             # and again: the same value
            checks.add(to_float(total[0]) == whole, "renormalised, trial %d" % trial)


def ieee_sum(values) -> float:
    """IEEE additions from left to right, 0.0 for no values: the correctly rounded
    sum with IEEE's sign of a zero when every partial sum is exact, as for the
    values it is used on here (``math.fsum`` gives the same from Python 3.12)."""
    return functools.reduce(operator.add, values) if len(values) else 0.0


def same_bits(a: float, b: float) -> bool:
    """Whether two floats are the same float64, the sign of a zero included."""
    return np.float64(a).tobytes() == np.float64(b).tobytes()


SIGNED_ZERO_SUMS = [
    [], [-0.0], [-0.0, -0.0], [0.0], [-0.0, 0.0], [0.0, -0.0], [1.0, -1.0], [-1.0, 1.0],
    [-TINY, TINY], [-1.0, 1.0, -0.0], [-0.0] * 1500,              # all -0.0, three chunks
    [-0.0] * 1500 + [0.0], [-0.0] * 700 + [1.0, -1.0] + [-0.0] * 10,
]


def test_exact_sum_and_dot_sign_of_zero_as_ieee(comm):
    """exact_sum and exact_dot give the sign of a zero total as IEEE addition does:
    -0.0 when every term is -0.0, else +0.0 (an empty sum is +0.0)."""
    with Checks(comm) as checks:
        for values in SIGNED_ZERO_SUMS:
            x = np.array(values, dtype=np.float64)
            got, want = exact_sum(x), ieee_sum(values)
            checks.add(same_bits(got, want), "exact_sum(%d terms, first %r)"
                       % (x.size, values[:3]), (got, want))
            got = exact_dot(x, np.ones(x.size))
            checks.add(same_bits(got, want), "exact_dot(x, 1), %d terms" % x.size, (got, want))
        # -0.0 products: a signed zero times a number, and products that underflow
        for x, y in (([-0.0, 0.0], [1.0, -1.0]), ([-1e-200, 1e-200], [1e-200, -1e-200]),
                     ([-1e-200, 0.0], [1e-200, 1.0])):
            got = exact_dot(np.array(x), np.array(y))
            want = ieee_sum([a * b for a, b in zip(x, y)])
            checks.add(same_bits(got, want), "exact_dot(%r, %r)" % (x, y), (got, want))


@pytest.mark.parametrize("n", [0, 3, 7, 1500])
def test_exact_dots_sign_of_zero_at_any_rank_count(comm, n):
    """exact_dots over the ranks gives the sign of a zero total as IEEE addition of
    all the products does: -0.0 only when every product on every rank is -0.0 (ranks
    that own no entries included)."""
    lay = Layout.block(n, comm)
    sl = slice(lay.start, lay.stop)
    ones = np.ones(n)
    negative = np.full(n, -0.0)
    mixed = negative.copy()
    mixed[n - 1:] = 0.0                           # one +0.0, on the last owner
    cancel = negative.copy()
    k = min(n, 2)
    cancel[:k] = [1.0, -1.0][:k]                  # nonzero terms whose sum is zero
    cases = {"all -0.0": negative, "one +0.0": mixed, "cancelling": cancel}
    got = exact_dots(comm, [(x[sl], ones[sl]) for x in cases.values()])
    with Checks(comm) as checks:
        for (name, x), g in zip(cases.items(), got):
            want = ieee_sum(x.tolist())
            checks.add(same_bits(g, want), "%s, n=%d" % (name, n), (g, want))


def test_exact_dots_over_ranks_is_the_serial_exact_dot(comm):
    """exact_dots over the ranks is the serial exact dot."""
    rng = np.random.default_rng(11)
    x = wide_range(rng, 1001)
    y = rng.standard_normal(x.size)
    lay = Layout.block(x.size, comm)
    sl = slice(lay.start, lay.stop)
    got = exact_dots(comm, [(x[sl], y[sl]), (x[sl], np.ones(x[sl].size)), (y[sl], y[sl])])
    want = [exact_dot(x, y), exact_sum(x), exact_dot(y, y)]
    assert_collective(comm, got == want and want[0] == exact_reference(x * y),
                      "%r != %r" % (got, want))


# -- the solves: the same bits everywhere ----------------------------------------------

def _scaling(A: DistCSR) -> DistVector:
    # a symmetric scaling D A D by a function of the global row index: a varying
    # diagonal (Jacobi is more than a power-of-two scale) and unequal off-diagonals
    i = np.arange(A.row_layout.start, A.row_layout.stop)
    return DistVector(A.row_layout, 1.0 + ((i * 7919) % 13) / 8.0)


#: name -> (builder on a communicator, grid width for the RCB coordinates).
#: 29 x 31 = 899 rows and 23^2 = 529 rows: neither divides evenly over 2, 3 or 4 ranks.
PROBLEMS = {
    "poisson2d": (lambda comm: gallery.poisson2d(29, comm, ny=31), 29),
    "convdiff": (lambda comm: gallery.convection_diffusion(23, comm), 23),
}


def build(problem: str, comm) -> tuple[DistCSR, DistVector]:
    """The scaled gallery matrix and a random right-hand side, in block rows.
    Collective on ``comm``."""
    A = PROBLEMS[problem][0](comm)
    s = _scaling(A)
    A.scale(left=s, right=s)
    return A, gallery.rhs(A, "random", seed=5)


def grid_coords(A: DistCSR, nx: int) -> np.ndarray:
    """The (x, y) grid point of each owned row (row = x + y nx). Not collective."""
    idx = np.arange(A.row_layout.start, A.row_layout.stop)
    return np.column_stack((idx % nx, idx // nx)).astype(float)


def signature(x: DistVector, info) -> dict:
    """What must be the same bits at every rank count. Collective on ``x.comm``."""
    g = x.gather()
    norms = np.asarray(info.residual_norms, dtype=np.float64)
    return {"x": hashlib.sha256(g.tobytes()).hexdigest(), "iterations": info.iterations,
            "reason": info.reason.name, "converged": bool(info.converged),
            "residual_norms": hashlib.sha256(norms.tobytes()).hexdigest(),
            "n_norms": norms.size, "true_residual_norm": float(info.true_residual_norm)}


def on_subcomms(comm, func) -> list:
    """``func(sub)`` on the first ``k`` ranks of ``comm``, ``k = 1 .. comm.size``.

    Returns, for each ``k``, the list of the ``k`` ranks' results, on every
    rank. The ranks outside a sub-communicator wait idle (2 cores run 4
    ranks); an exception on any rank fails every rank. Collective on ``comm``.
    """
    out = []
    for k in range(1, comm.size + 1):
        sub = comm.Split(0 if comm.rank < k else MPI.UNDEFINED, comm.rank)
        result = error = None
        if sub != MPI.COMM_NULL:
            try:
                result = func(sub)
            except Exception as e:  # noqa: BLE001 - reported to every rank
                error = "at %d ranks, rank %d: %s: %s" % (k, comm.rank, type(e).__name__, e)
            finally:
                sub.Free()
        wait_idle(comm)
        gathered = comm.allgather((result, error))
        errors = [e for _, e in gathered if e is not None]
        if errors:
            raise AssertionError("; ".join(errors))
        out.append([r for r, _ in gathered[:k]])
    return out


PCS = ["none", "jacobi", "cheby", "amg"]


def _problem_of(method: str) -> str:
    return "convdiff" if method in NONSYMMETRIC else "poisson2d"


def _solve_case(comm, method, pc, part=None):
    """One reproducible solve of the case on ``comm`` (block rows, or moved to
    the ``part`` partition and back). Returns (signature, gathered x) on every
    rank of ``comm``. Collective."""
    problem = _problem_of(method)
    A, b = build(problem, comm)
    p = None
    if part == "metis":
        p = partition(A, "metis")
    elif part == "rcb":
        p = partition(A, "rcb", coords=grid_coords(A, PROBLEMS[problem][1]))
    if p is not None:
        A, b = redistribute(A, p), redistribute(b, p)
    x, info = dmsolve.solve(A, b, method, pc=pc, rtol=RTOL, reproducible=True)
    if p is not None:
        x = redistribute(x, p, inverse=True)
    return signature(x, info), x.gather()


@functools.lru_cache(maxsize=None)
def reference(problem: str):
    """The gathered matrix and right-hand side, scipy's solution and the smallest
    singular value of the matrix. Not collective (built on COMM_SELF)."""
    A, b = build(problem, MPI.COMM_SELF)
    Ag, bg = A.to_scipy().tocsc(), b.gather()
    xr = spla.spsolve(Ag, bg)
    smin = np.linalg.svd(Ag.toarray(), compute_uv=False)[-1]
    return Ag, bg, xr, smin


def _tests_true_residual(method: str, pc: str) -> bool:
    # left-preconditioned GMRES and preconditioned MINRES test a preconditioned norm
    return pc == "none" or method not in ("gmres", "minres")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pc", PCS)
@pytest.mark.parametrize("method", list(METHODS))
def test_reproducible_same_bits_at_every_rank_count_and_partition(comm, method, pc):
    """The case matrix: ids like ``cg-cheby`` (poisson2d for the symmetric
    methods, convdiff for gmres, fgmres and bicgstab)."""
    runs = on_subcomms(comm, lambda sub: _solve_case(sub, method, pc))
    labels = ["%d rank%s" % (k + 1, "s" if k else "") for k in range(len(runs))]
    sigs = []
    for label, per_rank in zip(labels, runs, strict=True):
        # every rank of a run holds the same record
        mine = [sig for sig, _ in per_rank]
        assert_collective(comm, all(s == mine[0] for s in mine),
                          "%s: the ranks disagree: %s" % (label, mine))
        sigs.append(mine[0])
    xg = runs[-1][0][1]                 # block rows over all ranks
    for part in ("metis", "rcb"):
        labels.append("%s at %d ranks" % (part, comm.size))
        sigs.append(_solve_case(comm, method, pc, part)[0])
    first = sigs[0]
    differ = ["%s: %s" % (lab, {k: v for k, v in s.items() if v != first[k]})
              for lab, s in zip(labels, sigs, strict=True) if s != first]
    assert_collective(comm, not differ, "not the bits of 1 rank %s: %s" % (first, differ))
    assert_collective(comm, first["converged"] and first["reason"] in ("RTOL", "ATOL"),
                      "did not converge: %s" % first)

    # the answer itself, against scipy on the gathered system: the error is
    # A^-1 r, so ||x - x_ref|| <= ||r|| / sigma_min, and ||r|| is within rtol of
    # ||b|| where the method tests the true residual (10 rtol where it tests a
    # preconditioned norm)
    Ag, bg, xr, smin = reference(_problem_of(method))
    rnorm = np.linalg.norm(bg - Ag @ xg)
    rel = rnorm / np.linalg.norm(bg)
    err = np.linalg.norm(xg - xr)
    factor = 1.0 + 1e-6 if _tests_true_residual(method, pc) else 10.0
    assert_collective(comm, rel <= factor * RTOL, "relative residual %.3e > %g rtol"
                      % (rel, factor))
    assert_collective(comm, err <= rnorm / smin * (1 + 1e-6) + 1e-12 * np.linalg.norm(xr),
                      "||x - x_ref|| = %.3e > ||r|| / sigma_min = %.3e"
                      % (err, rnorm / smin))
    assert_collective(comm, abs(first["true_residual_norm"] - rnorm) <= 1e-8 * rnorm,
                      "info.true_residual_norm %.6e, gathered %.6e"
                      % (first["true_residual_norm"], rnorm))


def _empty_last_layout(n, comm) -> Layout:
    """Block rows over all ranks but the last, which owns none. Not collective."""
    if comm.size == 1:
        return Layout.block(n, comm)
    inner = dmsolve.block_ranges(n, comm.size - 1)
    return Layout(np.concatenate([inner, [n]]), comm)


def _x0_of(layout: Layout) -> DistVector:
    i = np.arange(layout.start, layout.stop)
    return DistVector(layout, np.cos(0.37 * i))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method,pc", [("cg", "cheby"), ("minres", "jacobi"),
                                       ("bicgstab", "jacobi")])
def test_reproducible_with_x0_and_a_rank_owning_no_rows(comm, method, pc):
    """A reproducible solve with x0, and a rank owning no rows, gives the serial bits."""
    # the last rank owns nothing; x0 is not zero (and not mutated); the bits
    # are those of the serial solve
    problem = _problem_of(method)
    Ag, bg, _, _ = reference(problem)

    def run(c, layout):
        A = DistCSR.from_global(Ag.tocsr(), c, layout=layout)
        b = DistVector.from_global(bg, A.row_layout)
        x0 = _x0_of(A.row_layout)
        x0_before = x0.local.copy()
        M = preconditioners.make(pc, A, reproducible=True)
        x, info = METHODS[method](A, b, x0, rtol=RTOL, M=M, reproducible=True)
        return signature(x, info), np.array_equal(x0.local, x0_before)

    serial, kept = run(MPI.COMM_SELF, None)
    mine, kept_here = run(comm, _empty_last_layout(Ag.shape[0], comm))
    assert_collective(comm, kept and kept_here, "x0 was changed")
    assert_collective(comm, mine == serial, "%s != serial %s" % (mine, serial))
    assert_collective(comm, serial["converged"], str(serial))


@pytest.mark.timeout(60)
def test_reproducible_with_a_nullspace(comm):
    """A reproducible solve with a null space gives the same bits at every rank count."""
    # singular Neumann Laplacian, consistent b, the constants projected out: the
    # projections' reductions and updates are exact and entrywise too
    n = 17
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    T[0, 0] = T[n - 1, n - 1] = 1.0
    T = sp.csr_matrix(T)
    Ng = sp.csr_matrix(sp.kron(sp.eye(n), T) + sp.kron(T, sp.eye(n)))
    bg = Ng @ np.sin(np.arange(n * n))

    def run(c):
        A = DistCSR.from_global(Ng, c)
        b = DistVector.from_global(bg, A.row_layout)
        ns = [DistVector.full(A.col_layout, 1.0)]
        x, info = cg(A, b, rtol=RTOL, nullspace=ns, reproducible=True,
                     M=preconditioners.make("jacobi", A, reproducible=True))
        return signature(x, info)

    sigs = [per_rank[0] for per_rank in on_subcomms(comm, run)]
    assert_collective(comm, all(s == sigs[0] for s in sigs), str(sigs))
    assert_collective(comm, sigs[0]["converged"], str(sigs[0]))


def test_krylov_functions_are_solve(comm):
    """The Krylov functions in reproducible mode give solve()'s bits."""
    # dmsolve.solve(pc=NAME, reproducible=True) is the Krylov function with
    # M = make(NAME, A, reproducible=True): the same bits
    A, b = build("poisson2d", comm)
    for pc in ("jacobi", ("cheby", {"degree": 3})):
        x1, i1 = dmsolve.solve(A, b, "cg", pc=pc, rtol=RTOL, reproducible=True)
        M = preconditioners.make(pc, A, reproducible=True)
        assert_collective(comm, M.reproducible is True)
        x2, i2 = cg(A, b, rtol=RTOL, M=M, reproducible=True)
        assert_collective(comm, signature(x1, i1) == signature(x2, i2), str(pc))


# -- default mode is unchanged -----------------------------------------------------------

@pytest.mark.parametrize("method", list(METHODS))
def test_reproducible_false_is_the_default(comm, method):
    """reproducible=False is the default and gives the ordinary solve."""
    A, b = build(_problem_of(method), comm)
    func = METHODS[method]
    runs = [dmsolve.solve(A, b, method, pc="jacobi", rtol=RTOL),
            dmsolve.solve(A, b, method, pc="jacobi", rtol=RTOL, reproducible=False),
            func(A, b, rtol=RTOL, M=preconditioners.make("jacobi", A)),
            func(A, b, rtol=RTOL, M=preconditioners.make("jacobi", A, reproducible=False),
                 reproducible=False)]
    sigs = [signature(x, info) for x, info in runs]
    assert_collective(comm, all(s == sigs[0] for s in sigs), str(sigs))
    assert_collective(comm, sigs[0]["converged"], str(sigs[0]))
    M = preconditioners.make("cheby", A, reproducible=False)
    assert_collective(comm, M.reproducible is False)
    s1 = signature(*func(A, b, rtol=RTOL, M=M))
    s2 = signature(*func(A, b, rtol=RTOL, M=preconditioners.make("cheby", A)))
    assert_collective(comm, s1 == s2, "%s != %s" % (s1, s2))


# -- the door: what reproducible mode refuses, on every rank ------------------------------

@pytest.mark.parametrize("name", ["bjacobi", "asm", "gemslr"])
def test_partition_dependent_preconditioners_refused(comm, name):
    """Preconditioners that depend on the partition are refused in reproducible mode, on every
    rank."""
    A, b = build("convdiff", comm)
    alternatives = "jacobi, cheby, amg"
    assert_raises_collective(comm, ValueError, preconditioners.make, name, A,
                             reproducible=True, match=alternatives)
    assert_raises_collective(comm, ValueError, dmsolve.solve, A, b, "gmres", pc=name,
                             reproducible=True, match=alternatives)
    # built in default mode and handed in: refused by the Krylov method
    M = preconditioners.make(name, A)
    assert_raises_collective(comm, ValueError, gmres, A, b, M=M, reproducible=True,
                             match="built with reproducible=True")


def test_preconditioner_built_without_reproducible_refused(comm):
    """A preconditioner built without reproducible=True is refused in a reproducible solve."""
    A, b = build("poisson2d", comm)
    for name in ("jacobi", "cheby"):
        M = preconditioners.make(name, A)
        for func in METHODS.values():
            assert_raises_collective(comm, ValueError, func, A, b, M=M, reproducible=True,
                                     match="built with reproducible=True")
        assert_raises_collective(comm, ValueError, dmsolve.solve, A, b, "cg", pc=M,
                                 reproducible=True, match="built with reproducible=True")

    class Plain(dmsolve.Preconditioner):
        # an object of one's own that does not say reproducible = True
        name = "plain"
        _symmetric = True

        def _apply(self, r, out):
            np.copyto(out, r)

    assert_raises_collective(comm, ValueError, cg, A, b, M=Plain(A), reproducible=True,
                             match="built with reproducible=True")


def test_complex_systems_refused(comm):
    """Complex systems are refused in reproducible mode."""
    A, b = build("poisson2d", comm)
    bz = DistVector(b.layout, b.local * (1 + 1j))
    for func in METHODS.values():
        assert_raises_collective(comm, TypeError, func, A, bz, reproducible=True,
                                 match="real systems")
    assert_raises_collective(comm, TypeError, dmsolve.solve, A, bz, "cg", pc="jacobi",
                             reproducible=True, match="real systems")
    assert_raises_collective(comm, TypeError, cg, A.astype(complex), b, reproducible=True,
                             match="real systems")
    assert_raises_collective(comm, TypeError, cg, A.single(), b, reproducible=True,
                             match="float64")


def test_reproducible_must_be_a_bool(comm):
    """reproducible must be a bool."""
    A, b = build("poisson2d", comm)
    for bad in ("yes", 1, None):
        for func in METHODS.values():
            assert_raises_collective(comm, TypeError, func, A, b, reproducible=bad,
                                     match="reproducible")
        assert_raises_collective(comm, TypeError, dmsolve.solve, A, b, "cg",
                                 reproducible=bad, match="reproducible")
        for name in ("jacobi", "cheby"):
            assert_raises_collective(comm, TypeError, preconditioners.make, name, A,
                                     reproducible=bad, match="reproducible")
    assert_raises_collective(comm, ValueError, preconditioners.make, "cheby", A,
                             reproducible=True, precision="single", match="double")


# -- a matrix changed in place, or copied --------------------------------------------------

def test_reproducible_solve_after_scaling_in_place(comm):
    """A reproducible solve after A.scale() solves the scaled system."""
    # the canonical copy kept on A must not outlive A.scale() (it would multiply
    # by the old entries and "converge" on the old system)
    A = gallery.poisson2d(20, comm)
    b = gallery.rhs(A, "random")
    cg(A, b, rtol=RTOL, reproducible=True)
    s = _scaling(A)
    A.scale(left=s, right=s)
    x, info = cg(A, b, rtol=RTOL, reproducible=True)
    rel = (b - A @ x).norm() / b.norm()
    assert_collective(comm, info.converged and rel <= RTOL,
                      "%s, but ||b - A x|| / ||b|| = %.3e" % (info.reason.name, rel))


def test_copy_of_a_redistributed_matrix_keeps_its_keys(comm):
    """A copy of a redistributed matrix keeps its canonical keys and sums in the same order."""
    # DistCSR.copy() keeps origin, the canonical keys redistribute gave the rows:
    # else a copy of a moved matrix sums in another order
    A, b = build("poisson2d", comm)
    p = partition(A, "metis")
    Am, bm = redistribute(A, p), redistribute(b, p)
    C = Am.copy()
    same = C.origin is not None and np.array_equal(C.origin, Am.origin)
    assert_collective(comm, same, "the copy has origin %r" % (C.origin,))
    block = signature(*cg(A, b, rtol=RTOL, reproducible=True))
    for name, M in (("moved", Am), ("copy of moved", C)):
        x, info = cg(M, bm, rtol=RTOL, reproducible=True)
        sig = signature(redistribute(x, p, inverse=True), info)
        assert_collective(comm, sig == block, "%s: %s != %s" % (name, sig, block))


# -- the flag itself ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bjacobi", "asm", "gemslr"])
def test_reproducible_false_accepted_by_every_preconditioner(comm, name):
    """Every preconditioner takes reproducible=False as if it were not given."""
    # make() takes reproducible=False (numpy's too) for the preconditioners
    # without a reproducible mode, as if it were not given
    A = gallery.convection_diffusion(12, comm)
    with Checks(comm) as checks:
        for flag in (False, np.False_):
            try:
                preconditioners.make(name, A, reproducible=flag)
            except (TypeError, ValueError) as e:
                checks.add(False, "make(%r, reproducible=%r)" % (name, flag),
                           "%s: %s" % (type(e).__name__, e))


def test_numpy_true_builds_a_reproducible_preconditioner_in_solve(comm):
    """np.True_ builds the named preconditioner reproducibly in solve()."""
    # np.True_, which the Krylov methods take, builds the named preconditioner
    # reproducibly in solve() too (not a default one that is then refused)
    A, b = build("poisson2d", comm)
    with Checks(comm) as checks:
        try:
            x1, i1 = dmsolve.solve(A, b, "cg", pc="jacobi", rtol=RTOL,
                                   reproducible=np.True_)
            x2, i2 = dmsolve.solve(A, b, "cg", pc="jacobi", rtol=RTOL, reproducible=True)
            checks.add(signature(x1, i1) == signature(x2, i2), "other bits")
        except (TypeError, ValueError) as e:
            checks.add(False, "solve(reproducible=np.True_)", "%s: %s" % (type(e).__name__, e))


def test_astype_and_conj_keep_the_rows_origin(comm):
    """astype() and conj() copies keep the rows' origin."""
    # a converted copy of a moved matrix still sums in its original ids' order
    A = gallery.poisson2d(12, comm)
    if comm.size > 1:
        A = redistribute(A, partition(A, "metis"))
    moved = A.origin if A.origin is not None else np.arange(A.row_layout.start, A.row_layout.stop)
    for B in (A.astype(float), A.conj(), A.copy()):
        got = B.origin if B.origin is not None else np.arange(B.row_layout.start,
                                                               B.row_layout.stop)
        assert_collective(comm, np.array_equal(got, moved), "origin lost by a copy")


def test_petsc_backend_refuses_reproducible_on_every_rank(comm):
    """backend="petsc" refuses reproducible=True on every rank."""
    A = gallery.poisson2d(8, comm)
    b = gallery.rhs(A, "ones")
    assert_raises_collective(comm, ValueError, dmsolve.solve, A, b, "cg",
                             backend="petsc", reproducible=True, match="backend")
