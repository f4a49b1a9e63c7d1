"""Checkpoint/restart of Krylov solves: one ``.npz`` file per rank plus a JSON
manifest with sizes and SHA-256 checksums, written atomically, resumable on
any number of ranks.

Use it through :func:`dmsolve.solve`::

    x, info = solve(A, b, method="cg", checkpoint="ckpt", checkpoint_every=50)
    # ... the job dies; later, on any number of ranks:
    x, info = solve(A, b, method="cg", resume="ckpt")

On disk
-------
A checkpoint is a directory holding ``manifest.json`` and one file
``rank-RRRRR-of-SSSSS.GGG.npz`` per writing rank (``GGG`` a generation token
unique to each write). Each rank file holds that rank's slices of the saved
vectors (``x`` and the Krylov state) and a ``meta`` record naming its rank,
its global range and the generation. The manifest holds the method, the
iteration, the options (``rtol``, ``atol``, ``maxiter``, ``divtol``,
``norm_type``, the preconditioner descriptor, method options such as
MINRES's ``shift``), the row layout (``ranges``), the residual history, the
scalars of the recurrences, fingerprints of ``A`` and ``b``, and for each rank
file its name, range, size in bytes and SHA-256; plus the SHA-256 of its own
canonical JSON, so an edited manifest is refused.

Atomicity
---------
Every file is written to a temporary name, flushed, ``fsync``-ed and moved
into place with ``os.replace``; the manifest goes last, and the previous
generation's rank files are deleted only after the new manifest is durable.
A crash at any moment therefore leaves either the previous complete
checkpoint or the new complete one: a torn checkpoint never verifies.
All ranks must see the same file system path.

What is saved (and why it suffices)
-----------------------------------
- ``cg``: ``x, r, p`` and ``rz = r^T M r`` after the direction update of
  iteration ``k``; the next iteration needs nothing else (``z = M r`` is
  recomputed by the next step, ``q = A p`` too).
- ``pipecg``: the eight recurrence vectors ``x, r, u, w, z, q, s, p`` and
  ``gamma, alpha`` of the last step (``m = M w`` and ``n = A m`` are
  recomputed); recomputing the others from ``x`` would cost two products
  and two preconditioner applications and change the rounding of the
  recurrences, so they are saved.
- ``gmres``, ``fgmres``: ``x`` only, at restart boundaries (the first
  boundary at or after every ``checkpoint_every`` iterations), where the
  Krylov basis is discarded anyway.
- ``bicgstab``: ``x, r, rhat, p, v`` and ``rho, rho_old, alpha, omega``.
- ``minres``: ``x, r1, r2, y, w, w2`` and the Lanczos/rotation scalars
  ``oldb, beta, dbar, epsln, phibar, cs, sn``.

Resuming on another layout
--------------------------
All vectors are stored in the global numbering, so each rank of the
resuming job reads the slices of the rank files that overlap its rows: the
state is redistributed exactly to any contiguous layout on any number of
ranks. When the layout differs from the writer's *and* a preconditioner is
used, the Krylov recurrence is restarted from the saved ``x`` (residual
recomputed, iteration count and history kept): block preconditioners
(``bjacobi``, ``asm``, ``amg``) change with the partition, and CG-type
recurrences are only valid for one fixed ``M``. Without a preconditioner, or
on the same layout, the full state is restored and the solve continues
exactly (on the same layout, bit for bit: the same iterations as an
uninterrupted run). After such a restart a preconditioned reference norm
(``||M b||``) is measured with the new ``M``, and the residual history holds
the norms of both preconditioners.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import numbers
import os
import re
import time
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from ._errors import agree
from ._layout import Layout
from ._registry import Registry, split_descriptor
from ._vector import DistVector

__all__ = ["Checkpointer", "CheckpointError", "ResumeState", "read_manifest", "load",
           "describe_pc", "from_options", "FORMAT", "VERSION", "MANIFEST"]

#: The ``format`` field of every manifest.
FORMAT = "dmsolve-checkpoint"
#: The manifest version this module writes and reads.
VERSION = 1
#: The manifest's file name inside a checkpoint directory.
MANIFEST = "manifest.json"

_RANK_FILE = re.compile(r"^rank-\d{5}-of-\d{5}\.[0-9a-f]+-\d+\.npz(\.tmp)?$")
# relative tolerance of the fingerprint comparisons: rounding differs between
# rank counts, a different matrix or right-hand side differs at O(1)
_FINGERPRINT_RTOL = 1e-9


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated, edited, or does not match
    the solve that tries to resume from it. Raised on every rank."""


