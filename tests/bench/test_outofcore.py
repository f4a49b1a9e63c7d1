"""The out-of-core benchmark's field file (bench/bench_outofcore.py): written
through a temporary, so a failed write leaves the previous file and nothing
else behind."""

import os
import sys

import numpy as np
import pytest

from full_disk import ENOSPC
from mpitest import Checks

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))
import bench_outofcore  # noqa: E402


@pytest.fixture
def here(comm, shared_tmp_path):
    """A directory of this rank's own in the shared one."""
    path = shared_tmp_path / ("rank%d" % comm.rank)
    path.mkdir()
    return path


class _FillingPlanes:
    """Stands in for the planes of ``field_planes(n, z0, z1)``: writing them
    stores a few bytes, then fills the disk (``ENOSPC``)."""

    def __init__(self, n, z0, z1):
        pass

    def tofile(self, f):
        f.write(b"\0" * 16)
        raise OSError(ENOSPC.errno, ENOSPC.strerror)


def test_write_field_writes_the_planes(comm, here):
    """The file holds the n^3 field's planes in order, as float32."""
    path = str(here / "f.raw")
    bench_outofcore.write_field(path, 6, block_bytes=8 * 6 * 6 * 2)
    got = np.fromfile(path, dtype=np.float32)
    with Checks(comm) as checks:
        checks.add(np.array_equal(got, bench_outofcore.field_planes(6, 0, 6).ravel()), "planes")
        checks.add(sorted(os.listdir(here)) == ["f.raw"], "no temporary", os.listdir(here))


def test_full_disk_leaves_the_previous_file_and_no_temporary(comm, here, monkeypatch):
    """A write that fills the disk raises OSError, leaves the previous file byte for
    byte and no temporary."""
    path = str(here / "f.raw")
    bench_outofcore.write_field(path, 4)
    with open(path, "rb") as f:
        before = f.read()
    monkeypatch.setattr(bench_outofcore, "field_planes", _FillingPlanes)
    with Checks(comm) as checks:
        try:
            bench_outofcore.write_field(path, 6)
            checks.add(False, "the full disk raised OSError")
        except OSError as e:
            checks.add(e.errno == 28, "ENOSPC", e)
        monkeypatch.undo()
        with open(path, "rb") as f:
            checks.add(f.read() == before, "the previous file is intact")
        checks.add(sorted(os.listdir(here)) == ["f.raw"], "no temporary", os.listdir(here))
