"""The examples run in the suite, so their usage lines never go stale."""

import importlib.util
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
        assert "[5] Topology" in out and "done in" in out
    assert_collective(comm, True)
