"""A disk that fills up, for the atomic writers' tests: ``open`` replacements
and an MPI-IO shim whose writes store part of their data and then raise
``ENOSPC``, and snapshots of a directory to check that a failed write left
every previous file as it was and no temporary beside them."""

import builtins
import errno
import os

from mpi4py import MPI

from mpitest import assert_equal_collective

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _FillingFile:
    """A file opened for writing whose writes store half their data, then
    raise ``ENOSPC``, as a write to a full disk does."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        self._f.flush()
        raise OSError(ENOSPC.errno, ENOSPC.strerror)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._f.close()
        return False


def full_disk_open(when=lambda path: True):
    """An ``open`` whose files opened for writing (any mode with w, a, x or +)
    at a path for which ``when(path)`` is true fill the disk on their first
    write. Monkeypatch it in as the ``open`` of the module under test."""
    def fake_open(file, mode="r", *args, **kwargs):
        f = builtins.open(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax+") and when(os.fspath(file)):
            return _FillingFile(f)
        return f
    return fake_open


class _FillingMPIFile:
    """An MPI file whose collective writes store half their bytes, then raise
    ``MPI.ERR_NO_SPACE`` on the ranks ``failing(rank)`` picks."""

    def __init__(self, fh, failing):
        self._fh, self._failing = fh, failing

    def Write_at_all(self, offset, buf):
        if not self._failing(self._fh.Get_group().Get_rank()):
            return self._fh.Write_at_all(offset, buf)
        self._fh.Write_at_all(offset, buf[: len(buf) // 2])
        raise MPI.Exception(MPI.ERR_NO_SPACE)

    def __getattr__(self, name):
        return getattr(self._fh, name)


class FullDiskMPI:
    """Stands in for the ``MPI`` module of a module that writes with MPI-IO:
    everything is mpi4py's, but files opened with ``File.Open`` fill the disk
    on the ranks ``failing(rank)`` picks (every rank calls the collective
    write, so none is left waiting)."""

    def __init__(self, failing=lambda rank: True):
        failing_ = failing

        class File:
            @staticmethod
            def Open(comm, filename, amode=MPI.MODE_RDONLY, info=MPI.INFO_NULL):
                return _FillingMPIFile(MPI.File.Open(comm, filename, amode, info), failing_)
        self.File = File

    def __getattr__(self, name):
        return getattr(MPI, name)


def snapshot(comm, directory) -> dict:
    """``{relative path: bytes}`` of every file under ``directory``, read on
    rank 0 and broadcast. Collective on ``comm``."""
    files = None
    if comm.rank == 0:
        files = {}
        for root, _, names in os.walk(directory):
            for name in names:
                full = os.path.join(root, name)
                with builtins.open(full, "rb") as f:
                    files[os.path.relpath(full, directory)] = f.read()
    return comm.bcast(files, root=0)


def assert_left_as_before(comm, directory, before: dict) -> None:
    """Every file under ``directory`` is as in the snapshot ``before``: the
    same names (no temporary left, none removed) and the same bytes.
    Collective on ``comm``."""
    after = snapshot(comm, directory)
    assert_equal_collective(sorted(after), sorted(before), comm,
                            err_msg="the files left after a failed write")
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert_equal_collective(changed, [], comm, err_msg="files changed by a failed write")


def full_disk_mesh_write(mesh, path, *args, **kwargs):
    """Stands in for ``meshio.Mesh.write``: writes the start of a VTU file to
    ``path`` and then fills the disk (``ENOSPC``)."""
    with builtins.open(path, "wb") as f:
        f.write(b'<?xml version="1.0"?>\n<VTKFile type="UnstructuredGrid"')
    raise OSError(ENOSPC.errno, ENOSPC.strerror)
