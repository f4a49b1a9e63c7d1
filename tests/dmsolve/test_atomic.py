"""Atomic file writes (dmsolve._atomic, public through dmsolve.io): a write goes
through a temporary beside the file; a failure of any kind leaves the previous
file as it was and removes the temporary; links, permission bits and devices
are kept."""

import os
import stat

import pytest

from dmsolve.io import atomic_path, commit_temporary, temporary_path
from full_disk import full_disk_open
from mpitest import Checks


@pytest.fixture
def here(comm, shared_tmp_path):
    """A directory of this rank's own in the shared one."""
    path = shared_tmp_path / ("rank%d" % comm.rank)
    path.mkdir()
    return path


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read()


def test_atomic_path_replaces_the_file(comm, here):
    """The block writes the temporary; at its end the file holds the new text and
    the temporary is gone."""
    path = here / "a.txt"
    _write(path, "old\n")
    with atomic_path(path) as tmp:
        seen = tmp
        _write(tmp, "new\n")
        during = _read(path)
    with Checks(comm) as checks:
        checks.add(seen == str(path) + ".tmp", "the temporary's name", seen)
        checks.add(during == "old\n", "the file is the old one during the write")
        checks.add(_read(path) == "new\n", "the new text")
        checks.add(sorted(os.listdir(here)) == ["a.txt"], "no temporary", os.listdir(here))


@pytest.mark.parametrize("failure", ["ENOSPC", "KeyboardInterrupt", "failed-rename"])
def test_failed_write_keeps_the_file_and_removes_the_temporary(comm, here, monkeypatch,
                                                               failure):
    """A full disk, an interrupt in the block, or a rename that fails: the exception
    goes on unchanged, the previous file is intact and no temporary is left."""
    path = here / "a.txt"
    _write(path, "old\n")
    raised = None
    try:
        if failure == "failed-rename":
            def no_rename(src, dst):
                raise OSError(18, "Invalid cross-device link")
            monkeypatch.setattr(os, "replace", no_rename)
        with atomic_path(path) as tmp:
            if failure == "ENOSPC":
                with full_disk_open()(tmp, "w") as f:
                    f.write("new text that does not fit\n")
            elif failure == "KeyboardInterrupt":
                _write(tmp, "half")
                raise KeyboardInterrupt
            else:
                _write(tmp, "new\n")
    except BaseException as e:  # noqa: BLE001 - the failure under test, any kind
        raised = e
    monkeypatch.undo()
    want = {"ENOSPC": OSError, "KeyboardInterrupt": KeyboardInterrupt,
            "failed-rename": OSError}[failure]
    with Checks(comm) as checks:
        checks.add(isinstance(raised, want), "raised " + want.__name__, repr(raised))
        checks.add(_read(path) == "old\n", "the previous file is intact")
        checks.add(sorted(os.listdir(here)) == ["a.txt"], "no temporary", os.listdir(here))


def test_links_permissions_and_devices_are_kept(comm, here):
    """A symbolic link still points at the (new) file, the file keeps its permission
    bits, and a device is written in place, never replaced by a plain file."""
    target, link = here / "target.txt", here / "link.txt"
    _write(target, "old\n")
    os.chmod(target, 0o640)
    os.symlink("target.txt", link)
    with atomic_path(link) as tmp:
        _write(tmp, "new\n")
    with atomic_path(os.devnull) as dev:
        _write(dev, "nothing\n")
    with Checks(comm) as checks:
        checks.add(os.path.islink(link) and _read(target) == "new\n", "the link is kept")
        checks.add(stat.S_IMODE(os.stat(target).st_mode) == 0o640, "permission bits",
                   oct(os.stat(target).st_mode))
        checks.add(dev == os.devnull and stat.S_ISCHR(os.stat(os.devnull).st_mode),
                   "the device is written in place", dev)
        checks.add(temporary_path(os.devnull) is None, "no temporary for a device")
        checks.add(not os.path.exists(os.devnull + ".tmp"), "nothing beside the device")
        checks.add(sorted(os.listdir(here)) == ["link.txt", "target.txt"], "no temporary")


def test_commit_temporary_of_a_new_file(comm, here):
    """A temporary of a file that does not exist yet becomes it."""
    path = here / "new.txt"
    tmp = temporary_path(path)
    _write(tmp, "x\n")
    commit_temporary(tmp)
    with Checks(comm) as checks:
        checks.add(_read(path) == "x\n" and not os.path.exists(tmp), "the new file")
