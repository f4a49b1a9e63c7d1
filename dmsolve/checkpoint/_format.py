"""The checkpoint format and its atomic I/O: manifest, SHA-256 checksums,
atomic writes, reading and verifying (see docs/checkpoint.md)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
from contextlib import contextmanager

import numpy as np
from mpi4py import MPI

from .._atomic import atomic_path
from .._layout import Layout
from .._vector import DistVector
from ..validate import agreed

__all__ = ["FORMAT", "VERSION", "MANIFEST", "CheckpointError", "agreed_checkpoint",
           "canonical", "check_path", "check_schema", "read_manifest", "bcast_manifest",
           "check_structure", "ManifestScalars", "load_local", "load", "write_atomic", "write_rank_file", "write_manifest",
           "remove_stale"]

#: The ``format`` field of every manifest.
FORMAT = "dmsolve-checkpoint"
#: The manifest version this module writes and reads.
VERSION = 1
#: The manifest's file name inside a checkpoint directory.
MANIFEST = "manifest.json"

_RANK_FILE = re.compile(r"^rank-\d{5}-of-\d{5}\.[0-9a-f]+-\d+\.npz(\.tmp)?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated, edited, or does not match
    the solve that tries to resume from it. Raised on every rank."""


@contextmanager
def agreed_checkpoint(comm: MPI.Comm):
    """:func:`dmsolve.validate.agreed` that raises :class:`CheckpointError`.

    ``agreed`` re-raises a failure of the block on every rank as its
    built-in kind, ``ValueError`` for a CheckpointError (the ranks that did
    not fail only learn the kind); every ValueError of a checkpoint block is
    a CheckpointError, so it is raised as one. Collective on ``comm``.
    """
    try:
        with agreed(comm):
            yield
    except ValueError as e:
        raise CheckpointError(str(e)) from e


