"""The fused vector kernels of the CG family on threads
(dmsolve.krylov._threaded): one thread runs the one-thread kernels, two or
more give the same bits at any count, and whole CG and pipelined CG solves
do too; reproducible mode keeps the bits of one thread."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve
import preconditioners
from dmsolve.krylov import _fused_kernels, _threaded, cg, pipecg
from mpitest import assert_collective
from threaded import Posts, same_bits, small_blocks

COMM = MPI.COMM_WORLD


def _vectors(n, count, kind, seed=0):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(n) for _ in range(count)]
    if kind == "complex":
        out = [v + 1j * rng.standard_normal(n) for v in out]
    return out


@pytest.mark.parametrize("kind", ["real", "complex"])
def test_fused_kernels_on_threads(monkeypatch, kind):
    """Updates equal the one-thread kernel's bits at any count; sums are the
    same bits at 2, 3 and 4 threads and close to the one-thread sums."""
    small_blocks(monkeypatch, rows=100, lane=64)
    posts = Posts(monkeypatch)
    n = 1001
    dtype = np.complex128 if kind == "complex" else np.float64
    results = {}
    for k in (1, 2, 3, 4):
        vs = _vectors(n, 10, kind)
        out2, out3, out3b = np.zeros(2, dtype), np.zeros(3, dtype), np.zeros(3, dtype)
        with dmsolve.threads.using(k):
            rr = _threaded.cg_update(0.3, vs[0], vs[1], vs[2], vs[3])
            _threaded.xpay(0.7, vs[4], vs[5])
            _threaded.dot2(vs[0], vs[1], vs[2], vs[3], out2)
            _threaded.pipecg_update(0.2, 0.4, 2, tuple(vs), out3)
            _threaded.pipecg_dots(2, vs[2], vs[3], vs[9], out3b)
        results[k] = ([v.copy() for v in vs], rr, out2, out3, out3b)
    assert posts.count > 0
    one = results[1]
    for k in (2, 3, 4):
        vs, rr, out2, out3, out3b = results[k]
        assert all(same_bits(a, b) for a, b in zip(vs, one[0])), k     # updates: every thread count
        two = results[2]
        assert same_bits(rr, two[1]) and same_bits(out2, two[2]), k    # sums: from 2 threads on
        assert same_bits(out3, two[3]) and same_bits(out3b, two[4]), k
        np.testing.assert_allclose(rr, one[1], rtol=1e-13)
        np.testing.assert_allclose(out2, one[2], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out3, one[3], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out3b, one[4], rtol=1e-12, atol=1e-12)
    # pipecg_dots sums what the fused pass sums, lane by lane
    vs = results[2][0]
    again = np.zeros(3, dtype)
    with dmsolve.threads.using(3):
        _threaded.pipecg_dots(2, vs[2], vs[3], vs[9], again)
    assert same_bits(again, results[2][3])


def test_one_thread_runs_the_one_thread_kernels():
    """At one thread the wrappers give the kernels' own bits."""
    vs = _vectors(3001, 4, "real", seed=1)
    ws = [v.copy() for v in vs]
    with dmsolve.threads.using(1):
        rr = _threaded.cg_update(0.3, *vs)
    assert same_bits(rr, _fused_kernels.cg_update(0.3, *ws))
    assert all(same_bits(a, b) for a, b in zip(vs, ws))

@pytest.mark.parametrize("method", [cg, pipecg])
@pytest.mark.parametrize("kind", ["real", "complex"])
@pytest.mark.parametrize("pc", [None, "jacobi"])
def test_threaded_solves_are_the_same_bits_at_2_3_and_4_threads(monkeypatch, method, kind, pc):
    """CG and pipelined CG on 2, 3 and 4 threads (products by blocks of rows,
    sums in fixed lanes): the same iterate bits and residual history at each
    count and on a repeated run, and the one-thread solution to the tolerance."""
    small_blocks(monkeypatch, rows=64, lane=64)
    posts = Posts(monkeypatch)
    A = dmsolve.gallery.poisson2d(45, COMM)
    if kind == "complex":
        A = A.astype(complex)
    b = dmsolve.gallery.rhs(A, "random")
    M = None if pc is None else preconditioners.make(pc, A)
    runs = []
    for k in (1, 2, 3, 4, 2):
        with dmsolve.threads.using(k):
            x, info = method(A, b, M=M, rtol=1e-9)
        runs.append((x.local.copy(), np.array(info.residual_norms), info.iterations))
    assert_collective(COMM, posts.count > 0)
    ref = runs[1]
    for x, norms, its in runs[2:]:
        assert_collective(COMM, same_bits(x, ref[0]) and same_bits(norms, ref[1]) and its == ref[2])
    assert_collective(COMM, abs(runs[0][2] - ref[2]) <= 1)
    assert_collective(COMM, np.allclose(runs[0][0], ref[0], rtol=1e-6, atol=1e-6))


@pytest.mark.parametrize("method", [cg, pipecg])
def test_reproducible_solves_are_the_same_bits_on_threads(monkeypatch, method):
    """Reproducible mode gives the bits of one thread at 2 and 3 threads."""
    small_blocks(monkeypatch, rows=64, lane=64)
    A = dmsolve.gallery.poisson2d(40, COMM)
    b = dmsolve.gallery.rhs(A, "random")
    M = preconditioners.make("jacobi", A, reproducible=True)
    runs = []
    for k in (1, 2, 3):
        with dmsolve.threads.using(k):
            x, info = method(A, b, M=M, rtol=1e-9, reproducible=True)
        runs.append((x.gather(), np.array(info.residual_norms)))
    for x, norms in runs[1:]:
        assert_collective(COMM, same_bits(x, runs[0][0]) and same_bits(norms, runs[0][1]))