def _agree(comm: MPI.Comm, message: str | None) -> None:
    """Raise :class:`CheckpointError` on every rank if any rank has a message."""
    if not comm.allreduce(0 if message is None else 1, op=MPI.SUM):
        return
    msgs = comm.allgather(message)
    ranks = [r for r, m in enumerate(msgs) if m is not None]
    text = msgs[ranks[0]]
    if comm.Get_size() > 1:
        text += " [seen on rank%s %s]" % ("s" if len(ranks) > 1 else "",
                                          ",".join(map(str, ranks)))
    raise CheckpointError(text)


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def describe_pc(pc) -> str:
    """A string naming a preconditioner argument, stored in checkpoints.

    ``None``/``"none"`` -> ``"none"``; a name -> the name; ``(name, options)``
    -> the name and the sorted options; an object -> its ``name`` attribute
    or its class. Not collective.
    """
    if pc is None:
        return "none"
    if isinstance(pc, (str, tuple, list)):
        name, opts = split_descriptor(pc)
        name = Registry.normalize(name)
        if not opts:
            return name
        return "%s%s" % (name, json.dumps(opts, sort_keys=True, default=repr))
    name = getattr(pc, "name", None)
    if isinstance(name, str) and name:
        return name.lower()
    return "%s.%s" % (type(pc).__module__, type(pc).__qualname__)


def _check_path(value, name: str) -> str:
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
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError("checkpoint manifest %r is not valid JSON (truncated or "
                              "corrupt): %s" % (mpath, e)) from None
    if not isinstance(doc, dict) or "manifest" not in doc or "sha256" not in doc:
        raise CheckpointError("%r is not a dmsolve checkpoint manifest" % mpath)
    man = doc["manifest"]
    if hashlib.sha256(_canonical(man)).hexdigest() != doc["sha256"]:
        raise CheckpointError("checkpoint manifest %r fails its checksum (edited or "
                              "corrupt)" % mpath)
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise CheckpointError("%r is not a dmsolve checkpoint manifest" % mpath)
    if man.get("version") != VERSION:
        raise CheckpointError("checkpoint %r has version %r; this dmsolve reads version %d"
                              % (path, man.get("version"), VERSION))
    return man


def read_manifest(path) -> dict:
    """Read and verify the manifest of the checkpoint at ``path``.

    Not collective. Checks the manifest's own checksum and format, not the
    rank files (see :func:`load`).

    Raises
    ------
    CheckpointError
        Missing, unreadable, corrupt or edited manifest.
    """
    return _read_manifest_local(_check_path(path, "path"))


def _bcast_manifest(path: str, comm: MPI.Comm) -> dict:
    man, err = None, None
    if comm.Get_rank() == 0:
        try:
            man = _read_manifest_local(path)
        except CheckpointError as e:
            err = str(e)
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


def _load_local(path: str, man: dict, layout: Layout, names) -> dict[str, np.ndarray]:
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


def _check_structure(path: str, man: dict) -> None:
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
    path = _check_path(path, "path")
    man = _bcast_manifest(path, comm)
    _check_structure(path, man)
    if layout is None:
        layout = Layout.block(man["global_size"], comm)
    if layout.global_size != man["global_size"]:
        raise CheckpointError("checkpoint %r holds vectors of global size %d, the layout "
                              "has %d" % (path, man["global_size"], layout.global_size))
    msg, arrays = None, {}
    try:
        arrays = _load_local(path, man, layout, man["vectors"])
    except CheckpointError as e:
        msg = str(e)
    _agree(comm, msg)
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


def _write_atomic(fpath: str, data: bytes) -> None:
    tmp = fpath + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, fpath)


@dataclass
class ResumeState:
    """What a method needs to continue a resumed solve.

    ``exact`` is true when the full Krylov state was restored (the method
    continues its recurrence); false when only ``x`` was (the method
    restarts its recurrence from ``x``).
    """

    iteration: int
    scalars: dict = field(default_factory=dict)
    exact: bool = True


