"""DistVector against numpy on gathered data: arithmetic, reductions, scatter
and gather round trips, complex vectors, numpy conversion and ufuncs, and
mismatched layouts or communicators raised on every rank."""

import numpy as np
import pytest
from mpi4py import MPI

from bad_inputs import check_bad_input
from dmsolve import DistVector, Layout, gallery, threads
from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     assert_raises_collective, same_on_all_ranks)
from operands import uneven_layout, vector
from threaded import Posts, same_bits, small_blocks


@pytest.mark.parametrize("n", [0, 7, 13, 101])
def test_scatter_gather_round_trip_exact(comm, n):
    """Scatter then gather gives the array back bit for bit, on every layout."""
    rng = np.random.default_rng(42)
    x = rng.standard_normal(n)
    lay = Layout.block(n, comm)
    v = DistVector.from_global(x, lay)
    assert_equal_collective(v.gather(), x)
    root = comm.size - 1
    g = v.gather(root=root)
    assert_collective(comm, (g is None) == (comm.rank != root))
    assert_equal_collective(g if comm.rank == root else x, x)
    w = DistVector.from_global(x, comm)
    assert_equal_collective(w.gather(), x)


def test_vector_arithmetic_matches_numpy(comm):
    """DistVector arithmetic and reductions equal numpy's on the gathered data."""
    rng = np.random.default_rng(1)
    n = 101
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    lay = Layout.block(n, comm)
    x, y = DistVector.from_global(a, lay), DistVector.from_global(b, lay)
    assert_allclose_collective(x.dot(y), a @ b, rtol=1e-13)
    assert_allclose_collective(x.norm(), np.linalg.norm(a), rtol=1e-13)
    assert_allclose_collective(x.norm(1), np.abs(a).sum(), rtol=1e-13)
    assert_allclose_collective(x.norm(np.inf), np.abs(a).max())
    assert_allclose_collective(x.sum(), a.sum(), rtol=1e-13)
    z = x.copy().axpy(2.5, y)
    assert_allclose_collective(z.gather(), a + 2.5 * b)
    z = x.copy().aypx(-0.5, y)
    assert_allclose_collective(z.gather(), -0.5 * a + b)
    z = x.copy().axpby(3.0, y, 2.0)
    assert_allclose_collective(z.gather(), 3 * b + 2 * a)
    z = x.zeros_like().waxpy(2.0, x, y)
    assert_allclose_collective(z.gather(), 2 * a + b)
    z = x.copy().scale(-2.0)
    assert_allclose_collective(z.gather(), -2 * a)
    z = x.zeros_like().pointwise_mult(x, y)
    assert_allclose_collective(z.gather(), a * b)
    assert_allclose_collective((x + y - 2 * x).gather(), b - a)
    assert_allclose_collective((-x / 2.0).gather(), -a / 2)
    c = DistVector.from_global(a.astype(np.complex128) * 1j, lay)
    assert_allclose_collective(c.dot(c), (a * a).sum(), rtol=1e-13)
    assert_collective(comm, x.all_finite())


def test_vector_copy_is_deep(comm):
    """copy() is a deep copy."""
    lay = Layout.block(13, comm)
    x = DistVector.full(lay, 1.0)
    y = x.copy()
    y.fill(3.0)
    assert_equal_collective(x.gather(), np.ones(13))


def test_vector_layout_mismatch_raises_everywhere(comm):
    """Vectors of mismatched layouts raise on every rank."""
    x = DistVector.zeros(Layout.block(13, comm))
    y = DistVector.zeros(Layout.block(14, comm))
    assert_raises_collective(comm, ValueError, x.axpy, 1.0, y, match="layout")
    assert_raises_collective(comm, ValueError, x.dot, y)
    assert_raises_collective(comm, TypeError, x.axpy, 1.0, np.zeros(13))


@pytest.mark.mpi(min_size=2)
def test_vector_from_other_communicator_raises_everywhere(comm):
    """A vector on another communicator raises on every rank."""
    other = comm.Dup()
    try:
        x = DistVector.zeros(Layout.block(13, comm))
        sub = comm.Split(comm.rank % 2, comm.rank)
        y = DistVector.zeros(Layout(np.array(Layout.block(13, comm).ranges), other))
        # a congruent duplicate is accepted: it has the same group and order
        x.axpy(1.0, y)
        z = DistVector.zeros(Layout.block(13, sub))
        assert_raises_collective(comm, ValueError, x.axpy, 1.0, z)
        sub.Free()
    finally:
        other.Free()


def test_from_global_wrong_length_on_one_rank_raises_everywhere(comm):
    """from_global with the wrong length on one rank raises on every rank."""
    lay = Layout.block(10, comm)
    x = np.zeros(11 if comm.rank == comm.size - 1 else 10)
    assert_raises_collective(comm, ValueError, DistVector.from_global, x, lay)


