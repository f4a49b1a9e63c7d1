"""Out-of-core assembly: DistCSR.from_coo_files against from_coo and scipy.

The triplets are written to binary COO files 4x (and 16x) larger than the
memory budget; the assembled matrix must equal the in-memory assembly of
the same triplets entry for entry, the spill files must have been used and
be gone afterwards, and bad input must be the same error on every rank."""

import os
import shutil
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

from dmsolve import DistCSR, Layout
from dmsolve.bsp import Ledger
from dmsolve.bsp._virtual import MESSAGE_OVERHEAD
from dmsolve.io import COO_RECORD, write_coo
from mpitest import Checks, assert_collective, assert_raises_collective

pytestmark = pytest.mark.timeout(120)
COMM = MPI.COMM_WORLD


@pytest.fixture
def shared_dir(tmp_path_factory):
    """One directory for every rank (rank 0's), removed at the end."""
    path = str(tmp_path_factory.mktemp("coo")) if COMM.rank == 0 else None
    path = COMM.bcast(path)
    yield path
    COMM.Barrier()


def triplets(n, m, seed=0, band=20):
    """m triplets of an n x n band matrix with many duplicates (integer
    values, so that every order of summation gives the same float)."""
    rng = np.random.default_rng(seed)
    r = rng.integers(0, n, m)
    c = (r + rng.integers(-band, band + 1, m)) % n
    return r, c, rng.integers(-9, 10, m).astype(np.float64)


def write_files(d, r, c, v, parts=3):
    paths = [os.path.join(d, "part%d.coo" % i) for i in range(parts)]
    if COMM.rank == 0:
        cuts = np.linspace(0, r.size, parts + 1).astype(int)
        for p, a, b in zip(paths, cuts[:-1], cuts[1:]):
            write_coo(p, r[a:b], c[a:b], v[a:b])
    COMM.Barrier()
    return paths


def spill_left(d):
    return [f for f in os.listdir(d) if f.startswith("dmsolve-bsp")]


