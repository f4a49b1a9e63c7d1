"""GeMSLR's multilevel ordering: interiors separated and rank-count
independent, nothing gathered above the gather limit, uncoupled parts and
more parts than rows."""

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.linalg import spsolve

import dmsolve.gallery as gallery
import preconditioners
from dmsolve import DistCSR
from dmsolve.krylov import fgmres
from mpitest import assert_allclose_collective, assert_collective, assert_equal_collective
from preconditioners.gemslr import multilevel_order

COMM = MPI.COMM_WORLD


def test_gemslr_more_parts_than_rows_is_one_level():
    """More parts than rows gives one level."""
    A = gallery.shifted_laplacian(6, COMM, shift=0.1, ny=5, nz=7)       # 210 rows
    huge = preconditioners.make("gemslr", A, ncomp=10 ** 12)
    d = huge.describe()
    assert_collective(COMM, d["nlev"] == 1 and d["ncomp"] == 210, "%s" % d)


SMALL = dict(nlev=3, ncomp=4, ilu_droptol=1e-3, ilu_max_row_nnz=50)


def _small(shift=0.2, comm=COMM):
    # 11 x 9 x 13 = 1287 rows: no rank count divides it evenly
    return gallery.shifted_laplacian(11, comm, shift=shift, ny=9, nz=13)


def test_ordering_separates_interiors_and_is_rank_count_independent():
    """The ordering separates the interiors of a level and is the same at any rank count."""
    A = _small()
    M = preconditioners.make("gemslr", A, lr_rank=0, **SMALL)
    Ag = A.to_scipy()
    nparts = max(SMALL["ncomp"], COMM.size)
    levels, last = multilevel_order(Ag, SMALL["nlev"], nparts)
    my_levels, my_last = M.ordering()
    assert len(levels) == len(my_levels) == SMALL["nlev"] - 1
    for mine, ref in zip(my_levels, levels):
        assert len(mine) == len(ref) == nparts
        for a, b in zip(mine, ref):
            assert_equal_collective(a, b)
    assert_equal_collective(my_last, last)
    # every node exactly once
    allids = np.concatenate([np.concatenate(s) for s in levels] + [last])
    assert_equal_collective(np.sort(allids), np.arange(Ag.shape[0]))
    # interiors of different subdomains are not coupled (B is block diagonal), and
    # the nodes left after level l are the interface of level l
    G = abs(Ag) + abs(Ag.T)
    remaining = np.arange(Ag.shape[0])
    for subs in levels:
        label = np.full(Ag.shape[0], -1)
        for j, ids in enumerate(subs):
            label[ids] = j
        coo = G.tocoo()
        both = (label[coo.row] >= 0) & (label[coo.col] >= 0)
        assert_collective(COMM, np.all(label[coo.row][both] == label[coo.col][both]),
                          "interiors of two subdomains are coupled")
        inner = np.concatenate(subs)
        remaining = np.setdiff1d(remaining, inner)
    assert_equal_collective(remaining, last)
    # a serial ordering of the same matrix gives the same levels at any rank count
    if nparts == SMALL["ncomp"]:
        M1 = preconditioners.make("gemslr", _small(comm=MPI.COMM_SELF), lr_rank=0, **SMALL)
        for a, b in zip(M1.ordering()[0], my_levels):
            for x, y in zip(a, b):
                assert_equal_collective(x, y)


def _check_levels(Ag, levels, last, nparts):
    """Every node once; interiors of different subdomains uncoupled; the nodes
    left after level l are exactly those with a neighbour (in A + A^T) in a part
    of smaller number among the nodes of level l."""
    n = Ag.shape[0]
    allids = np.concatenate([np.concatenate(s) for s in levels] + [last])
    ok = np.array_equal(np.sort(allids), np.arange(n))
    G = (abs(Ag) + abs(Ag.T)).tocoo()
    remaining = np.arange(n)
    for subs in levels:
        label = np.full(n, -1)
        for j, ids in enumerate(subs):
            label[ids] = j
        both = (label[G.row] >= 0) & (label[G.col] >= 0)
        ok &= bool(np.all(label[G.row][both] == label[G.col][both]))
        remaining = np.setdiff1d(remaining, np.concatenate(subs))
    return ok and np.array_equal(remaining, last) and len(levels[0]) == nparts


