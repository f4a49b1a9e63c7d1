"""Estimation and inference of edge flows (denoise_flow, interpolate_flow,
trend_filter_flow, infer_triangles, fill_triangles) against dense solves,
bounded least squares and brute-force cliques.
Every reference is built from ``cx.simplices(1)`` and ``cx.simplices(2)``
alone (tests/topology_reference.py), not from the library's own assembly,
under the block and the METIS vertex partitions."""

import itertools

import numpy as np
import pytest
import scipy.optimize
from mpi4py import MPI

from dmsolve.krylov import ConvergenceError
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective)
from topology import (Grid, betti_numbers, denoise_flow, fill_triangles, hodge_decomposition,
                      infer_triangles, interpolate_flow, trend_filter_flow)
from topology_cases import flow_of, open_surface, rel
from topology_reference import serial_boundaries, serial_parts

COMM = MPI.COMM_WORLD
PARTITIONS = ["block", "metis"]


# -- edge-flow estimation ---------------------------------------------------------------------
@pytest.mark.parametrize("partition", PARTITIONS)
def test_denoise_flow_equals_dense_solve(partition):
    """Denoising solves (I + mu_d L_down + mu_u L_up) x = f as the dense
    solve does, for a global array or a DistVector flow."""
    cx, _ = open_surface(partition)
    Ld, Lu = serial_parts(cx)
    eye = np.eye(len(Ld))
    f = flow_of(cx, 6)
    with Checks(COMM) as checks:
        for mu in [0.7, (0.5, 2.0), (0.0, 1.5), (3.0, 0.0), 0.0]:
            md, mu_ = (mu, mu) if np.isscalar(mu) else mu
            ref = np.linalg.solve(eye + md * Ld + mu_ * Lu, f)
            x, info = denoise_flow(cx, f, mu, rtol=1e-12, return_info=True)
            got = cx.gather_global(x, 1)
            checks.add(rel(got, ref) <= 1e-10, "mu = %s" % (mu,), rel(got, ref))
            checks.add(info.converged, "converged %s" % (mu,))
        # a DistVector flow gives the same answer as the global array
        x2 = denoise_flow(cx, cx.cochain(f, 1), 0.7, rtol=1e-12)
        checks.add(np.array_equal(cx.gather_global(x2, 1),
                                  cx.gather_global(denoise_flow(cx, f, 0.7, rtol=1e-12), 1)),
                   "DistVector input")