@pytest.mark.parametrize("ratio", [4, 16])
def test_files_larger_than_the_budget_assemble_like_from_coo(ratio, shared_dir):
    """COO files larger than the memory budget assemble to from_coo's matrix, entry for entry,
    through spill files that are gone afterwards."""
    n, m = 3000, 1000000
    r, c, v = triplets(n, m, band=20)      # 41 entries a row: 8 triplets per entry
    paths = write_files(shared_dir, r, c, v)
    budget = m * COO_RECORD.itemsize // (ratio * COMM.size)    # the files are ratio x a rank's
    ledger = Ledger(COMM)
    tracemalloc.start()
    A = DistCSR.from_coo_files(paths, (n, n), COMM, memory_budget=budget,
                               spill_dir=shared_dir, ledger=ledger)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    B = DistCSR.from_coo(r[COMM.rank::COMM.size], c[COMM.rank::COMM.size],
                         v[COMM.rank::COMM.size], (n, n), COMM)
    ref = sp.csr_matrix((v, (r, c)), shape=(n, n))
    ref.sum_duplicates()
    s = ledger.summary()
    got, mem = A.local_rows(), B.local_rows()
    start, stop = A.row_layout.owned_range
    with Checks(COMM) as checks:
        checks.add((got != mem).nnz == 0, "equals from_coo")
        checks.add(abs(got - ref[start:stop]).max() == 0, "equals scipy")
        checks.add(got.nnz == mem.nnz, "same stored entries", (got.nnz, mem.nnz))
        checks.add(s["io_written"] > 0 and s["io_read"] > 0, "spilled", s)
        checks.add(s["supersteps"] == 2, "two virtual supersteps", s["supersteps"])
        # the triplets never sit in memory whole: what Python allocated at its
        # peak is the result (the CSR rows and their COO form while joining,
        # 48 bytes per stored entry), twice the budget (the staged data and
        # one round of messages in flight), the objects of one round's
        # messages (2 x 2 per pair of a rank and a virtual processor, sent
        # and received) and a fixed 256 KiB; at 16x that is under half the
        # records of one rank
        records = m * COO_RECORD.itemsize // COMM.size
        v = -(-4 * records // budget)
        bound = (48 * got.nnz + 2 * budget + 256 * 1024
                 + 4 * MESSAGE_OVERHEAD * COMM.size * v)
        checks.add(peak <= bound, "peak allocation %d > %d (records %d bytes)"
                   % (peak, bound, records))
        if ratio == 16:
            checks.add(bound < records / 2, "a bound that excludes the records", bound)
    assert_collective(COMM, spill_left(shared_dir) == [], "spill files left")


def test_layouts_and_no_budget(shared_dir):
    """from_coo_files takes layouts, and works without a budget."""
    n, m = 500, 40000
    r, c, v = triplets(n, m, seed=1)
    c = c % 300
    paths = write_files(shared_dir, r, c, v, parts=1)
    starts = np.linspace(0, n, COMM.size + 1).astype(np.int64)
    starts[1:-1] += np.arange(1, COMM.size) * 7        # an uneven row layout
    lay = Layout(starts, COMM)
    for kw in [dict(), dict(memory_budget="256KiB", spill_dir=shared_dir), dict(virtual=3)]:
        A = DistCSR.from_coo_files(paths[0], (n, 300), COMM, layout=lay, **kw)
        ref = sp.csr_matrix((v, (r, c)), shape=(n, 300))
        a, b = lay.owned_range
        assert_collective(COMM, abs(A.local_rows() - ref[a:b]).max() == 0, str(kw))
        assert_collective(COMM, A.col_layout.global_size == 300 and A.row_layout is lay, str(kw))
    assert_collective(COMM, spill_left(shared_dir) == [], "spill files left")


def test_bad_input_is_an_error_on_every_rank(shared_dir, monkeypatch):
    """Bad files and arguments are errors on every rank."""
    n = 100
    r, c, v = triplets(n, 1000, seed=2)
    good = write_files(shared_dir, r, c, v, parts=1)[0]
    bad = {}
    if COMM.rank == 0:
        with open(good, "rb") as f:
            data = f.read()
        bad["short"] = os.path.join(shared_dir, "short.coo")
        with open(bad["short"], "wb") as f:
            f.write(data[:-5])
        for name, col, val in [("range", "row", n), ("nan", "val", np.nan),
                               ("negative", "col", -1)]:
            rec = np.fromfile(good, dtype=COO_RECORD)
            rec[len(rec) // 2][col] = val
            bad[name] = os.path.join(shared_dir, name + ".coo")
            rec.tofile(bad[name])
    bad = COMM.bcast(bad)
    cases = [
        (ValueError, [os.path.join(shared_dir, "missing.coo")], {}, "does not exist"),
        (ValueError, [bad["short"]], {}, "whole number"),
        (ValueError, [bad["range"]], dict(memory_budget=2**20, spill_dir=shared_dir),
         "row index out of range"),
        (ValueError, [bad["negative"]], {}, "column index out of range"),
        (ValueError, [bad["nan"]], dict(memory_budget=2**20, spill_dir=shared_dir), "finite"),
        (ValueError, [], {}, "at least one"),
        (ValueError, [good], dict(memory_budget=8), "too small"),
        (ValueError, [good], dict(memory_budget=4096, virtual=2), "too small"),
        (ValueError, [good], dict(memory_budget="1MiB",
                                  spill_dir=os.path.join(shared_dir, "nowhere")), "nowhere"),
        (ValueError, [good], dict(virtual=0), "positive"),
        (TypeError, [good], dict(memory_budget=1.5), "number of bytes"),
    ]
    for exc, paths, kw, match in cases:
        assert_raises_collective(COMM, exc, DistCSR.from_coo_files, paths, (n, n), COMM,
                                 match=match, **kw)
    # a shape that is not the same everywhere, and a spill directory without space
    assert_raises_collective(COMM, (TypeError, ValueError), DistCSR.from_coo_files, [good],
                             (n, n + COMM.rank) if COMM.size > 1 else (n,), COMM)

    def full(path):
        return shutil._ntuple_diskusage(10**9, 10**9 - 100, 100)
    monkeypatch.setattr(shutil, "disk_usage", full)
    assert_raises_collective(COMM, ValueError, DistCSR.from_coo_files, [good], (n, n), COMM,
                             memory_budget=2**20, spill_dir=shared_dir, match="bytes free")
    assert_collective(COMM, spill_left(shared_dir) == [], "spill files left")
