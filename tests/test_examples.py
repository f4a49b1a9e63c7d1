"""The examples run in the suite, so their usage lines never go stale."""

import importlib.util
import re
from pathlib import Path

from mpitest import assert_collective

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location("example_" + name, EXAMPLES / (name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_demo_runs_and_checks_itself(comm, capsys):
    load("demo").main(comm, ["--n", "10"])
    out = capsys.readouterr().out
    if comm.rank == 0:
        assert "max relative error" in out
        err = float(out.split("max relative error ")[1].split()[0])
        assert err < 1e-14
        assert "duplicates: True" in out and "equal to scipy.csgraph: True" in out
        assert "[6] Topology" in out and "done in" in out
        # the low-rank correction beats ILU(0) and the plain multilevel LDU (indefinite case)
        its = [int(line.split()[-3]) for line in out.splitlines() if "FGMRES +" in line]
        assert len(its) == 3 and 2 * its[2] < min(its[0], its[1]), its
        assert "essential classes 1 0 0 0" in out
        energies = out.split("energies gradient ")[1].split()
        g, c, h, f = (float(energies[i]) for i in (0, 3, 6, 9))
        assert abs(g + c + h - f) <= 1e-2 * f and h > 0    # 3-digit print; one hole: harmonic
        assert "Betti [1, 1, 0]" in out
        m = re.search(r"resumed: (\d+) iterations in all \(uninterrupted (\d+)\), "
                      r"max \|x - x_full\| (\S+)", out)
        assert m and m.group(1) == m.group(2) and float(m.group(3)) < 1e-12, out
    assert_collective(comm, True)
