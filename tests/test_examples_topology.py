"""The topology examples run, at any rank count, with their documented options."""

import importlib.util
import os
import tempfile

import numpy as np
from mpi4py import MPI

from mpitest import assert_allclose_collective, assert_collective, assert_equal_collective

COMM = MPI.COMM_WORLD
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples",
                                                                      name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shared_tmpdir():
    path = tempfile.mkdtemp() if COMM.rank == 0 else None
    return COMM.bcast(path, root=0)


def test_critical_points_example_writes_vtu():
    import meshio
    out = os.path.join(shared_tmpdir(), "cp.vtu")
    counts = load("critical_points").main(COMM, ["--n", "12", "--bumps", "5", "--out", out])
    assert_collective(COMM, counts["maximum"] >= 1 and counts["minimum"] >= 1, str(counts))
    ok, types = True, None
    if COMM.rank == 0:
        mesh = meshio.read(out)
        types = np.asarray(mesh.point_data["CriticalType"])
        ok = len(mesh.points) == 12 ** 3 and mesh.cells[0].data.shape == (6 * 11 ** 3, 4)
    types = COMM.bcast(types, root=0)
    assert_collective(COMM, ok, "VTU content")
    expected = [counts[k] for k in ("minimum", "1-saddle", "2-saddle", "maximum",
                                    "degenerate", "regular")]
    assert_equal_collective(np.bincount(types, minlength=6), expected)


def test_hodge_example_plots_three_parts():
    out = os.path.join(shared_tmpdir(), "hodge.png")
    res = load("hodge").main(COMM, ["--n", "14", "--out", out])
    assert_equal_collective(res["betti"], [1, 2, 0])
    e = res["energies"]
    assert_allclose_collective(e["gradient"] + e["curl"] + e["harmonic"], e["total"], rtol=1e-8)
    exists = os.path.getsize(out) > 10000 if COMM.rank == 0 else True
    assert_collective(COMM, exists, "no plot written")
