"""The persistence example runs at any rank count: plot, CSV and VTU written,
the report's counts match the files and a serial run of the same field."""

import importlib.util
import os
import tempfile

import numpy as np
from mpi4py import MPI

from mpitest import assert_collective, assert_equal_collective

COMM = MPI.COMM_WORLD
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples",
                                                                      name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_persistence_example_writes_plot_csv_vtu():
    import meshio
    from topology import Grid, persistence_diagram
    tmp = tempfile.mkdtemp() if COMM.rank == 0 else None
    prefix = os.path.join(COMM.bcast(tmp, root=0), "pd")
    ex = load("persistence")
    argv = ["--n", "14", "--noise", "0.3", "--min-persistence", "0.2", "--out", prefix]
    res = ex.main(COMM, argv)
    report = res["report"]
    kept = sum(r["kept"] + r["essential"] for r in report.values())
    finite = sum(r["kept"] for r in report.values())
    assert_collective(COMM, report[0]["kept"] >= 1 and report[2]["kept"] >= 1, str(report))
    assert_collective(COMM, report[0]["nonzero"] > 5 * report[0]["kept"], "noise pairs")
    rows = npts = png = None
    if COMM.rank == 0:
        rows = len(np.atleast_1d(np.genfromtxt(prefix + ".csv", delimiter=",", names=True)))
        npts = len(meshio.read(prefix + ".vtu").points)
        png = os.path.getsize(prefix + ".png")
    rows, npts, png = COMM.bcast((rows, npts, png), root=0)
    assert_equal_collective(rows, kept)
    assert_equal_collective(npts, kept + finite)
    assert_collective(COMM, png > 10000, "no plot written")
    # the same field serially gives the same pairs
    grid = Grid((14,) * 3, MPI.COMM_SELF)
    f = ex.noisy_field(grid, 8, 0.3, 0)
    serial = persistence_diagram(grid, f, min_persistence=0.2)
    for k in serial.pairs:
        assert_equal_collective(res["diagram"].pairs[k], serial.pairs[k], err_msg=k)