def canonical(obj) -> bytes:
    """The canonical JSON bytes of ``obj``, which the manifest's SHA-256 covers.
    Not collective."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def check_path(value, name: str) -> str:
    """``value`` as a non-empty path string. Not collective.

    Raises
    ------
    TypeError
        Not a str or os.PathLike.
    ValueError
        Empty.
    """
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError("%s must be a path (str or os.PathLike), got %s"
                        % (name, type(value).__name__))
    path = os.fspath(value)
    if not path:
        raise ValueError("%s must be a non-empty path" % name)
    return path


# -- reading --------------------------------------------------------------------------

def _read_manifest_local(path: str) -> dict:
    """Read and verify ``path/manifest.json``; raise CheckpointError. Not collective."""
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointError("no checkpoint at %r: %s is missing" % (path, MANIFEST)) from None
    except OSError as e:
        raise CheckpointError("cannot read checkpoint manifest %r: %s" % (mpath, e)) from None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError("checkpoint manifest %r is not valid JSON (truncated or "
                              "corrupt): %s" % (mpath, e)) from None
    if not isinstance(doc, dict) or "manifest" not in doc or "sha256" not in doc:
        raise CheckpointError("%r is not a dmsolve checkpoint manifest" % mpath)
    man = doc["manifest"]
    if hashlib.sha256(canonical(man)).hexdigest() != doc["sha256"]:
        raise CheckpointError("checkpoint manifest %r fails its checksum (edited or "
                              "corrupt)" % mpath)
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise CheckpointError("%r is not a dmsolve checkpoint manifest" % mpath)
    if man.get("version") != VERSION:
        raise CheckpointError("checkpoint %r has version %r; this dmsolve reads version %d"
                              % (path, man.get("version"), VERSION))
    check_schema(man, mpath)
    return man


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_schema(man: dict, where: str) -> None:
    """Raise :class:`CheckpointError` unless every field the readers use is
    present with its type and a consistent length. Not collective.

    The checksum proves only that the manifest is the one written with it;
    an edited manifest re-signed by hand (or written by another program)
    reaches the readers too, and must be refused here rather than give a
    KeyError or TypeError deep inside a solver.
    """
    def refuse(what):
        raise CheckpointError("checkpoint manifest %r is malformed: %s" % (where, what))

    def need(obj, key, test, kind, within="manifest"):
        if not isinstance(obj, dict) or key not in obj:
            refuse("%s has no %r" % (within, key))
        if not test(obj[key]):
            refuse("%s[%r] must be %s, got %s" % (within, key, kind, _brief(obj[key])))
        return obj[key]

    def reals(n=None):
        return lambda v: isinstance(v, list) and all(_is_real(t) for t in v) \
            and (n is None or len(v) == n)

    def nonneg_int(v):
        return _is_int(v) and v >= 0

    need(man, "method", lambda v: isinstance(v, str) and v, "a method name")
    need(man, "token", lambda v: isinstance(v, str) and v, "a string")
    need(man, "iteration", nonneg_int, "a non-negative integer")
    n = need(man, "global_size", nonneg_int, "a non-negative integer")
    vectors = need(man, "vectors", lambda v: isinstance(v, list) and v and all(
        isinstance(t, str) and t for t in v) and len(set(v)) == len(v) and "x" in v,
        "a list of distinct vector names holding 'x'")
    # a scalar is a number, or a list of numbers (GMRES's Hessenberg and
    # rotations in a checkpoint written inside a cycle)
    need(man, "scalars", lambda v: isinstance(v, dict) and all(
        _is_real(t) or (isinstance(t, list) and all(_is_real(u) for u in t))
        for t in v.values()), "a dict of name -> number or list of numbers")
    opts = need(man, "options", lambda v: isinstance(v, dict), "a dict")
    for key in ("norm_type", "pc"):
        need(opts, key, lambda v: isinstance(v, str), "a string", "options")
    need(opts, "method_options", lambda v: isinstance(v, dict), "a dict", "options")
    need(opts, "nullspace_dim", nonneg_int, "a non-negative integer", "options")
    need(man, "residual_norms", lambda v: reals()(v) and len(v) >= 1,
         "a non-empty list of numbers")
    need(man, "bnorm", _is_real, "a number")
    need(man, "b2norm", _is_real, "a number")
    need(man, "rnorm0", lambda v: v is None or _is_real(v), "a number or null")
    need(man, "fingerprint", reals(4), "a list of 4 numbers")
    ranges = need(man, "ranges", lambda v: isinstance(v, list) and len(v) >= 2 and all(
        _is_int(t) for t in v), "a list of at least 2 integers")
    if ranges[0] != 0 or ranges[-1] != n or any(b < a for a, b in zip(ranges, ranges[1:])):
        refuse("ranges must rise from 0 to global_size = %d, got %s" % (n, _brief(ranges)))
    files = need(man, "files", lambda v: isinstance(v, list) and len(v) == len(ranges) - 1,
                 "a list of len(ranges) - 1 = %d entries" % (len(ranges) - 1))
    for i, entry in enumerate(files):
        within = "files[%d]" % i
        if not isinstance(entry, dict):
            refuse("%s must be a dict, got %s" % (within, _brief(entry)))
        need(entry, "name", lambda v: isinstance(v, str) and _RANK_FILE.match(v)
             and not v.endswith(".tmp"), "a rank file name (rank-RRRRR-of-PPPPP.TOKEN.npz)",
             within)
        for key, want in (("rank", i), ("start", ranges[i]), ("stop", ranges[i + 1])):
            need(entry, key, lambda v, want=want: _is_int(v) and v == want, "%d" % want, within)
        # every vector is stored as float64: a file too small for them is no rank file
        least = 8 * (ranges[i + 1] - ranges[i]) * len(vectors)
        need(entry, "bytes", lambda v: _is_int(v) and v >= least,
             "an integer >= %d (%d vectors of %d float64)"
             % (least, len(vectors), ranges[i + 1] - ranges[i]), within)
        need(entry, "sha256", lambda v: isinstance(v, str) and _SHA256.match(v),
             "64 hexadecimal digits", within)


class ManifestScalars(dict):
    """The ``scalars`` of a manifest: a dict whose missing key raises
    :class:`CheckpointError` (the same on every rank, as the manifest is),
    not ``KeyError``, in the method that resumes. Not collective."""

    def __init__(self, scalars: dict, path: str):
        super().__init__(scalars)
        self.path = path

    def __missing__(self, key):
        raise CheckpointError("cannot resume from %r: its manifest has no scalar %r (the "
                              "method needs it; edited or written by another program)"
                              % (self.path, key))


def _brief(v) -> str:
    """A short rendering of a manifest value for a message."""
    text = json.dumps(v, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def read_manifest(path) -> dict:
    """Read and verify the manifest of the checkpoint at ``path``.

    Not collective. Checks the manifest's own checksum and format, not the
    rank files (see :func:`load`).

    Raises
    ------
    CheckpointError
        Missing, unreadable, corrupt or edited manifest.
    """
    return _read_manifest_local(check_path(path, "path"))


def bcast_manifest(path: str, comm: MPI.Comm) -> dict:
    """Rank 0 reads and verifies the manifest; every rank gets it, or raises
    the same :class:`CheckpointError`. Collective on ``comm``."""
    man, err = None, None
    if comm.Get_rank() == 0:
        try:
            man = _read_manifest_local(path)
        except CheckpointError as e:
            err = str(e)
        except Exception as e:  # noqa: BLE001 - e.g. RecursionError on deep JSON
            err = "cannot read checkpoint manifest in %r: %s: %s" % (path, type(e).__name__, e)
    man, err = comm.bcast((man, err), root=0)
    if err is not None:
        raise CheckpointError(err)
    return man


def _verify_file(path: str, entry: dict, man: dict) -> dict:
    """Read one rank file, check size, checksum and meta; return its arrays."""
    fpath = os.path.join(path, entry["name"])
    try:
        with open(fpath, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CheckpointError("checkpoint %r: rank file %s is missing"
                              % (path, entry["name"])) from None
    except OSError as e:
        raise CheckpointError("checkpoint %r: cannot read %s: %s"
                              % (path, entry["name"], e)) from None
    if len(data) != entry["bytes"]:
        raise CheckpointError("checkpoint %r: rank file %s has %d bytes, the manifest "
                              "says %d (truncated?)" % (path, entry["name"], len(data),
                                                        entry["bytes"]))
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointError("checkpoint %r: rank file %s fails its SHA-256 checksum "
                              "(corrupt)" % (path, entry["name"]))
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(str(arrays.pop("meta")))
    except Exception as e:  # noqa: BLE001 - any decoding failure means corrupt
        raise CheckpointError("checkpoint %r: rank file %s cannot be decoded: %s"
                              % (path, entry["name"], e)) from None
    if not isinstance(meta, dict):
        raise CheckpointError("checkpoint %r: rank file %s has no meta record"
                              % (path, entry["name"]))
    want = {"token": man["token"], "iteration": man["iteration"], "method": man["method"],
            "rank": entry["rank"], "start": entry["start"], "stop": entry["stop"]}
    if any(meta.get(k) != v for k, v in want.items()):
        raise CheckpointError("checkpoint %r: rank file %s does not belong to this "
                              "manifest" % (path, entry["name"]))
    n = entry["stop"] - entry["start"]
    for name in man["vectors"]:
        a = arrays.get(name)
        if a is None or a.shape != (n,) or a.dtype != np.float64:
            raise CheckpointError("checkpoint %r: rank file %s lacks vector %r of length %d"
                                  % (path, entry["name"], name, n))
    return arrays


def load_local(path: str, man: dict, layout: Layout, names) -> dict[str, np.ndarray]:
    """This rank's slices of ``names`` on ``layout``; every rank file is verified
    by at least one rank. Not collective (raises CheckpointError locally)."""
    start, stop = layout.owned_range
    out = {k: np.empty(stop - start) for k in names}
    files = man["files"]
    rank, size = layout.comm.Get_rank(), layout.comm.Get_size()
    for i, entry in enumerate(files):
        lo, hi = max(start, entry["start"]), min(stop, entry["stop"])
        mine = lo < hi
        if not mine and i % size != rank:
            continue                 # another rank verifies this file
        arrays = _verify_file(path, entry, man)
        if mine:
            for k in names:
                out[k][lo - start:hi - start] = arrays[k][lo - entry["start"]:hi - entry["start"]]
    return out


def check_structure(path: str, man: dict) -> None:
    """Raise :class:`CheckpointError` unless the manifest's ranges and file
    list agree. Not collective (the manifest is the same on every rank)."""
    try:
        ranges = np.asarray(man["ranges"], dtype=np.int64)
        files = man["files"]
        ok = (ranges.ndim == 1 and ranges.size == len(files) + 1 and ranges[0] == 0
              and ranges[-1] == man["global_size"] and np.all(np.diff(ranges) >= 0)
              and all(f["rank"] == i and f["start"] == ranges[i] and f["stop"] == ranges[i + 1]
                      for i, f in enumerate(files)))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise CheckpointError("checkpoint %r: the manifest's layout and file list are "
                              "inconsistent" % path)


def load(path, comm: MPI.Comm, layout: Layout | None = None):
    """Read a checkpoint: its manifest and its vectors on ``layout``.

    Collective on ``comm``. Every rank file is read and verified (size,
    SHA-256, membership in the manifest) by some rank, and each rank keeps
    the slices of its rows.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint directory.
    comm : MPI.Comm
        Any number of ranks (not necessarily the writer's).
    layout : Layout, optional
        Where to put the vectors; default a block layout of the saved global
        size on ``comm``.

    Returns
    -------
    manifest : dict
    vectors : dict of str to DistVector
        ``"x"`` and the saved Krylov state.

    Raises
    ------
    CheckpointError
        On every rank, for a missing, corrupt, truncated or edited
        checkpoint, or a layout of another global size.
    """
    path = check_path(path, "path")
    man = bcast_manifest(path, comm)
    check_structure(path, man)
    if layout is None:
        layout = Layout.block(man["global_size"], comm)
    if layout.global_size != man["global_size"]:
        raise CheckpointError("checkpoint %r holds vectors of global size %d, the layout "
                              "has %d" % (path, man["global_size"], layout.global_size))
    with agreed_checkpoint(comm):
        arrays = load_local(path, man, layout, man["vectors"])
    return man, {k: DistVector(layout, v) for k, v in arrays.items()}


# -- writing ----------------------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:              # pragma: no cover - platforms without dir fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(fpath: str, data: bytes) -> None:
    """Write ``data`` to ``fpath`` through a flushed, ``fsync``-ed temporary
    moved into place with ``os.replace``; a failed write removes the
    temporary and leaves ``fpath`` as it was. Not collective; raises
    OSError."""
    with atomic_path(fpath) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def write_rank_file(path: str, name: str, meta: dict, vectors: dict) -> dict:
    """Write this rank's slices of ``vectors`` and ``meta`` atomically as
    ``path/name``; return its manifest entry (name, rank, range, bytes,
    SHA-256). Not collective; raises OSError."""
    buf = io.BytesIO()
    np.savez(buf, meta=np.array(json.dumps(meta)),
             **{k: np.ascontiguousarray(v.local, dtype=np.float64)
                for k, v in vectors.items()})
    data = buf.getvalue()
    write_atomic(os.path.join(path, name), data)
    return {"name": name, "rank": meta["rank"], "start": meta["start"], "stop": meta["stop"],
            "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(path: str, man: dict) -> None:
    """Make the manifest ``man`` (with the format, version and write time
    added, and its SHA-256) durable after the rank files' renames. Not
    collective (rank 0 calls it); raises OSError."""
    man = {"format": FORMAT, "version": VERSION, **man,
           "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    doc = {"manifest": man, "sha256": hashlib.sha256(canonical(man)).hexdigest()}
    _fsync_dir(path)          # the rank files' renames first
    write_atomic(os.path.join(path, MANIFEST), json.dumps(doc, indent=1).encode())
    _fsync_dir(path)


def remove_stale(path: str, keep) -> None:
    """Delete rank files in ``path`` not named in ``keep`` (earlier runs, other
    rank counts, crashed writes); errors are ignored. Not collective."""
    try:
        names = os.listdir(path)
    except OSError:
        return
    for n in names:
        if _RANK_FILE.match(n) and n not in keep:
            try:
                os.remove(os.path.join(path, n))
            except OSError:
                pass