@pytest.mark.parametrize("partition", PARTITIONS)
def test_interpolate_flow_from_samples_split_over_ranks(partition):
    """Interpolation from samples spread over ranks (repeated, or all on
    rank 0) is the dense regularised least-squares solution."""
    cx, _ = open_surface(partition)
    Ld, Lu = serial_parts(cx)
    L1 = Ld + Lu
    m = len(L1)
    f = flow_of(cx, 7)
    S = np.sort(np.random.default_rng(8).choice(m, m // 3, replace=False))
    mu, eps = 0.3, 1e-3
    P = np.zeros((m, m))
    P[S, S] = 1.0
    ref = np.linalg.solve(P + mu * L1 + mu * eps * np.eye(m), P @ f)
    # each rank gives a share of the samples, and the first few are given by every rank
    mine = np.union1d(S[COMM.rank::COMM.size], S[:5])
    x = interpolate_flow(cx, mine, f[mine], mu, eps, rtol=1e-12)
    got = cx.gather_global(x, 1)
    assert_allclose_collective(got, ref, rtol=0, atol=1e-9 * np.linalg.norm(ref))
    # all samples on rank 0, none elsewhere
    own = S if COMM.rank == 0 else np.zeros(0, np.int64)
    got0 = cx.gather_global(interpolate_flow(cx, own, f[own], mu, eps, rtol=1e-12), 1)
    assert_allclose_collective(got0, ref, rtol=0, atol=1e-9 * np.linalg.norm(ref))
    # observing every edge with a tiny mu returns the observation
    every = np.arange(m)[COMM.rank::COMM.size]
    got = cx.gather_global(interpolate_flow(cx, every, f[every], 1e-8, 1.0, rtol=1e-13), 1)
    assert_allclose_collective(got, f, rtol=0, atol=1e-6 * np.linalg.norm(f))


def trend_reference(cx, y, mu_d, mu_u):
    """The l1 trend filter by its dual: x = y - D^T z with D = [B1; B2^T], where z
    minimises ||y - D^T z||^2 over |z_i| <= mu_i (bounded least squares)."""
    B1, B2 = serial_boundaries(cx)
    D = np.vstack([B1, B2.T])
    w = np.concatenate([np.full(B1.shape[0], mu_d), np.full(B2.shape[1], mu_u)])
    keep = w > 0
    res = scipy.optimize.lsq_linear(D[keep].T, y, bounds=(-w[keep], w[keep]), method="bvls",
                                    tol=1e-14)
    x = y - D[keep].T @ res.x
    objective = 0.5 * np.sum((x - y) ** 2) + np.sum(w * np.abs(D @ x))
    return x, objective


@pytest.mark.parametrize("partition", PARTITIONS)
def test_trend_filter_equals_bounded_least_squares_dual(partition):
    """The l1 trend filter's flow and objective are those of its dual, solved
    densely by bounded least squares."""
    cx, _ = open_surface(partition)
    rng = np.random.default_rng(9)
    m = cx.simplex_layout(1).global_size
    # a piecewise-constant-divergence flow plus noise
    y = np.where(np.arange(m) < m // 2, 1.0, -0.5) + 0.3 * rng.standard_normal(m)
    with Checks(COMM) as checks:
        for mu in [0.2, (0.4, 0.1), (0.0, 0.3)]:
            md, mu_ = (mu, mu) if np.isscalar(mu) else mu
            ref, obj = trend_reference(cx, y, md, mu_)
            x, info = trend_filter_flow(cx, y, mu, rtol=1e-10, maxiter=20000, return_info=True)
            got = cx.gather_global(x, 1)
            checks.add(info.converged, "converged %s" % (mu,), info)
            checks.add(rel(got, ref) <= 1e-8, "x for mu = %s" % (mu,), rel(got, ref))
            checks.add(abs(info.objective - obj) <= 1e-10 * abs(obj), "objective %s" % (mu,),
                       (info.objective, obj))


@pytest.mark.parametrize("partition", PARTITIONS)
def test_trend_filter_stops_and_reports(partition):
    """At maxiter the trend filter reports no convergence, or raises
    ConvergenceError without return_info."""
    cx, _ = open_surface(partition)
    y = flow_of(cx, 10)
    x, info = trend_filter_flow(cx, y, 0.5, maxiter=3, return_info=True)
    with Checks(COMM) as checks:
        checks.add(not info.converged and info.iterations == 3, "not converged", info)
        checks.add(x.layout == cx.simplex_layout(1), "layout")
    assert_raises_collective(COMM, ConvergenceError, trend_filter_flow, cx, y, 0.5, maxiter=3)


# -- topology inference -----------------------------------------------------------------------
def brute_force_candidates(cx, f):
    """All 3-cliques of the edge graph that are not triangles, with their scores."""
    E = cx.simplices(1)
    index = {tuple(e): i for i, e in enumerate(E)}
    tris = {tuple(t) for t in cx.simplices(2)}
    adj = {}
    for a, b in E:
        adj.setdefault(a, set()).add(b)
    out = []
    for a in adj:
        for b, c in itertools.combinations(sorted(adj[a]), 2):
            if c in adj.get(b, ()) and (a, b, c) not in tris:
                s = f[index[(a, b)]] + f[index[(b, c)]] - f[index[(a, c)]]
                out.append(((a, b, c), s * s))
    out.sort(key=lambda t: (-t[1], t[0]))
    return out


@pytest.mark.parametrize("partition", PARTITIONS)
def test_infer_triangles_equals_brute_force(partition):
    """The inferred triangles and their scores are the brute-force 3-cliques
    in score order, ties broken by vertex ids."""
    cx, opened = open_surface(partition)
    f = flow_of(cx, 11)
    ref = brute_force_candidates(cx, f)
    with Checks(COMM) as checks:
        checks.add(sorted(t for t, _ in ref) == sorted(map(tuple, opened.tolist())),
                   "the candidates are the opened triangles")
        for k in [0, 1, 3, 4, 10]:
            tri, score = infer_triangles(cx, f, k, return_scores=True)
            want = ref[:k]
            checks.add(tri.shape == (len(want), 3), "shape k=%d" % k, tri.shape)
            checks.add([tuple(t) for t in tri.tolist()] == [t for t, _ in want],
                       "triangles k=%d" % k, (tri.tolist(), want))
            checks.add(np.allclose(score, [s for _, s in want], rtol=1e-14), "scores k=%d" % k)
        # a flow whose circulation is the same around every candidate: ties by vertex ids
        E = cx.simplices(1)
        g = np.zeros(len(E))
        for a, b, c in opened:
            g[np.flatnonzero((E[:, 0] == a) & (E[:, 1] == b))] = 1.0
        tie = infer_triangles(cx, g, 2)
        checks.add([tuple(t) for t in tie.tolist()]
                   == sorted(map(tuple, opened.tolist()))[:2], "ties", tie.tolist())


@pytest.mark.parametrize("partition", PARTITIONS)
def test_fill_triangles_moves_harmonic_energy_to_curl(partition):
    """Filling inferred triangles adds them to the complex, lowers beta_1 and
    moves harmonic energy to the curl part."""
    cx, opened = open_surface(partition)
    f = flow_of(cx, 12)
    tri = infer_triangles(cx, f, 2)
    filled = fill_triangles(cx, tri)
    assert_equal_collective(filled.simplices(1), cx.simplices(1))
    want = np.unique(np.vstack([cx.simplices(2), tri]), axis=0)
    assert_equal_collective(filled.simplices(2), want)
    assert_equal_collective(betti_numbers(filled), [1, len(opened) - 2, 0])
    before = hodge_decomposition(cx, f, rtol=1e-12).energies
    after = hodge_decomposition(filled, f, rtol=1e-12).energies
    assert_allclose_collective(after["gradient"], before["gradient"], rtol=1e-8)
    assert_allclose_collective(after["curl"] + after["harmonic"],
                               before["curl"] + before["harmonic"], rtol=1e-8)
    assert_collective(COMM, after["curl"] > before["curl"], "curl energy did not grow")
    # filling every opened triangle leaves no harmonic flow
    full = fill_triangles(cx, opened)
    assert_equal_collective(betti_numbers(full), [1, 0, 0])


# -- bad input --------------------------------------------------------------------------------
def test_bad_flow_inputs_are_errors_on_every_rank():
    """Flows not finite or of the wrong shape, bad or rank-dependent weights,
    samples out of range, conflicting or misaligned, bad k, triangles or
    parameters, and a grid in place of a complex raise on every rank; the
    complex still works afterwards."""
    cx, _ = open_surface("block")
    m = cx.simplex_layout(1).global_size
    f = flow_of(cx, 14)
    nan = f.copy()
    nan[m // 2] = np.nan
    R = COMM.rank
    cases = [
        (ValueError, "finite", denoise_flow, (cx, nan, 1.0), {}),
        (ValueError, "shape", denoise_flow, (cx, np.zeros(m + 1), 1.0), {}),
        (ValueError, "mu", denoise_flow, (cx, f, -1.0), {}),
        (ValueError, "mu", denoise_flow, (cx, f, (1.0, np.inf)), {}),
        (ValueError, "mu", denoise_flow, (cx, f, 1.0 if R else -1.0), {}),   # one rank only
        (ValueError, "empty", interpolate_flow, (cx, [], [], 1.0), {}),
        (ValueError, "range", interpolate_flow, (cx, [0, m], [1.0, 2.0], 1.0), {}),
        (ValueError, "range", interpolate_flow, (cx, [-1], [1.0], 1.0), {}),
        (ValueError, "two different|conflict|differ", interpolate_flow,
         (cx, [3], [float(R)], 1.0), {}) if COMM.size > 1 else
        (ValueError, "two different|conflict|differ", interpolate_flow,
         (cx, [3, 3], [1.0, 2.0], 1.0), {}),
        (ValueError, "finite", interpolate_flow, (cx, [1], [np.nan], 1.0), {}),
        (ValueError, "align|length|same", interpolate_flow, (cx, [1, 2], [1.0], 1.0), {}),
        (ValueError, "eps", interpolate_flow, (cx, [1], [1.0], 1.0, 0.0), {}),
        (ValueError, "k", infer_triangles, (cx, f, -1), {}),
        (ValueError, "finite", infer_triangles, (cx, nan, 2), {}),
        (ValueError, "triangles|vertex", fill_triangles, (cx, [[0, 0, 1]]), {}),
        (ValueError, "triangles|vertex", fill_triangles, (cx, [[0, 1, 10 ** 6]]), {}),
        (ValueError, "rho", trend_filter_flow, (cx, f, 1.0), {"rho": 0.0}),
        (ValueError, "mu|zero", trend_filter_flow, (cx, f, 0.0), {}),
    ]
    for exc, match, func, args, kwargs in cases:
        assert_raises_collective(COMM, exc, func, *args, match=match, **kwargs)
    grid = Grid((4, 4), COMM)
    for func, args in [(denoise_flow, (grid, f, 1.0)), (infer_triangles, (grid, f, 1))]:
        assert_raises_collective(COMM, TypeError, func, *args, match="to_complex")
    # the complex still works after all that: nothing was left half-done
    x = denoise_flow(cx, f, 1.0)
    assert_collective(COMM, np.isfinite(cx.gather_global(x, 1)).all(), "denoise after errors")