class Checkpointer:
    """Where and how often a Krylov solve writes checkpoints, and which
    checkpoint it resumes from.

    Built by :func:`dmsolve.solve` from ``checkpoint=``,
    ``checkpoint_every=`` and ``resume=``; the Krylov methods take it as
    ``checkpoint=``. One object serves one solve at a time.

    Parameters
    ----------
    path : str or os.PathLike, optional
        Directory to write checkpoints into (created if missing).
    every : int, optional
        Write every ``every`` iterations (GMRES/FGMRES: at the first restart
        boundary at or after each multiple). Required with ``path``.
    resume : str or os.PathLike, optional
        Checkpoint directory to resume from (may equal ``path``).
    pc : str, optional
        The preconditioner descriptor to record and compare (see
        :func:`describe_pc`); default: described from the ``M`` of the solve.

    Notes
    -----
    Not collective to construct (the checks are rank-independent). The
    solver calls :meth:`start` (collective) at set-up, :meth:`resume` once
    and :meth:`save` (collective) every ``every`` iterations; with no
    checkpointer a solver pays one ``is None`` test per iteration.
    """

    def __init__(self, path=None, *, every: int | None = None, resume=None,
                 pc: str | None = None):
        if path is None and resume is None:
            raise ValueError("a Checkpointer needs a path to write to or a checkpoint "
                             "to resume from")
        self.path = None if path is None else _check_path(path, "checkpoint")
        self.resume_path = None if resume is None else _check_path(resume, "resume")
        if self.path is not None:
            if every is None:
                raise ValueError("checkpoint_every is required with checkpoint=")
            if isinstance(every, (bool, np.bool_)) or not isinstance(every, numbers.Integral):
                raise TypeError("checkpoint_every must be a positive integer, got %s"
                                % type(every).__name__)
            if every < 1:
                raise ValueError("checkpoint_every must be a positive integer, got %d"
                                 % every)
            every = int(every)
        elif every is not None:
            raise ValueError("checkpoint_every needs checkpoint= (a directory)")
        if pc is not None and not isinstance(pc, str):
            raise TypeError("pc must be a descriptor string (see describe_pc)")
        self.every = every
        self.pc = pc
        self._reset()

    def _reset(self) -> None:
        self._man = None          # the manifest being resumed from
        self._arrays = None       # its vectors, sliced for this rank
        self._last = 0            # iteration of the last write (or of the resume)
        self._options: dict = {}
        self._files: list = []    # this rank's files of the current generation
        self.writes = 0
        self.write_seconds = 0.0
        self.bytes_written = 0
        self.resumed_from = None
        self.restarted = False

    # -- set-up (collective) -------------------------------------------------------
    def start(self, ctx, M) -> None:
        """Bind to a solve: fingerprint ``A`` and ``b``, create the directory,
        read and verify the checkpoint to resume from. Collective on
        ``ctx.comm``; raises :class:`CheckpointError` or ``OSError`` on every
        rank."""
        self._reset()
        comm = ctx.comm
        self._pc = self.pc if self.pc is not None else describe_pc(M)
        self._fingerprint = self._fingerprints(ctx)
        if self.path is not None:
            exc = None
            if comm.Get_rank() == 0:
                try:
                    os.makedirs(self.path, exist_ok=True)
                except OSError as e:
                    exc = OSError("cannot create checkpoint directory %r: %s"
                                  % (self.path, e))
            agree(comm, exc)
            self._token = comm.bcast(os.urandom(4).hex() if comm.Get_rank() == 0 else None,
                                     root=0)
        if self.resume_path is None:
            return
        path = self.resume_path
        man = _bcast_manifest(path, comm)
        _check_structure(path, man)
        self._check_match(path, man, ctx)      # rank-independent facts
        self._exact_layout = (len(man["ranges"]) == ctx.layout.size + 1
                              and np.array_equal(man["ranges"], ctx.layout.ranges))
        keep_state = self._exact_layout or self._pc == "none"
        names = man["vectors"] if keep_state else ["x"]
        msg = None
        try:
            self._arrays = _load_local(path, man, ctx.layout, names)
        except CheckpointError as e:
            msg = str(e)
        _agree(comm, msg)
        self._man = man
        self._keep_state = keep_state

    def _fingerprints(self, ctx) -> list[float]:
        # w^T A v, ||A v||^2, w^T b, ||w||^2 with v, w fixed functions of the
        # global index: independent of the layout up to rounding
        lay = ctx.layout
        gi = np.arange(lay.start, lay.stop, dtype=np.float64)
        v, w = ctx.vector(), ctx.vector()
        np.sin(0.6180339887 * gi + 0.5, out=v.local)
        np.cos(0.4142135623 * gi + 0.2, out=w.local)
        av = ctx.vector()
        ctx.matvec(v, av)
        send = ctx.send
        send[0] = float(np.dot(w.local, av.local))
        send[1] = float(np.dot(av.local, av.local))
        send[2] = float(np.dot(w.local, ctx.b.local))
        send[3] = float(np.dot(w.local, w.local))
        return [float(t) for t in ctx.reduce(4)[:4]]

    def _check_match(self, path: str, man: dict, ctx) -> None:
        def refuse(what):
            raise CheckpointError("cannot resume from %r: %s" % (path, what))
        if man["method"] != ctx.method:
            refuse("it was written by method %r, this solve uses %r"
                   % (man["method"], ctx.method))
        if man["global_size"] != ctx.layout.global_size:
            refuse("it holds a system of global size %d, A has %d"
                   % (man["global_size"], ctx.layout.global_size))
        opts = man["options"]
        if opts.get("norm_type") != ctx.norm_type:
            refuse("it used norm_type %r, this solve uses %r"
                   % (opts.get("norm_type"), ctx.norm_type))
        if opts.get("pc") != self._pc:
            refuse("it used preconditioner %r, this solve uses %r"
                   % (opts.get("pc"), self._pc))
        k = 0 if ctx._Q is None else int(ctx._Q.shape[0])
        if opts.get("nullspace_dim") != k:
            refuse("it used a null space of dimension %r, this solve %d"
                   % (opts.get("nullspace_dim"), k))
        fa, na, fb, nw = self._fingerprint
        ga, _, gb, _ = man["fingerprint"]
        tol_a = _FINGERPRINT_RTOL * math.sqrt(na * nw) + 1e-300
        tol_b = _FINGERPRINT_RTOL * ctx.b2norm * math.sqrt(nw) + 1e-300
        if not abs(fa - ga) <= tol_a:
            refuse("the matrix differs from the one it was written for (fingerprint "
                   "%.17g, now %.17g)" % (ga, fa))
        if not (abs(fb - gb) <= tol_b
                and abs(man["b2norm"] - ctx.b2norm) <= _FINGERPRINT_RTOL * ctx.b2norm):
            refuse("the right-hand side differs from the one it was written for")

    # -- used by the methods ----------------------------------------------------------
    def resume(self, ctx, vectors: dict, **options) -> ResumeState | None:
        """Restore the saved state into ``vectors`` (by name) and the
        history into ``ctx``; None when not resuming.

        ``options`` are method options the state depends on (MINRES's
        ``shift``); they are recorded for :meth:`save` and must equal the
        checkpoint's. Not collective (the checks are rank-independent).
        """
        self._options = {k: (float(v) if isinstance(v, numbers.Real) else v)
                         for k, v in options.items()}
        man = self._man
        if man is None:
            self._last = 0
            return None
        saved = man["options"].get("method_options", {})
        if saved != self._options:
            raise CheckpointError("cannot resume from %r: it used method options %r, this "
                                  "solve %r" % (self.resume_path, saved, self._options))
        if self._keep_state and sorted(vectors) != sorted(man["vectors"]):
            raise CheckpointError("cannot resume from %r: it holds vectors %s, %s needs %s"
                                  % (self.resume_path, sorted(man["vectors"]), ctx.method,
                                     sorted(vectors)))
        names = list(vectors) if self._keep_state else ["x"]
        for k in names:
            np.copyto(vectors[k].local, self._arrays[k])
        self._arrays = None
        it = int(man["iteration"])
        ctx.norms[:] = [float(t) for t in man["residual_norms"]]
        # a preconditioned reference norm ||M b|| is measured anew when M may
        # have changed with the layout (the methods recompute a None bnorm)
        ctx.bnorm = man["bnorm"] if (self._keep_state or ctx.norm_type == "unpreconditioned") \
            else None
        ctx.rnorm0 = man["rnorm0"]
        ctx.x0_is_zero = False
        self._last = it
        self.resumed_from = it
        self.restarted = not self._keep_state
        return ResumeState(it, dict(man["scalars"]), exact=self._keep_state)

    def due(self, it: int) -> bool:
        """Whether iteration ``it`` should write. Not collective."""
        return self.path is not None and it - self._last >= self.every

    def save(self, ctx, it: int, vectors: dict, **scalars) -> None:
        """Write a checkpoint of iteration ``it``. Collective on ``ctx.comm``.

        Raises
        ------
        OSError
            On every rank, if any rank cannot write (the previous checkpoint
            stays valid).
        """
        t0 = time.perf_counter()
        comm = ctx.comm
        rank, size = comm.Get_rank(), comm.Get_size()
        lay = ctx.layout
        gen = "%s-%d" % (self._token, it)
        name = "rank-%05d-of-%05d.%s.npz" % (rank, size, gen)
        meta = {"token": gen, "iteration": int(it), "method": ctx.method, "rank": rank,
                "start": lay.start, "stop": lay.stop}
        exc, entry = None, None
        try:
            buf = io.BytesIO()
            np.savez(buf, meta=np.array(json.dumps(meta)),
                     **{k: np.ascontiguousarray(v.local, dtype=np.float64)
                        for k, v in vectors.items()})
            data = buf.getvalue()
            _write_atomic(os.path.join(self.path, name), data)
            entry = {"name": name, "rank": rank, "start": lay.start, "stop": lay.stop,
                     "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        except OSError as e:
            exc = OSError("cannot write checkpoint file %s in %r: %s" % (name, self.path, e))
        entries = comm.gather(entry, root=0)
        if rank == 0 and all(e is not None for e in entries):
            man = {
                "format": FORMAT, "version": VERSION, "method": ctx.method,
                "iteration": int(it), "token": gen, "global_size": lay.global_size,
                "ranges": [int(t) for t in lay.ranges], "vectors": sorted(vectors),
                "scalars": {k: float(v) for k, v in scalars.items()},
                "options": {"rtol": ctx.rtol, "atol": ctx.atol, "maxiter": ctx.maxiter,
                            "divtol": ctx.divtol, "norm_type": ctx.norm_type,
                            "pc": self._pc, "method_options": self._options,
                            "nullspace_dim": 0 if ctx._Q is None else int(ctx._Q.shape[0])},
                "residual_norms": [float(t) for t in ctx.norms],
                "bnorm": float(ctx.bnorm), "b2norm": float(ctx.b2norm),
                "rnorm0": None if ctx.rnorm0 is None else float(ctx.rnorm0),
                "fingerprint": self._fingerprint, "files": entries,
                "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            doc = {"manifest": man, "sha256": hashlib.sha256(_canonical(man)).hexdigest()}
            try:
                _fsync_dir(self.path)          # the rank files' renames first
                _write_atomic(os.path.join(self.path, MANIFEST),
                              json.dumps(doc, indent=1).encode())
                _fsync_dir(self.path)
            except OSError as e:
                exc = OSError("cannot write checkpoint manifest in %r: %s" % (self.path, e))
        agree(comm, exc)
        # the new checkpoint is durable: drop the previous generation
        for old in self._files:
            try:
                os.remove(old)
            except OSError:
                pass
        self._files = [os.path.join(self.path, name)]
        if rank == 0 and self.writes == 0:
            self._remove_stale(entries)
        self._last = it
        self.writes += 1
        self.bytes_written += entry["bytes"]
        self.write_seconds += time.perf_counter() - t0

    def _remove_stale(self, entries) -> None:
        # rank files of earlier runs (other rank counts, crashed writes)
        keep = {e["name"] for e in entries}
        try:
            names = os.listdir(self.path)
        except OSError:
            return
        for n in names:
            if _RANK_FILE.match(n) and n not in keep:
                try:
                    os.remove(os.path.join(self.path, n))
                except OSError:
                    pass

    def report(self) -> dict:
        """What this solve did with checkpoints (for ``info.extra``). Not collective."""
        return {"path": self.path, "every": self.every, "writes": self.writes,
                "write_seconds": self.write_seconds, "bytes_written": self.bytes_written,
                "resumed_from": self.resumed_from, "restarted": self.restarted}


def from_options(options: dict, pc, method: str, func) -> Checkpointer | None:
    """Pop ``checkpoint``, ``checkpoint_every`` and ``resume`` from the
    keyword ``options`` of :func:`dmsolve.solve` and build a
    :class:`Checkpointer` (None when none is given). Not collective; the
    checks are rank-independent."""
    path = options.pop("checkpoint", None)
    every = options.pop("checkpoint_every", None)
    resume = options.pop("resume", None)
    if isinstance(path, Checkpointer):
        if every is not None or resume is not None:
            raise TypeError("give checkpoint_every= and resume= to the Checkpointer")
        return path
    if path is None and resume is None:
        if every is not None:
            raise ValueError("checkpoint_every needs checkpoint= (a directory)")
        return None
    import inspect
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):     # pragma: no cover - builtins
        params = {}
    if "checkpoint" not in params:
        raise ValueError("method %r does not support checkpoints" % method)
    if resume is not None and options.get("x0") is not None:
        raise ValueError("give x0 or resume, not both: a resumed solve starts from "
                         "the checkpoint's iterate")
    return Checkpointer(path, every=every, resume=resume, pc=describe_pc(pc))
