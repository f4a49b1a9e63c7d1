"""Topological signal processing (issue 18) against dense serial references.

Every reference is built here from ``cx.simplices(1)`` and ``cx.simplices(2)``
alone (boundary matrices by the alternating-sign rule, dense Laplacians,
``numpy.linalg.eigh``, ``scipy.optimize.lsq_linear``), not from the library's
own assembly, and each distributed result is compared to it at whatever
number of ranks the suite runs with, under the block and the METIS vertex
partitions.
"""

import itertools
import tracemalloc

import numpy as np
import pytest
import scipy.optimize
from mpi4py import MPI

from dmsolve.krylov import ConvergenceError
from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, assert_raises_collective)
from test_topology_ref import grid_cells
from topology import (Grid, SimplicialComplex, SimplicialFilter, betti_numbers,
                      chebyshev_filter, component_filter, denoise_flow, design_filter,
                      fill_triangles, hodge_decomposition, hodge_eigenpairs, infer_triangles,
                      interpolate_flow, laplacian_parts, spectral_bounds,
                      trend_filter_flow)

COMM = MPI.COMM_WORLD
PARTITIONS = ["block", "metis"]


# -- the complex and its serial references ----------------------------------------------------
def surface_with_open_triangles(nx=7, ny=6, opened=(3, 17, 30, 44)):
    """A triangulated rectangle with some triangles left open (their edges
    kept): beta = (1, len(opened), 0), and the open triangles are the only
    3-cliques that are not triangles (the candidates of infer_triangles)."""
    tris = grid_cells((nx, ny))
    keep = np.array([t for i, t in enumerate(tris) if i not in opened])
    edges = np.array([e for i in opened for e in itertools.combinations(tris[i], 2)])
    return keep, edges, tris[list(opened)]


def build(partition, **kw):
    tris, edges, opened = surface_with_open_triangles(**kw)
    cx = SimplicialComplex([tris[COMM.rank::COMM.size], edges[COMM.rank::COMM.size]], COMM,
                           partition=partition)
    return cx, opened


def serial_boundaries(cx):
    """Dense B1 (vertices x edges) and B2 (edges x triangles) from the simplex lists."""
    E, T = cx.simplices(1), cx.simplices(2)
    nv = int(E.max()) + 1
    B1 = np.zeros((nv, len(E)))
    B1[E[:, 0], np.arange(len(E))] = -1.0
    B1[E[:, 1], np.arange(len(E))] = 1.0
    index = {tuple(e): i for i, e in enumerate(E)}
    B2 = np.zeros((len(E), len(T)))
    for j, (a, b, c) in enumerate(T):
        B2[index[(b, c)], j] += 1.0
        B2[index[(a, c)], j] -= 1.0
        B2[index[(a, b)], j] += 1.0
    return B1, B2


def serial_parts(cx):
    B1, B2 = serial_boundaries(cx)
    return B1.T @ B1, B2 @ B2.T


def matrix_poly(L, c):
    """sum_i c[i] L^i, dense."""
    out, P = np.zeros_like(L), np.eye(len(L))
    for ci in c:
        out += ci * P
        P = P @ L
    return out


def matrix_cheb(L, c, a):
    """sum_i c[i] T_i(2 L / a - I), dense."""
    A = 2.0 * L / a - np.eye(len(L))
    T = [np.eye(len(L)), A]
    while len(T) < len(c):
        T.append(2.0 * A @ T[-1] - T[-2])
    return sum(ci * Ti for ci, Ti in zip(c, T))


def flow_of(cx, seed):
    return np.random.default_rng(seed).standard_normal(cx.simplex_layout(1).global_size)


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b))


