"""The persistence example runs at any rank count: plot, CSV and VTU written,
the report's counts match the files and a serial run of the same field."""

import os

import meshio
import numpy as np
from mpi4py import MPI

from mpitest import assert_collective, assert_equal_collective, load_example
from topology import Grid, persistence_diagram

COMM = MPI.COMM_WORLD


def test_persistence_example_writes_plot_csv_vtu(shared_tmp_path):
    prefix = str(shared_tmp_path / "pd")
    ex = load_example("persistence")
    argv = ["--n", "14", "--noise", "0.3", "--min-persistence", "0.2", "--out", prefix]
    res = ex.main(COMM, argv)
    report = res["report"]
    kept = sum(r["kept"] + r["essential"] for r in report.values())
    finite = sum(r["kept"] for r in report.values())
    assert_collective(COMM, report[0]["kept"] >= 1 and report[2]["kept"] >= 1, str(report))
    assert_collective(COMM, report[0]["nonzero"] > 5 * report[0]["kept"], "noise pairs")
    COMM.Barrier()                  # rank 0 has written the files; every rank reads them
    rows = len(np.atleast_1d(np.genfromtxt(prefix + ".csv", delimiter=",", names=True)))
    npts = len(meshio.read(prefix + ".vtu").points)
    png = os.path.getsize(prefix + ".png")
    assert_equal_collective(rows, kept)
    assert_equal_collective(npts, kept + finite)
    assert_collective(COMM, png > 10000, "no plot written")
    # the same field serially gives the same pairs
    grid = Grid((14,) * 3, MPI.COMM_SELF)
    f = ex.noisy_field(grid, 8, 0.3, 0)
    serial = persistence_diagram(grid, f, min_persistence=0.2).gather()
    whole = res["diagram"].gather()
    for k in serial.pairs:
        assert_equal_collective(whole.pairs[k], serial.pairs[k], err_msg=k)