def test_local_part_wrong_length_raises():
    """A local part of the wrong length is refused."""
    lay = Layout.block(5, MPI.COMM_SELF)
    with pytest.raises(ValueError, match="expected"):
        DistVector(lay, np.zeros(4))
    with pytest.raises(TypeError):
        DistVector("not a layout")


def test_reductions_identical_on_every_rank(comm):
    """Reductions give identical bits on every rank."""
    rng = np.random.default_rng(3)
    x = DistVector.from_global(rng.standard_normal(1001), comm)
    assert same_on_all_ranks(comm, x.norm())
    assert same_on_all_ranks(comm, x.dot(x))


@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int32, np.int64, np.bool_,
                                   ">f8"], ids=str)
def test_gather_keeps_every_dtype(comm, dtype):
    """gather keeps every dtype."""
    # the MPI datatype of each dtype comes from mpi4py's public dtlib
    x = (np.arange(13) % 3 == 0) if dtype is np.bool_ else \
        (np.arange(13) * (1 + 1j if dtype is np.complex128 else 1)).astype(dtype)
    v = DistVector.from_global(x, Layout.block(13, comm))
    g = v.gather()
    assert_equal_collective(g, x)
    assert_collective(comm, g.dtype == np.dtype(dtype), "gathered as %s" % g.dtype)
    root = v.gather(root=0)
    assert_equal_collective(root if comm.rank == 0 else x, x)


# -- numpy conversion ---------------------------------------------------------------

def test_numpy_conversion_of_a_distvector_is_a_clear_error(comm):
    """Converting a DistVector to a numpy array is a clear error."""
    lay = Layout.block(7, comm)
    x = DistVector.from_global(np.arange(7.0), lay)
    for f in (np.asarray, np.array, lambda v: np.linalg.norm(v), lambda v: np.dot(v, v)):
        assert_raises_collective(comm, TypeError, f, x, match=r"gather\(\)")
    assert_raises_collective(comm, TypeError, lambda: x + np.ones(7), match="from_global")
    assert_raises_collective(comm, TypeError, lambda: np.ones(7) + x, match="from_global")
    assert_raises_collective(comm, TypeError, lambda: np.ones(7) * x, match="from_global")
    assert_raises_collective(comm, TypeError, np.add, x, np.ones(lay.local_size),
                             match="from_global")
    assert_raises_collective(comm, TypeError, np.add.reduce, x, match=r"x\.sum\(\)")


def test_numpy_elementwise_functions_give_distvectors(comm):
    """numpy elementwise functions of DistVectors give DistVectors."""
    lay = Layout.block(9, comm)
    g = np.linspace(0.5, 4.0, 9)
    x = DistVector.from_global(g, lay)
    cases = {"np.add(x, 1)": (np.add(x, 1), g + 1), "np.sqrt(x)": (np.sqrt(x), np.sqrt(g)),
             "float64 * x": (np.float64(2.5) * x, 2.5 * g),
             "x * float64": (x * np.float64(2.5), 2.5 * g),
             "np.multiply(x, x)": (np.multiply(x, x), g * g),
             "0-d array + x": (np.array(3.0) + x, g + 3.0),
             "np.maximum(x, 2)": (np.maximum(x, 2.0), np.maximum(g, 2.0))}
    with Checks(comm) as checks:
        for name, (got, _) in cases.items():
            checks.add(isinstance(got, DistVector) and got.layout is lay, name,
                       type(got).__name__)
    for name, (got, ref) in cases.items():
        assert_allclose_collective(got.gather(), ref, comm, rtol=1e-15, err_msg=name)
    out = x.zeros_like()
    res = np.exp(x, out=out)
    assert_collective(comm, res is out)
    assert_allclose_collective(out.gather(), np.exp(g), comm, rtol=1e-15)


# -- a rank that owns nothing ------------------------------------------------------------

@pytest.mark.mpi(min_size=2)
def test_axpy_on_a_rank_that_owns_nothing(comm):
    """axpy works when a rank owns nothing."""
    # BLAS axpy refuses an empty array: were it called on that rank only, the
    # others would wait in the next collective
    counts = [0] + [len(c) for c in np.array_split(np.arange(10), comm.size - 1)]
    lay = Layout(np.concatenate(([0], np.cumsum(counts))), comm)
    g, h = np.arange(10.0), np.linspace(1.0, 2.0, 10)
    x, y = DistVector.from_global(g, lay), DistVector.from_global(h, lay)
    with Checks(comm) as checks:
        for alpha in (2.5, 1.0, -1.0, 0.0):
            z = x.copy().axpy(alpha, y)
            checks.add(np.allclose(z.local, (g + alpha * h)[lay.start:lay.stop]),
                       "axpy alpha=%g" % alpha)
        z = x.copy().axpby(2.5, y, 0.5)
        checks.add(np.allclose(z.local, (0.5 * g + 2.5 * h)[lay.start:lay.stop]), "axpby")
    assert_allclose_collective(x.copy().axpy(2.5, y).gather(), g + 2.5 * h, comm, rtol=1e-15)


