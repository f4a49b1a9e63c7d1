"""The topology examples run, at any rank count, with their documented options."""

import os

import meshio
import numpy as np
from mpi4py import MPI

from mpitest import (Checks, assert_allclose_collective, assert_collective,
                     assert_equal_collective, load_example)

COMM = MPI.COMM_WORLD


def test_critical_points_example_writes_vtu(shared_tmp_path):
    out = str(shared_tmp_path / "cp.vtu")
    counts = load_example("critical_points").main(COMM, ["--n", "12", "--bumps", "5",
                                                         "--out", out])
    assert_collective(COMM, counts["maximum"] >= 1 and counts["minimum"] >= 1, str(counts))
    COMM.Barrier()                  # rank 0 has written the file
    mesh = meshio.read(out)         # every rank reads it
    types = np.asarray(mesh.point_data["CriticalType"])
    checks = Checks(COMM)
    checks.add(len(mesh.points) == 12 ** 3, "VTU points", len(mesh.points))
    checks.add(mesh.cells[0].data.shape == (6 * 11 ** 3, 4), "VTU tetrahedra",
               mesh.cells[0].data.shape)
    checks.assert_all()
    expected = [counts[k] for k in ("minimum", "1-saddle", "2-saddle", "maximum",
                                    "degenerate", "regular")]
    assert_equal_collective(np.bincount(types, minlength=6), expected)


def test_hodge_example_plots_three_parts(shared_tmp_path):
    out = os.path.join(shared_tmp_path, "hodge.png")
    res = load_example("hodge").main(COMM, ["--n", "14", "--out", out])
    assert_equal_collective(res["betti"], [1, 2, 0])
    e = res["energies"]
    assert_allclose_collective(e["gradient"] + e["curl"] + e["harmonic"], e["total"], rtol=1e-8)
    COMM.Barrier()                  # rank 0 has written the plot
    assert_collective(COMM, os.path.getsize(out) > 10000, "no plot written")
