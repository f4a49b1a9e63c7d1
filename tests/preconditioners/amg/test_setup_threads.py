"""The AMG set-up on threads: every level's operator and prolongator (their
arrays, to the bit) is the same at 1, 2 and 4 threads, and the same as the
hierarchy built with scipy's sparse products; CG + AMG takes the same
iterations. The blocks are made small so that the threaded products, the
strength measure and the transposes split even these small problems."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import preconditioners
import preconditioners._dist as dist
from amg_cases import amg_problem
from dmsolve import spgemm, threads
from dmsolve.krylov import cg
from dmsolve import gallery
from mpitest import assert_collective
from preconditioners.amg import galerkin, reproducible, smooth, strength

COMM = MPI.COMM_WORLD
CASES = [
    ("poisson3d-16", {}),                                   # classical, filtered level 0
    ("poisson2d-60", {"strength": ("symmetric", {"theta": 0.1})}),
    ("poisson2d-100", {"block_size": 2}),                    # node-by-node strength
    ("anisotropic_diffusion-40", {}),
    ("poisson3d-14", {"reproducible": True, "theta": 0.1}),
]


def _matrix_arrays(M):
    return [M.diag.indptr, M.diag.indices, M.diag.data, M.offd.indptr, M.offd.indices,
            M.offd.data, M.ghosts]


def hierarchy_arrays(pc) -> list:
    """Every array of every level's A and P on this rank, and the coarsest A."""
    out = []
    for level in pc.levels:
        if level.active:
            out += _matrix_arrays(level.A) + _matrix_arrays(level.P)
    if pc.coarse_A is not None:
        out += _matrix_arrays(pc.coarse_A)
    return out


def same_bits(xs, ys) -> bool:
    return len(xs) == len(ys) and all(
        x.dtype == y.dtype and x.shape == y.shape
        and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                           np.ascontiguousarray(y).view(np.uint8)) for x, y in zip(xs, ys))


def build(name, options, k):
    """The hierarchy and CG's iterations on ``k`` threads."""
    A = amg_problem(name, COMM)
    with threads.using(k):
        pc = preconditioners.make("amg", A, **options)
        b = gallery.rhs(A, "ones")
        _, info = cg(A, b, rtol=1e-8, M=pc, maxiter=200)
    return pc, info.iterations


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, so that every threaded pass splits."""
    monkeypatch.setattr(spgemm, "MIN_BLOCK_ENTRIES", 64)
    monkeypatch.setattr(strength, "MIN_BLOCK_ROWS", 16)


def scipy_matmat(A, B, threads=None):
    C = sp.csr_matrix(A @ B)
    C.sort_indices()
    return C


@pytest.fixture
def scipy_products(monkeypatch):
    """The set-up's sparse products as they were: scipy's product, scipy's
    transpose, scipy's product with the diagonal, and the strength graph
    built through COO (the reproducible hierarchy's products too)."""
    monkeypatch.setattr(dist, "local_matmat", scipy_matmat)
    monkeypatch.setattr(dist, "local_block_matmat", lambda As, Bs, threads=None: scipy_matmat(
        sp.hstack(As, format="csr"), sp.vstack(Bs, format="csr")))
    monkeypatch.setattr(galerkin, "matmat", scipy_matmat)
    monkeypatch.setattr(reproducible, "matmat", scipy_matmat)
    monkeypatch.setattr(galerkin, "transpose", lambda A, threads=None: A.T.tocsr())

    def subtract_scaled(T_loc, FT, w):
        P = sp.csr_matrix(T_loc - sp.diags(w) @ FT)
        P.eliminate_zeros()
        return P

    monkeypatch.setattr(smooth, "subtract_scaled", subtract_scaled)
    monkeypatch.setattr(reproducible, "subtract_scaled", subtract_scaled)
    monkeypatch.setattr(strength, "_takes_kernels", lambda A: False)
    monkeypatch.setattr(strength, "matmat", scipy_matmat)
    monkeypatch.setattr(strength, "transpose", lambda A, threads=None: A.T.tocsr())


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,options", CASES, ids=[c[0] for c in CASES])
def test_hierarchy_is_the_same_at_any_thread_count(small_blocks, name, options):
    """Levels built on 2 and 4 threads equal those on 1 thread, to the bit."""
    ref, its = build(name, options, 1)
    for k in (2, 4):
        pc, its_k = build(name, options, k)
        assert_collective(COMM, len(pc.levels) == len(ref.levels) > 1
                          and same_bits(hierarchy_arrays(pc), hierarchy_arrays(ref))
                          and its_k == its,
                          "%s: %d threads differ from 1 (%d vs %d iterations)"
                          % (name, k, its_k, its))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,options", CASES, ids=[c[0] for c in CASES])
def test_hierarchy_is_the_scipy_built_one(small_blocks, name, options, request):
    """Levels built on 2 threads equal those built with scipy's products."""
    pc, its = build(name, options, 2)
    request.getfixturevalue("scipy_products")
    ref, its_ref = build(name, options, 1)
    assert_collective(COMM, len(pc.levels) == len(ref.levels) > 1
                      and same_bits(hierarchy_arrays(pc), hierarchy_arrays(ref))
                      and its == its_ref,
                      "%s: threaded set-up differs from scipy's (%d vs %d iterations)"
                      % (name, its, its_ref))