# -- filters ----------------------------------------------------------------------------------
@pytest.mark.parametrize("partition", PARTITIONS)
def test_monomial_and_chebyshev_filters_equal_dense_polynomials(partition):
    cx, _ = build(partition)
    Ld, Lu = serial_parts(cx)
    f = flow_of(cx, 1)
    lower, upper = [0.5, -0.2, 0.03, 0.004], [0.25, 0.1, -0.02]
    with Checks(COMM) as checks:
        H = SimplicialFilter(cx, 1, lower=lower, upper=upper)
        ref = (matrix_poly(Ld, lower) + matrix_poly(Lu, upper)) @ f
        got = cx.gather_global(H.apply(f), 1)
        checks.add(rel(got, ref) <= 1e-12, "monomial", rel(got, ref))
        checks.add(H.orders == (3, 2), "orders", H.orders)
        # the frequency response is the filter's action on eigenvectors
        lam, V = np.linalg.eigh(Ld)
        v = V[:, -1]
        got_v = cx.gather_global(H.apply(v), 1)
        want = H.response(lam[-1], "down") * v
        checks.add(rel(got_v, want) <= 1e-10, "response on an L_down eigenvector",
                   rel(got_v, want))
        checks.add(abs(H.harmonic_response - (lower[0] + upper[0])) <= 1e-15, "harmonic")
        # Chebyshev basis, order 20, on given intervals and on Lanczos bounds
        rng = np.random.default_rng(2)
        cl, cu = rng.standard_normal(21) / 10, rng.standard_normal(9) / 10
        for spectrum in [(10.0, 7.0), None]:
            C = SimplicialFilter(cx, 1, lower=cl, upper=cu, basis="chebyshev", spectrum=spectrum)
            a, b = C.spectrum
            ref = (matrix_cheb(Ld, cl, a) + matrix_cheb(Lu, cu, b)) @ f
            got = cx.gather_global(C.apply(f), 1)
            checks.add(rel(got, ref) <= 1e-11, "chebyshev %s" % (spectrum,), rel(got, ref))
        # a filter of only one part, and of order 0
        U = SimplicialFilter(cx, 1, upper=[0.0, 1.0])
        got = cx.gather_global(U.apply(f), 1)
        checks.add(rel(got, Lu @ f) <= 1e-13, "upper only", rel(got, Lu @ f))
        Z = SimplicialFilter(cx, 1, lower=[2.5])
        checks.add(np.allclose(cx.gather_global(Z.apply(f), 1), 2.5 * f, rtol=1e-15),
                   "order 0")
        # k = 0 and k = 2 signals: L_0 has no down part, L_2 no up part here
        L0 = serial_boundaries(cx)[0] @ serial_boundaries(cx)[0].T
        g = np.random.default_rng(3).standard_normal(cx.simplex_layout(0).global_size)
        V0 = SimplicialFilter(cx, 0, upper=[1.0, -0.1, 0.01])
        got = cx.gather_global(V0.apply(g), 0)
        ref = matrix_poly(L0, [1.0, -0.1, 0.01]) @ g
        checks.add(rel(got, ref) <= 1e-13, "k = 0", rel(got, ref))


@pytest.mark.parametrize("partition", PARTITIONS)
def test_laplacian_parts_are_assembled_once_and_given_as_copies(partition):
    cx, _ = build(partition)
    Ld, Lu = serial_parts(cx)
    f = flow_of(cx, 4)
    with Checks(COMM) as checks:
        down, up = laplacian_parts(cx, 1)
        for name, L, ref in [("down", down, Ld), ("up", up, Lu)]:
            got = cx.gather_global(L.matvec(SimplicialFilter(cx, 1, lower=[1.0]).apply(f)), 1)
            checks.add(rel(got, ref @ f) <= 1e-14, name, rel(got, ref @ f))
        # changing a copy leaves the complex's own matrices alone
        down.diag.data[:] = 0.0
        H, G = SimplicialFilter(cx, 1, lower=[0.0, 1.0]), SimplicialFilter(cx, 1, upper=[0.0, 1.0])
        got = cx.gather_global(H.apply(f), 1)
        checks.add(rel(got, Ld @ f) <= 1e-14, "after changing a copy", rel(got, Ld @ f))
        checks.add(H.L_down is G.L_down and H.L_up is G.L_up, "one assembly per complex")
        checks.add(down is not H.L_down, "a copy")


