"""The checkpointer policy: when a Krylov solve writes a checkpoint, what it
records, and what must match before it resumes (see docs/checkpoint.md)."""

from __future__ import annotations

import inspect
import json
import math
import numbers
import os
import time
from dataclasses import dataclass, field

import numpy as np

from .._atomic import discard
from .._errors import agree
from .._registry import Registry, split_descriptor
from ..validate import check_int
from ._format import (CheckpointError, ManifestScalars, agreed_checkpoint, bcast_manifest,
                      check_path, check_structure, load_local, remove_stale, write_manifest,
                      write_rank_file)

__all__ = ["Checkpointer", "ResumeState", "describe_pc", "from_options"]

# relative tolerance of the fingerprint comparisons: rounding differs between
# rank counts, a different matrix or right-hand side differs at O(1)
_FINGERPRINT_RTOL = 1e-9


def _kind(name: str) -> str:
    """A vector name without its trailing index (``"v"`` for ``"v11"``)."""
    return name.rstrip("0123456789")


def _scalar(value):
    """A saved scalar: a float, or a list of floats (GMRES's cycle state)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [float(t) for t in value]
    return float(value)


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


@dataclass
class ResumeState:
    """What a method needs to continue a resumed solve.

    ``exact`` is true when the full Krylov state was restored (the method
    continues its recurrence); false when only ``x`` was (the method
    restarts its recurrence from ``x``). A plain record: not collective.
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
        Write every ``every`` iterations (GMRES/FGMRES too: a checkpoint in
        the middle of a cycle holds the current iterate and the cycle's
        state). Required with ``path``.
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
        self.path = None if path is None else check_path(path, "checkpoint")
        self.resume_path = None if resume is None else check_path(resume, "resume")
        if self.path is not None:
            if every is None:
                raise ValueError("checkpoint_every is required with checkpoint=")
            every = check_int("checkpoint_every", every, low=1)
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
        man = bcast_manifest(path, comm)
        check_structure(path, man)
        self._check_match(path, man, ctx)      # rank-independent facts
        self._exact_layout = (len(man["ranges"]) == ctx.layout.size + 1
                              and np.array_equal(man["ranges"], ctx.layout.ranges))
        keep_state = self._exact_layout or self._pc == "none"
        names = man["vectors"] if keep_state else ["x"]
        with agreed_checkpoint(comm):
            self._arrays = load_local(path, man, ctx.layout, names)
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
    def resume(self, ctx, vectors: dict, optional=(), **options) -> ResumeState | None:
        """Restore the saved state into ``vectors`` (by name) and the
        history into ``ctx``; None when not resuming.

        ``optional`` names the vectors of ``vectors`` a checkpoint may lack
        (GMRES's cycle state, saved only mid-cycle); the others it must hold.
        It may also hold more of the same kind (basis vectors ``v11``, ...,
        of a longer cycle), which are not restored.
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
        saved, required = set(man["vectors"]), set(vectors) - set(optional)
        # more optional vectors of one kind (v11 of a longer GMRES cycle) are
        # allowed and not restored; any other difference is refused
        kinds = {_kind(n) for n in optional}
        if self._keep_state and not (required <= saved and all(
                _kind(n) in kinds for n in saved - set(vectors))):
            raise CheckpointError("cannot resume from %r: it holds vectors %s, %s needs %s"
                                  % (self.resume_path, sorted(man["vectors"]), ctx.method,
                                     sorted(required)))
        names = sorted(saved & set(vectors)) if self._keep_state else ["x"]
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
        return ResumeState(it, ManifestScalars(man["scalars"], self.resume_path),
                           exact=self._keep_state)

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
        Exception
            Any other exception of the writes, raised on every rank as its
            type (:func:`dmsolve.agree`); so is a user-code error that some
            rank holds, before anything is written.
        """
        # no checkpoint of a state that failed user code left behind, and no
        # rank blocked in the writes' collectives while another holds an error
        ctx.check_errors()
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
            entry = write_rank_file(self.path, name, meta, vectors)
        except OSError as e:
            exc = OSError("cannot write checkpoint file %s in %r: %s" % (name, self.path, e))
        except Exception as e:  # noqa: BLE001 - agreed below: raised on every rank, its type kept
            exc = e
        entries = comm.gather(entry, root=0)
        if rank == 0 and all(e is not None for e in entries):
            man = {
                "method": ctx.method, "iteration": int(it), "token": gen,
                "global_size": lay.global_size, "ranges": [int(t) for t in lay.ranges],
                "vectors": sorted(vectors), "scalars": {k: _scalar(v) for k, v in scalars.items()},
                "options": {"rtol": ctx.rtol, "atol": ctx.atol, "maxiter": ctx.maxiter,
                            "divtol": ctx.divtol, "norm_type": ctx.norm_type,
                            "pc": self._pc, "method_options": self._options,
                            "nullspace_dim": 0 if ctx._Q is None else int(ctx._Q.shape[0])},
                "residual_norms": [float(t) for t in ctx.norms],
                "bnorm": float(ctx.bnorm), "b2norm": float(ctx.b2norm),
                "rnorm0": None if ctx.rnorm0 is None else float(ctx.rnorm0),
                "fingerprint": self._fingerprint, "files": entries,
            }
            try:
                write_manifest(self.path, man)
            except OSError as e:
                exc = OSError("cannot write checkpoint manifest in %r: %s" % (self.path, e))
            except Exception as e:  # noqa: BLE001 - agreed below, as above
                exc = e
        try:
            agree(comm, exc)
        except BaseException:
            # a generation without its manifest is no checkpoint: remove this
            # rank's file of it, or every failed write would leave one more
            if entry is not None:
                discard(os.path.join(self.path, name))
            raise
        # the new checkpoint is durable: drop the previous generation
        for old in self._files:
            try:
                os.remove(old)
            except OSError:
                pass
        self._files = [os.path.join(self.path, name)]
        if rank == 0 and self.writes == 0:
            remove_stale(self.path, {e["name"] for e in entries})
        self._last = it
        self.writes += 1
        self.bytes_written += entry["bytes"]
        self.write_seconds += time.perf_counter() - t0

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
