"""What importing the packages costs: ``import dmsolve``, ``import
preconditioners`` and ``import topology``, each in a fresh process, load no
numba (kernels load it on their first call, dmsolve.jit), none of the modules
that only some calls need (scipy.linalg and the scipy modules that import it,
meshio, xml.sax), and stay under 100 MiB resident. Their times are measured
by bench/bench_startup.py, not here."""

import pytest

from mpitest import assert_collective, child_python

#: Resident memory allowed after the import (numpy, scipy.sparse and mpi4py
#: alone take about 65 MiB).
LIMIT_MIB = 100
#: Modules no import of the packages may load.
NOT_LOADED = ("numba", "llvmlite", "scipy.linalg", "scipy.sparse.linalg", "scipy.sparse.csgraph",
              "meshio", "xml.sax")

CODE = """
import sys
import {package}
rss = next(int(line.split()[1]) for line in open("/proc/self/status")
           if line.startswith("VmRSS:")) / 1024
loaded = [m for m in {not_loaded!r} if m in sys.modules]
print("rss %.1f MiB, loaded %s" % (rss, loaded))
"""


@pytest.mark.parametrize("package", ["dmsolve", "preconditioners", "topology"])
def test_import_loads_no_numba_and_stays_small(comm, package):
    """``import package`` in a fresh process loads none of NOT_LOADED and
    leaves the process under LIMIT_MIB resident."""
    code, out = child_python(comm, CODE.format(package=package, not_loaded=NOT_LOADED))
    ok = code == 0 and "loaded []" in out
    rss = float(out.split("rss ")[1].split(" MiB")[0]) if ok else float("inf")
    assert_collective(comm, ok, "import %s loads %s" % (package, out))
    assert_collective(comm, rss < LIMIT_MIB, "import %s: %.1f MiB resident (at most %d)"
                      % (package, rss, LIMIT_MIB))