@pytest.mark.parametrize("partition", PARTITIONS)
def test_spectral_bounds_bound_the_spectra_tightly(partition):
    cx, _ = build(partition)
    Ld, Lu = serial_parts(cx)
    top_d, top_u = np.linalg.eigvalsh(Ld)[-1], np.linalg.eigvalsh(Lu)[-1]
    bd, bu = spectral_bounds(cx, 1)
    with Checks(COMM) as checks:
        checks.add(top_d <= bd <= 1.02 * top_d, "down", (bd, top_d))
        checks.add(top_u <= bu <= 1.02 * top_u, "up", (bu, top_u))
        # one Lanczos step cannot resolve the top: the Gershgorin bound still holds
        bd1, bu1 = spectral_bounds(cx, 1, steps=1)
        checks.add(bd1 >= top_d and bu1 >= top_u, "one step", (bd1, bu1))
        # L_up of 2-simplices is zero on a surface
        checks.add(spectral_bounds(cx, 2)[1] == 0.0, "zero part")


@pytest.mark.parametrize("partition", PARTITIONS)
def test_designed_filters_match_their_responses(partition):
    cx, _ = build(partition)
    Ld, Lu = serial_parts(cx)
    f = flow_of(cx, 4)
    lam_d, V_d = np.linalg.eigh(Ld)
    lam_u = np.linalg.eigvalsh(Lu)
    with Checks(COMM) as checks:
        # a polynomial target of degree 2 is reproduced exactly by a degree-4 fit,
        # in both bases (the two targets agree at 0, the harmonic response)
        for basis in ["chebyshev", "monomial"]:
            H = design_filter(cx, 1, lower=lambda x: 1 - 0.3 * x + 0.02 * x ** 2,
                              upper=lambda x: 1 + 0.5 * x, harmonic=1.0, order=4, basis=basis)
            ref = (matrix_poly(Ld, [1.0, -0.3, 0.02]) + 0.5 * Lu) @ f
            got = cx.gather_global(H.apply(f), 1)
            checks.add(rel(got, ref) <= 1e-8, "exact fit, %s" % basis, rel(got, ref))
        # a smooth low-pass target: the fit is close at the true eigenvalues (the
        # pole at -1 gives Chebyshev errors ~ 1.95^-n on [0, 8.6]: ~1e-7 at
        # n = 24), and the filter acts on each eigenvector by its response
        target = lambda x: 1.0 / (1.0 + x)      # noqa: E731
        for make in (lambda: design_filter(cx, 1, lower=target, upper=target, harmonic=1.0,
                                           order=24),
                     lambda: chebyshev_filter(cx, 1, lower=target, upper=target, order=24)):
            H = make()
            err = max(np.max(np.abs(H.response(lam_d, "down") - target(lam_d))),
                      np.max(np.abs(H.response(lam_u, "up") - target(lam_u))))
            checks.add(err <= 1e-5, "fit error at the eigenvalues", err)
            v = V_d[:, -5]                  # a gradient flow: L_up v = 0
            got = cx.gather_global(H.apply(v), 1)
            want = H.response(lam_d[-5], "down") * v
            checks.add(rel(got, want) <= 1e-10, "filter vs response", rel(got, want))
        # fitted on given frequencies (the exact spectrum): the response there is
        # the least-squares fit of the target
        H = design_filter(cx, 1, lower=target, order=3, frequencies=(lam_d, None))
        A = np.vander(lam_d, 4, increasing=True)
        c = np.linalg.lstsq(A, target(lam_d), rcond=None)[0]
        checks.add(np.allclose(H.response(lam_d, "down"), A @ c, rtol=1e-9, atol=1e-12),
                   "least squares on the given frequencies")


