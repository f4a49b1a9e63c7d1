"""examples/poisson_solve.py and examples/convdiff_solve.py run at any rank
count, converge, and their usage lines name the script."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
from mpi4py import MPI

from mpitest import assert_collective, same_on_all_ranks

pytestmark = pytest.mark.timeout(120)

COMM = MPI.COMM_WORLD
EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / ("%s.py" % name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["poisson_solve", "convdiff_solve"])
def test_usage_line(name):
    doc = load(name).__doc__
    assert_collective(COMM, "mpiexec -n 4 python -m mpi4py examples/%s.py" % name in doc)


@pytest.mark.parametrize("argv", [["--n", "20", "--quiet"],
                                  ["--n", "8", "--dim", "3", "--method", "pipecg",
                                   "--pc", "none", "--quiet"]])
def test_poisson_example(argv):
    info = load("poisson_solve").main(COMM, argv)
    assert_collective(COMM, info.converged and info.extra["true_relative_residual"] < 1e-7,
                      str(info))
    assert_collective(COMM, same_on_all_ranks(COMM, info.iterations))


def test_convdiff_example():
    results = load("convdiff_solve").main(COMM, ["--n", "12", "--quiet"])
    assert_collective(COMM, sorted(results) == ["bicgstab", "fgmres", "gmres"])
    for method, info in results.items():
        assert_collective(COMM, info.converged, "%s: %s" % (method, info))
        assert_collective(COMM, info.extra["true_relative_residual"] < 1e-6,
                          "%s: %g" % (method, info.extra["true_relative_residual"]))