def test_complex_vectors_reduce_like_numpy(comm):
    """Complex vectors' dots and norms equal numpy's (vdot conjugates)."""
    lay = uneven_layout(23, comm)
    g, h = vector(23, 1, "complex"), vector(23, 2, "complex")
    x, y = DistVector.from_global(g, lay), DistVector.from_global(h, lay)
    with Checks(comm) as checks:
        # conjugate-linear in the first argument, as np.vdot
        checks.add(np.isclose(x.dot(y), np.vdot(g, h), rtol=1e-13), "dot", x.dot(y))
        checks.add(np.isclose(y.dot(x), np.vdot(h, g), rtol=1e-13), "dot swapped")
        for ord_ in (1, 2, np.inf):
            nrm = x.norm(ord_)
            checks.add(isinstance(nrm, float) and np.isclose(nrm, np.linalg.norm(g, ord_),
                                                             rtol=1e-13), "norm %s" % ord_, nrm)
        checks.add(np.isclose(x.sum(), g.sum(), rtol=1e-13), "sum")
        checks.add(x.conj().dtype == np.complex128, "conj dtype")
    assert_allclose_collective(x.conj().gather(), np.conj(g), comm, rtol=0)
    assert_allclose_collective(DistVector.from_global(g.real, lay).astype(complex).gather(),
                               g.real, comm, rtol=0)
    z = x.copy().axpy(2.0 - 1.0j, y)
    assert_allclose_collective(z.gather(), g + (2.0 - 1.0j) * h, comm, rtol=1e-14)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("vector-local-part-too-long", ValueError, "local part",
     lambda e: DistVector(e.A.row_layout, np.ones(e.A.row_layout.local_size + 1))),
    ("vector-from-global-wrong-length", ValueError, "expected",
     lambda e: DistVector.from_global(np.ones(e.n + 1), e.A.row_layout)),
    ("vector-from-global-length-differs-by-rank", ValueError, "global array",
     lambda e: DistVector.from_global(np.ones(5 + e.rank), e.comm) if e.size > 1
     else DistVector.from_global(np.ones((2, 2)), e.comm)),
    ("vector-norm-order-3", ValueError, "ord", lambda e: e.b.norm(ord=3)),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)


def test_norms_of_a_vector_whose_ranks_own_nothing(comm):
    """The 1-, 2- and inf-norms of a vector of 2 entries (at 3 and 4 ranks
    some ranks own nothing) are numpy's."""
    A = gallery.poisson1d(2, comm)
    x = DistVector.from_global(np.array([3.0, -4.0]), A.row_layout)
    assert_allclose_collective([x.norm(), x.norm(1), x.norm(np.inf)], [5.0, 7.0, 4.0], comm)


@pytest.mark.parametrize("kind", ["real", "complex"])
def test_threaded_reductions_sum_in_fixed_lanes(comm, monkeypatch, kind):
    """dot and the 1- and 2-norms: one thread sums as numpy; two or more
    sum in fixed lanes, the same bits at 2, 3 and 4 threads and on every
    run, and close to numpy's."""
    small_blocks(monkeypatch, lane=40)
    posts = Posts(monkeypatch)
    lay = uneven_layout(3001, comm)
    x = DistVector.from_global(vector(3001, 4, kind) * 1e3, lay)
    y = DistVector.from_global(vector(3001, 5, kind), lay)
    assert_collective(comm, same_bits(x.local_dot(y, threads=1), np.vdot(x.local, y.local)))
    ref = (x.dot(y, threads=2), x.norm(threads=2), x.norm(1, threads=2))
    for k in (2, 3, 4, 3, 2):
        got = (x.dot(y, threads=k), x.norm(threads=k), x.norm(1, threads=k))
        assert_collective(comm, all(same_bits(a, b) for a, b in zip(got, ref)), "threads %d" % k)
    assert_collective(comm, posts.count > 0 or lay.local_size < 80)
    xg, yg = x.gather(), y.gather()
    assert_allclose_collective(ref[0], np.vdot(xg, yg), rtol=1e-12)
    assert_allclose_collective(ref[1], np.linalg.norm(xg), rtol=1e-13)
    assert_allclose_collective(ref[2], np.abs(xg).sum(), rtol=1e-13)
    with threads.using(4):          # the process default
        assert_collective(comm, same_bits(x.dot(y), ref[0]) and same_bits(x.norm(), ref[1]))