@pytest.mark.parametrize("component", ["gradient", "curl", "harmonic"])
def test_component_filters_extract_the_hodge_parts(component):
    cx, _ = build("block")
    Ld, Lu = serial_parts(cx)
    lam_d, lam_u = np.linalg.eigvalsh(Ld), np.linalg.eigvalsh(Lu)
    f = flow_of(cx, 5)
    hd = hodge_decomposition(cx, f, rtol=1e-13)
    exact = cx.gather_global(getattr(hd, component), 1)
    nz = lambda lam: lam[lam > 1e-9]     # noqa: E731
    cutoff = 0.5 * min(nz(lam_d).min(), nz(lam_u).min())
    H = component_filter(cx, component, cutoff=cutoff, order=200)
    got = cx.gather_global(H.apply(f), 1)
    # the spectral bound: the largest deviation of the response from the 0/1
    # indicator of the component over the true spectrum, times ||f||
    want = {"gradient": (1, 0, 0), "curl": (0, 1, 0), "harmonic": (0, 0, 1)}[component]
    dev = max(np.max(np.abs(H.response(nz(lam_d), "down") - want[0])),
              np.max(np.abs(H.response(nz(lam_u), "up") - want[1])),
              abs(H.harmonic_response - want[2]))
    err = np.linalg.norm(got - exact)
    with Checks(COMM) as checks:
        checks.add(err <= dev * np.linalg.norm(f) * (1 + 1e-6) + 1e-9, "within the bound",
                   (err, dev * np.linalg.norm(f)))
        checks.add(err <= 0.05 * np.linalg.norm(f), "accurate", err / np.linalg.norm(f))


# -- edge-flow estimation ---------------------------------------------------------------------
@pytest.mark.parametrize("partition", PARTITIONS)
def test_denoise_flow_equals_dense_solve(partition):
    cx, _ = build(partition)
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
    cx, _ = build(partition)
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
    cx, _ = build(partition)
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
    cx, _ = build(partition)
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
    cx, opened = build(partition)
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
    cx, opened = build(partition)
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


# -- spectra ----------------------------------------------------------------------------------
@pytest.mark.parametrize("partition", PARTITIONS)
def test_hodge_eigenpairs_equal_eigvalsh_and_betti(partition):
    cx, opened = build(partition)
    Ld, Lu = serial_parts(cx)
    L1 = Ld + Lu
    lam = np.linalg.eigvalsh(L1)
    beta = betti_numbers(cx)
    nev = beta[1] + 3
    with Checks(COMM) as checks:
        for which, want in [("smallest", lam[:nev]), ("largest", lam[::-1][:3])]:
            ep = hodge_eigenpairs(cx, 1, nev if which == "smallest" else 3, which=which,
                                  tol=1e-9)
            checks.add(ep.converged, "%s converged" % which)
            checks.add(np.allclose(ep.eigenvalues, want, rtol=1e-8, atol=1e-8),
                       "%s eigenvalues" % which, (ep.eigenvalues, want))
            V = np.column_stack([cx.gather_global(v, 1) for v in ep.eigenvectors])
            checks.add(np.allclose(V.T @ V, np.eye(V.shape[1]), atol=1e-10), "orthonormal")
            res = np.linalg.norm(L1 @ V - V * ep.eigenvalues, axis=0)
            checks.add(np.all(res <= 1e-8 * lam[-1]), "%s residuals" % which, res)
            checks.add(np.allclose(res, ep.residual_norms, rtol=1e-3, atol=1e-12),
                       "reported residuals")
        ep = hodge_eigenpairs(cx, 1, nev, tol=1e-9)
        checks.add(ep.harmonic_dimension == beta[1] == len(opened), "harmonic dimension",
                   (ep.harmonic_dimension, beta))
        # the up part's smallest nonzero frequencies, and L_0 (beta_0 = 1)
        up = hodge_eigenpairs(cx, 1, 2, which="largest", part="up", tol=1e-9)
        checks.add(np.allclose(up.eigenvalues, np.linalg.eigvalsh(Lu)[::-1][:2], rtol=1e-8),
                   "up part", up.eigenvalues)
        B1 = serial_boundaries(cx)[0]
        e0 = hodge_eigenpairs(cx, 0, 3, tol=1e-9)
        checks.add(np.allclose(e0.eigenvalues, np.linalg.eigvalsh(B1 @ B1.T)[:3],
                               rtol=1e-8, atol=1e-8), "L_0", e0.eigenvalues)
        checks.add(e0.harmonic_dimension == beta[0] == 1, "beta_0")


