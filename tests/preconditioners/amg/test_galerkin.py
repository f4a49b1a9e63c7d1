"""The Galerkin coarse operator ``P^T A P`` against scipy, on the level's layout
and on a gathered coarse layout (summed where the coarse unknowns were made,
then moved whole)."""

import numpy as np
import pytest
from mpi4py import MPI

import dmsolve.gallery as gallery
from amg_cases import hierarchy_pieces
from dmsolve import DistCSR, Layout
from dmsolve.bsp import Ledger
from mpitest import assert_allclose_collective, assert_collective
from preconditioners.amg.aggregate import standard_aggregation
from preconditioners.amg.coarse import active_ranks, coarse_layout, made_layout
from preconditioners.amg.galerkin import galerkin_product, galerkin_rows
from preconditioners.amg.smooth import smooth_prolongator
from preconditioners.amg.strength import symmetric_strength
from preconditioners.amg.tentative import tentative_prolongator

COMM = MPI.COMM_WORLD


def test_galerkin_product_equals_scipy():
    """galerkin_product equals scipy's P^T A P."""
    A = gallery.poisson3d(8, COMM)
    S, agg, count, T, Bc = hierarchy_pieces(A)
    P, _ = smooth_prolongator(A, T)
    Ac = galerkin_product(A, P)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)
    assert_collective(COMM, Ac.row_layout == P.col_layout)


def test_galerkin_with_gathered_coarse_layout():
    """galerkin_product onto a coarse layout on fewer ranks equals scipy's P^T A P."""
    # coarse unknowns moved onto fewer ranks than made them
    A = gallery.poisson2d(15, COMM)
    S = symmetric_strength(A, 0.0)
    agg, count = standard_aggregation(S)
    clay, first = coarse_layout(count, COMM, 10 ** 6)
    assert_collective(COMM, int(np.count_nonzero(clay.local_sizes)) == 1)
    T, _ = tentative_prolongator(A.row_layout, agg, count, np.ones((agg.size, 1)), clay, first)
    P, _ = smooth_prolongator(A, T)
    Ac = galerkin_product(A, P)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("active", [1, 2], ids=["one-rank", "two-ranks"])
def test_gathered_rows_are_finished_where_made(active, monkeypatch):
    """With the layout the coarse unknowns were made in, galerkin_rows onto a
    gathered layout equals scipy's P^T A P, and a gathering rank receives each
    of its rows once, finished: its payload in the move is exactly 16 bytes
    per row (id and length) and 16 per nonzero (column and value)."""
    A = gallery.poisson2d(15, COMM)
    S = symmetric_strength(A, 0.0)
    agg, count = standard_aggregation(S)
    made, first = made_layout(count, COMM)
    active = min(active, COMM.size)
    sizes = np.zeros(COMM.size, dtype=np.int64)
    sizes[active_ranks(COMM.size, active)] = np.diff(np.linspace(0, made.global_size,
                                                                 active + 1).astype(np.int64))
    clay = Layout(np.concatenate(([0], np.cumsum(sizes))), COMM)
    T, _ = tentative_prolongator(A.row_layout, agg, count, np.ones((agg.size, 1)), clay, first)
    P, _ = smooth_prolongator(A, T)
    moved = []
    record = Ledger.record_superstep

    def spy(self, label, work_s, comm_s, bytes_sent, bytes_recv, *args, **kw):
        if label == "galerkin:gather":
            moved.append(bytes_recv)
        return record(self, label, work_s, comm_s, bytes_sent, bytes_recv, *args, **kw)

    monkeypatch.setattr(Ledger, "record_superstep", spy)
    rows = galerkin_rows(A, P, made)
    monkeypatch.undo()
    Ac = DistCSR.from_local_rows(rows, clay, clay, check_finite=False)
    Ag, Pg = A.to_scipy(), P.to_scipy()
    assert_allclose_collective(Ac.to_scipy().toarray(), (Pg.T @ Ag @ Pg).toarray(),
                               rtol=1e-12, atol=1e-13)
    # finished rows, each once: 16 bytes per row and per nonzero, plus the
    # BSP framing of the four 1D messages from each sender (8 * (4 + 1)
    # bytes each); with one rank, or the same ranges by chance, nothing moves
    ids = np.arange(clay.start, clay.stop)
    senders = np.unique(made.owner(ids)).size if ids.size else 0
    want = [] if np.array_equal(made.ranges, clay.ranges) else \
        [16 * (rows.shape[0] + rows.nnz) + 4 * 40 * senders]
    assert_collective(COMM, moved == want, "moved %s bytes, want %s" % (moved, want))