def test_ordering_above_the_gather_limit_gathers_nothing(monkeypatch):
    """With metis_partition's gather limit at 0 every level's subgraph is
    partitioned in parallel (multilevel): with the last level factored per
    rank ("bjacobi"; "redundant" gathers that small level by design) nothing
    of the matrix is gathered, and the levels still separate the interiors."""
    from dmsolve.partition import _metis
    A = _small()
    Ag = A.to_scipy()

    def refuse(*args, **kwargs):
        raise AssertionError("the gemslr ordering gathered the matrix")
    monkeypatch.setattr(_metis, "METIS_GATHER_NNZ", 0)
    monkeypatch.setattr(DistCSR, "to_scipy", refuse)
    M = preconditioners.make("gemslr", A, lr_rank=0, last_level="bjacobi", **SMALL)
    monkeypatch.undo()
    levels, last = M.ordering()
    assert_collective(COMM, _check_levels(Ag, levels, last, M.nparts), "ordering")
    assert_collective(COMM, len(levels) == SMALL["nlev"] - 1, "levels")
    x, info = fgmres(A, gallery.rhs(A, "ones"), M=M, rtol=1e-8, restart=50, maxiter=200)
    assert_collective(COMM, info.converged, "fgmres + gemslr on the parallel ordering")


@pytest.mark.parametrize("gather", [True, False], ids=["gathered", "parallel"])
def test_uncoupled_parts_leave_no_last_level(gather, monkeypatch):
    """A split that finds no interface (the remaining graph's components fall
    whole into parts) makes every node an interior of that level and leaves
    an empty last level, rather than making every node a last level
    factored on every rank (the whole 25335-row interface of a 64-rank
    slab). Eight uncoupled blocks into eight parts, serial METIS or the
    parallel partitioner: one level of eight subdomains, no last level, the
    serial ordering's levels, and the preconditioner exact (ILUT of a
    tridiagonal block drops nothing)."""
    from dmsolve.partition import _metis
    blocks = [sp.diags([-1.0, 2.5 + 0.1 * k, -1.0], [-1, 0, 1], (150, 150)) for k in range(8)]
    Ag = sp.block_diag(blocks, format="csr")
    A = DistCSR.from_global(Ag, COMM)
    if not gather:
        monkeypatch.setattr(_metis, "METIS_GATHER_NNZ", 0)
    M = preconditioners.make("gemslr", A, nlev=3, ncomp=8, lr_rank=0, last_level="bjacobi")
    monkeypatch.undo()
    levels, last = M.ordering()
    assert_collective(COMM, M.nparts == 8 or COMM.size > 8, "parts")
    assert_collective(COMM, len(levels) == 1 and last.size == 0,
                      "levels %d, last level %d rows" % (len(levels), last.size))
    assert_collective(COMM, _check_levels(Ag, levels, last, M.nparts), "ordering")
    assert_collective(COMM, sorted(s.size for s in levels[0]) == [150] * 8, "subdomains")
    if gather:
        ref, ref_last = multilevel_order(Ag, 3, 8)
        assert_collective(COMM, len(ref) == 1 and ref_last.size == 0, "serial ordering")
        for a, b in zip(ref[0], levels[0]):
            assert_equal_collective(a, b)
    assert_equal_collective(M.describe()["interface_sizes"], [0])
    b = gallery.rhs(A, "random")
    x, info = fgmres(A, b, M=M, rtol=1e-10, restart=20, maxiter=20)
    assert_collective(COMM, info.converged and info.iterations <= 2,
                      "iterations %d" % info.iterations)
    assert_allclose_collective(x.local, spsolve(Ag.tocsc(), b.gather())
                               [A.row_layout.start:A.row_layout.stop], rtol=1e-8)