# -- allocation -------------------------------------------------------------------------------
def test_filter_application_allocates_nothing_per_matvec():
    tris = grid_cells((80, 80))          # 18,802 edges
    cx = SimplicialComplex([tris[COMM.rank::COMM.size]], COMM)
    H = SimplicialFilter(cx, 1, lower=np.full(16, 0.01), upper=np.full(16, 0.01),
                         basis="chebyshev")
    x = cx.cochain(flow_of(cx, 13), 1)
    out = x.zeros_like()
    H.apply(x, out=out)                  # work vectors and halo buffers made here
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(3):
        H.apply(x, out=out)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    vector_bytes = 8 * x.local.size
    # 96 matvecs and 3 finite checks: a temporary vector per matvec, or a
    # mask of the vector per check, would show at the peak (about 5 KB of
    # Python objects do, whatever the order and the vector size)
    with Checks(COMM) as checks:
        checks.add(current - base <= 1024, "retained", current - base)
        checks.add(peak - base <= min(8192, vector_bytes // 4), "peak",
                   (peak - base, vector_bytes))


# -- bad input --------------------------------------------------------------------------------
def test_bad_inputs_are_errors_on_every_rank():
    cx, _ = build("block")
    m = cx.simplex_layout(1).global_size
    f = flow_of(cx, 14)
    nan = f.copy()
    nan[m // 2] = np.nan
    H = SimplicialFilter(cx, 1, lower=[1.0, 0.1])
    R = COMM.rank
    cases = [
        (ValueError, "shape", H.apply, (f[:-1],), {}),
        (ValueError, "finite", H.apply, (nan,), {}),
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
        (ValueError, "order", design_filter, (cx, 1), {"lower": 1.0, "order": -1}),
        (ValueError, "order", chebyshev_filter, (cx, 1), {"lower": 1.0, "order": -2}),
        (ValueError, "order", component_filter, (cx, "curl"), {"cutoff": 0.1, "order": -1}),
        (ValueError, "basis", SimplicialFilter, (cx, 1, [1.0]), {"basis": "legendre"}),
        (ValueError, "coefficient", SimplicialFilter, (cx, 1, [], []), {}),
        (ValueError, "finite", SimplicialFilter, (cx, 1, [1.0, np.nan]), {}),
        (ValueError, "k must", SimplicialFilter, (cx, 3, [1.0]), {}),
        (ValueError, "component", component_filter, (cx, "divergence"), {"cutoff": 0.1}),
        (ValueError, "cutoff", component_filter, (cx, "curl"), {"cutoff": 0.0}),
        (ValueError, "k", infer_triangles, (cx, f, -1), {}),
        (ValueError, "finite", infer_triangles, (cx, nan, 2), {}),
        (ValueError, "triangles|vertex", fill_triangles, (cx, [[0, 0, 1]]), {}),
        (ValueError, "triangles|vertex", fill_triangles, (cx, [[0, 1, 10 ** 6]]), {}),
        (ValueError, "nev", hodge_eigenpairs, (cx, 1, 0), {}),
        (ValueError, "which", hodge_eigenpairs, (cx, 1, 2), {"which": "middle"}),
        (ValueError, "rho", trend_filter_flow, (cx, f, 1.0), {"rho": 0.0}),
        (ValueError, "mu|zero", trend_filter_flow, (cx, f, 0.0), {}),
        (ValueError, "steps", spectral_bounds, (cx, 1), {"steps": 0}),
    ]
    for exc, match, func, args, kwargs in cases:
        assert_raises_collective(COMM, exc, func, *args, match=match, **kwargs)
    grid = Grid((4, 4), COMM)
    for func, args in [(denoise_flow, (grid, f, 1.0)), (SimplicialFilter, (grid, 1, [1.0])),
                       (infer_triangles, (grid, f, 1)), (hodge_eigenpairs, (grid, 1, 2))]:
        assert_raises_collective(COMM, TypeError, func, *args, match="to_complex")
    assert_raises_collective(COMM, TypeError, SimplicialFilter, cx, 1, ["a"])
    # the complex still works after all that: nothing was left half-done
    x = denoise_flow(cx, f, 1.0)
    assert_collective(COMM, np.isfinite(cx.gather_global(x, 1)).all(), "denoise after errors")
