"""examples/poisson_solve.py and examples/convdiff_solve.py run at any rank
count and converge."""

import pytest
from mpi4py import MPI

from mpitest import Checks, assert_collective, load_example, same_on_all_ranks

pytestmark = pytest.mark.timeout(120)
COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("argv", [["--n", "20", "--quiet"],
                                  ["--n", "8", "--dim", "3", "--method", "pipecg",
                                   "--pc", "none", "--quiet"]])
def test_poisson_example(argv):
    """examples/poisson_solve.py converges for each set of arguments, with a true relative
    residual below 1e-7 and the same iterations on every rank."""
    info = load_example("poisson_solve").main(COMM, argv)
    assert_collective(COMM, info.converged and info.extra["true_relative_residual"] < 1e-7,
                      str(info))
    assert_collective(COMM, same_on_all_ranks(COMM, info.iterations))


def test_convdiff_example():
    """examples/convdiff_solve.py converges with GMRES, FGMRES and BiCGStab."""
    results = load_example("convdiff_solve").main(COMM, ["--n", "12", "--quiet"])
    checks = Checks(COMM)
    checks.add(sorted(results) == ["bicgstab", "fgmres", "gmres"], "methods", sorted(results))
    for method, info in results.items():
        checks.add(info.converged, "%s converged" % method, info)
        checks.add(info.extra["true_relative_residual"] < 1e-6,
                   "%s true relative residual < 1e-6" % method,
                   info.extra["true_relative_residual"])
    checks.assert_all()
