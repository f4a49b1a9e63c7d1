"""Block Jacobi and additive Schwarz: restricted Schwarz against a serial
reference, fewer iterations than no preconditioner, overlap that helps, and
large overlaps that stop when nothing is left to add."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve.gallery as gallery
import preconditioners
from bad_inputs import check_bad_input, make_pc
from dmsolve.krylov import cg, gmres, solve
from mpitest import assert_allclose_collective, assert_collective

COMM = MPI.COMM_WORLD


def _iters(A, M, method=cg, rtol=1e-8, maxiter=3000):
    b = gallery.rhs(A, "random")
    x, info = method(A, b, rtol=rtol, M=M, maxiter=maxiter)
    assert_collective(COMM, info.converged, "%s did not converge: %s" % (M, info.reason))
    return info.iterations


def test_asm_matches_serial_restricted_schwarz():
    """asm equals the serial restricted additive Schwarz."""
    A = gallery.poisson2d(11, COMM)
    S = A.to_scipy().tocsr()
    b = gallery.rhs(A, "random")
    bg = b.gather()
    R = A.row_layout.ranges
    for overlap, restricted in ((1, True), (2, True), (1, False)):
        M = preconditioners.make("asm", A, overlap=overlap, sub="lu", restricted=restricted)
        ref = np.zeros_like(bg)
        for p in range(COMM.size):
            own = np.arange(R[p], R[p + 1])
            ids = own
            for _ in range(overlap):
                ids = np.union1d(ids, S[ids].indices)
            sol = np.linalg.solve(S[ids][:, ids].toarray(), bg[ids])
            if restricted:
                ref[own] += sol[np.searchsorted(ids, own)]
            else:
                ref[ids] += sol
        assert_allclose_collective(M.apply(b).gather(), ref, rtol=1e-10, atol=1e-12)


# -- convergence ---------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["poisson2d-64", "poisson3d-16"])
def test_bjacobi_and_asm_reduce_cg_iterations(problem):
    """bjacobi, asm and cheby cut CG's iterations by at least 40%."""
    A = gallery.poisson2d(64, COMM) if problem == "poisson2d-64" else gallery.poisson3d(16, COMM)
    plain = _iters(A, None)
    bj = _iters(A, preconditioners.make("bjacobi", A, sub="ilu0"))
    # CG needs a symmetric preconditioner: classical (not restricted) Schwarz
    asm = _iters(A, preconditioners.make("asm", A, overlap=1, restricted=False))
    cheb = _iters(A, preconditioners.make("cheby", A, degree=4))
    # a 40% cut in iterations is the least we accept
    assert_collective(COMM, max(bj, asm, cheb) < 0.6 * plain,
                      "plain %d, bjacobi %d, asm %d, cheby %d" % (plain, bj, asm, cheb))


@pytest.mark.parametrize("problem", ["poisson2d-64", "poisson3d-16"])
def test_asm_overlap1_beats_bjacobi_gmres(problem):
    """asm with overlap 1 takes fewer GMRES iterations than bjacobi."""
    A = gallery.poisson2d(64, COMM) if problem == "poisson2d-64" else gallery.poisson3d(16, COMM)
    bj = _iters(A, preconditioners.make("bjacobi", A, sub="ilu0"), method=gmres)
    ras = _iters(A, preconditioners.make("asm", A, overlap=1, sub="ilu0"), method=gmres)
    if COMM.size == 1:   # one rank: no overlap exists, ASM is block Jacobi
        assert_collective(COMM, ras == bj, "asm %d, bjacobi %d" % (ras, bj))
    else:
        assert_collective(COMM, ras < bj, "asm %d, bjacobi %d" % (ras, bj))


def test_asm_overlap1_exact_solves_beats_bjacobi_cg():
    """asm with overlap 1 and exact local solves takes fewer CG iterations than bjacobi."""
    A = gallery.poisson2d(48, COMM)
    bj = _iters(A, preconditioners.make("bjacobi", A, sub="lu"))
    asm = _iters(A, preconditioners.make("asm", A, overlap=1, sub="lu", restricted=False))
    assert_collective(COMM, asm <= bj, "asm %d, bjacobi %d" % (asm, bj))


def test_gmres_asm_solves_convection_diffusion():
    """GMRES + asm solves convection-diffusion."""
    A = gallery.convection_diffusion(48, COMM)
    b = gallery.rhs(A, "random")
    x, info = solve(A, b, method="gmres", pc=("asm", {"overlap": 1}), rtol=1e-8, maxiter=500)
    assert_collective(COMM, info.converged, str(info.reason))
    r = b - A.matvec(x)
    assert_collective(COMM, r.norm() <= 1e-7 * b.norm())
    plain = _iters(A, None, method=gmres, maxiter=5000)
    assert_collective(COMM, info.iterations < plain, "%d vs %d" % (info.iterations, plain))


def test_bjacobi_ilut_and_lu_with_gmres():
    """bjacobi with ILUT and LU local solves converges under GMRES."""
    A = gallery.convection_diffusion(32, COMM)
    for sub in ("ilut", "lu"):
        it = _iters(A, preconditioners.make("bjacobi", A, sub=sub), method=gmres)
        assert_collective(COMM, it < 60, "%s: %d" % (sub, it))


@pytest.mark.timeout(120)
def test_asm_huge_overlap_stops_when_nothing_is_left_to_add():
    """A huge overlap stops growing when nothing is left to add."""
    # each layer is a collective fetch: 10^12 of them must not be attempted
    A = gallery.poisson2d(12, COMM)
    huge = preconditioners.make("asm", A, overlap=10 ** 12, sub="lu")
    whole = preconditioners.make("asm", A, overlap=30, sub="lu")   # > the graph's diameter
    r = gallery.rhs(A, "random")
    assert_allclose_collective(huge(r).local, whole(r).local, rtol=1e-12, atol=1e-14)
    # with the whole graph in every rank's overlap, RAS is the exact inverse
    assert_allclose_collective((A @ huge(r)).local, r.local, rtol=1e-8, atol=1e-10)


# -- bad input: the same exception on every rank -------------------------------------------

BAD_INPUTS = [
    ("asm-negative-overlap", ValueError, "overlap",
     lambda e: preconditioners.make("asm", e.A, overlap=-1)),
    ("asm-unknown-local-solver", ValueError, "local solver",
     lambda e: preconditioners.make("asm", e.A, sub="nope")),
    ("bjacobi-sub-options-not-a-dict", TypeError, "dict",
     make_pc("bjacobi", sub="ilut", sub_options=3)),
    ("bjacobi-ilut-negative-drop-tol", ValueError, "drop_tol",
     make_pc("bjacobi", sub="ilut", sub_options={"drop_tol": -1.0})),
    ("asm-ilut-fill-factor-below-one", ValueError, "fill_factor",
     make_pc("asm", sub="ilut", sub_options={"fill_factor": 0.5})),
    ("asm-restricted-not-a-bool", TypeError, "restricted", make_pc("asm", restricted="no")),
]


@pytest.mark.parametrize("exc, match, call", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_raises_the_same_exception_on_every_rank(bad_input_env, request, exc, match,
                                                           call):
    """Each case of BAD_INPUTS raises the same exception type, with a message
    that matches, on every rank (or works, at one rank, where a COMM_SELF
    operand is valid)."""
    check_bad_input(bad_input_env, request, exc, match, call)
