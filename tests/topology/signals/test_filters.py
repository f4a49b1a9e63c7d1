"""Polynomial filters of simplicial signals (SimplicialFilter, design_filter,
chebyshev_filter, component_filter, spectral_bounds, laplacian_parts)
against dense polynomials of the serial Laplacians and their spectra.
Every reference is built from ``cx.simplices(1)`` and ``cx.simplices(2)``
alone (tests/topology_reference.py), not from the library's own assembly,
under the block and the METIS vertex partitions."""

import tracemalloc

import numpy as np
import pytest
from mpi4py import MPI

from mpitest import Checks, assert_raises_collective
from topology import (Grid, SimplicialComplex, SimplicialFilter, chebyshev_filter,
                      component_filter, design_filter, hodge_decomposition, laplacian_parts,
                      spectral_bounds)
from topology_cases import flow_of, open_surface, rel
from topology_reference import grid_cells, serial_boundaries, serial_parts

COMM = MPI.COMM_WORLD
PARTITIONS = ["block", "metis"]


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


# -- filters ----------------------------------------------------------------------------------
@pytest.mark.parametrize("partition", PARTITIONS)
def test_monomial_and_chebyshev_filters_equal_dense_polynomials(partition):
    """Monomial and Chebyshev filters of edge, vertex and one-part signals
    are the dense polynomials, and act on eigenvectors by their response."""
    cx, _ = open_surface(partition)
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
    """laplacian_parts gives copies of the complex's one assembly of the up
    and down Laplacians: changing a copy changes no filter."""
    cx, _ = open_surface(partition)
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
    """The bounds are above the largest eigenvalues by at most 2%, above them
    after one Lanczos step still, and zero for a zero part."""
    cx, _ = open_surface(partition)
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
    """Designed filters reproduce polynomial targets exactly, fit smooth
    targets at the true eigenvalues, and are least-squares fits on given
    frequencies."""
    cx, _ = open_surface(partition)
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
    """A component filter gives the gradient, curl or harmonic part within
    the bound of its response's deviation on the spectrum."""
    cx, _ = open_surface("block")
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


# -- allocation -------------------------------------------------------------------------------
def test_filter_application_allocates_nothing_per_matvec():
    """After the first application a filter retains nothing and allocates no
    vector per matvec."""
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
def test_bad_filter_inputs_are_errors_on_every_rank():
    """Signals of the wrong shape or not finite, negative orders, unknown
    bases and components, empty or non-finite coefficients, a bad k, cutoff
    or number of steps, and a grid in place of a complex raise on every rank."""
    cx, _ = open_surface("block")
    f = flow_of(cx, 14)
    m = cx.simplex_layout(1).global_size
    nan = f.copy()
    nan[m // 2] = np.nan
    H = SimplicialFilter(cx, 1, lower=[1.0, 0.1])
    cases = [
        (ValueError, "shape", H.apply, (f[:-1],), {}),
        (ValueError, "finite", H.apply, (nan,), {}),
        (ValueError, "order", design_filter, (cx, 1), {"lower": 1.0, "order": -1}),
        (ValueError, "order", chebyshev_filter, (cx, 1), {"lower": 1.0, "order": -2}),
        (ValueError, "order", component_filter, (cx, "curl"), {"cutoff": 0.1, "order": -1}),
        (ValueError, "basis", SimplicialFilter, (cx, 1, [1.0]), {"basis": "legendre"}),
        (ValueError, "coefficient", SimplicialFilter, (cx, 1, [], []), {}),
        (ValueError, "finite", SimplicialFilter, (cx, 1, [1.0, np.nan]), {}),
        (ValueError, "k must", SimplicialFilter, (cx, 3, [1.0]), {}),
        (ValueError, "component", component_filter, (cx, "divergence"), {"cutoff": 0.1}),
        (ValueError, "cutoff", component_filter, (cx, "curl"), {"cutoff": 0.0}),
        (ValueError, "steps", spectral_bounds, (cx, 1), {"steps": 0}),
    ]
    for exc, match, func, args, kwargs in cases:
        assert_raises_collective(COMM, exc, func, *args, match=match, **kwargs)
    grid = Grid((4, 4), COMM)
    assert_raises_collective(COMM, TypeError, SimplicialFilter, grid, 1, [1.0],
                             match="to_complex")
    assert_raises_collective(COMM, TypeError, SimplicialFilter, cx, 1, ["a"])
