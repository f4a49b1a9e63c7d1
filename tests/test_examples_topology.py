"""The topology examples run, at any rank count, with their documented
options: critical points and persistence written as VTU, CSV and plots, the
Hodge decomposition plotted, and the edge-flow figures checked."""

import os

import meshio
import numpy as np
from mpi4py import MPI

from mpitest import (Checks, assert_allclose_collective, assert_collective, assert_equal_collective,
                     load_example)
from topology import Grid, persistence_diagram

COMM = MPI.COMM_WORLD


def test_critical_points_example_writes_vtu(shared_tmp_path):
    """The critical-points example writes its VTU files."""
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
    """The Hodge example plots the three parts of the decomposition."""
    out = os.path.join(shared_tmp_path, "hodge.png")
    res = load_example("hodge").main(COMM, ["--n", "14", "--out", out])
    assert_equal_collective(res["betti"], [1, 2, 0])
    e = res["energies"]
    assert_allclose_collective(e["gradient"] + e["curl"] + e["harmonic"], e["total"], rtol=1e-8)
    COMM.Barrier()                  # rank 0 has written the plot
    assert_collective(COMM, os.path.getsize(out) > 10000, "no plot written")


def test_edge_flows_example_figures(shared_tmp_path):
    """The Chicago traffic example: its printed figures, each checked."""
    out = os.path.join(shared_tmp_path, "edge_flows.png")
    res = load_example("edge_flows").main(COMM, ["--order", "64", "--out", out])
    checks = Checks(COMM)
    checks.add(res["betti"] == [1, 431, 0], "betti numbers", res["betti"])
    checks.add(res["zeros_L0"] == 1 and res["zeros_L2"] == 0, "zero eigenvalues vs betti",
               (res["zeros_L0"], res["zeros_L2"]))
    s = res["shares"]
    checks.add(abs(s["gradient"] + s["curl"] + s["harmonic"] - 1) < 1e-8, "shares sum", s)
    lam = res["frequencies"]
    checks.add(abs(lam["gradient"] - 0.015209) < 1e-5 and abs(lam["curl"] - 1.0681) < 1e-4,
               "smallest frequencies", lam)
    err = res["filter_errors"]
    checks.add(err["curl"] < 1e-3 and err["gradient"] < 0.1 and err["harmonic"] < 0.1,
               "filter errors", err)
    d = res["denoise"]
    checks.add(d["tikhonov"] < d["noisy"] and d["trend"] < d["noisy"], "denoising", d)
    checks.add(res["interpolation"] < 1.0, "interpolation beats zero fill",
               res["interpolation"])
    f = res["filled"]
    checks.add(f["known"] == 10 and 0 < f["curl_after"] < s["curl"], "inferred triangles", f)
    checks.assert_all()
    COMM.Barrier()                  # rank 0 has written the plot
    assert_collective(COMM, os.path.getsize(out) > 10000, "no plot written")


def test_edge_flows_example_partition_independent(shared_tmp_path):
    """The edge-flow example prints the same figures at any rank count and partition."""
    base = load_example("edge_flows").main(COMM, ["--order", "16", "--out", ""])
    metis = load_example("edge_flows").main(COMM, ["--order", "16", "--out", "",
                                                   "--partition", "metis"])
    for key in ("gradient", "curl", "harmonic"):
        assert_allclose_collective(metis["shares"][key], base["shares"][key], rtol=1e-8)
        assert_allclose_collective(metis["filter_errors"][key], base["filter_errors"][key],
                                   rtol=1e-6)
    assert_allclose_collective(metis["denoise"]["tikhonov"], base["denoise"]["tikhonov"],
                               rtol=1e-8)
    assert_allclose_collective(metis["interpolation"], base["interpolation"], rtol=1e-8)
    assert_equal_collective(metis["filled"]["triangles"], base["filled"]["triangles"])


def test_persistence_example_writes_plot_csv_vtu(shared_tmp_path):
    """The persistence example writes its plot, CSV and VTU."""
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
