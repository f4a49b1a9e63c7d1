"""The restarted Arnoldi cycle that GMRES and flexible GMRES share: Gram-Schmidt
against the basis, Givens rotations of the Hessenberg matrix, the update of
``x`` at a restart, and the state a mid-cycle checkpoint holds."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._vector import DistVector
from ..checkpoint import CheckpointError
from ._info import ConvergedReason
from ._result import finish, zero_rhs
from ._system import System

__all__ = ["arnoldi_solve", "Cycle", "HAPPY", "ORTHOG"]

#: ``h[j+1, j] <= HAPPY * ||A v_j||`` means the Krylov space is invariant.
HAPPY = 1e-14

#: The Gram-Schmidt variants (``orthog=``).
ORTHOG = ("cgs2", "cgs", "mgs")


@dataclass(slots=True)
class Cycle:
    """The state of one (F)GMRES cycle of at most ``m`` steps.

    ``V`` (``m + 1`` rows) is the Arnoldi basis and ``Z`` (``m`` rows, FGMRES
    only) the preconditioned basis ``z_j = M v_j``, with ``Vv``, ``Zv`` the
    same rows as DistVectors; ``H`` the Hessenberg matrix, rotated into
    upper triangular form column by column by the rotations ``cs``, ``sn``,
    which also rotate ``g`` (``|g[j+1]|`` is the residual estimate);
    ``hcol``, ``htmp`` the column being built. ``t`` holds ``b - A x`` at a
    restart and is a work vector with ``t2``; ``xk`` is the iterate given to
    the callback and ``xs`` the one a checkpoint holds (None when unused).
    Not collective.
    """

    V: np.ndarray
    Vv: list
    Z: np.ndarray | None
    Zv: list | None
    H: np.ndarray
    g: np.ndarray
    cs: np.ndarray
    sn: np.ndarray
    hcol: np.ndarray
    htmp: np.ndarray
    t: DistVector
    t2: DistVector
    xk: DistVector | None
    xs: DistVector | None
    orthog: str
    left: bool
    flexible: bool
    precond_right: bool
    complex: bool

    @classmethod
    def allocate(cls, s: System, restart: int, orthog: str, left: bool,
                 flexible: bool) -> "Cycle":
        """The cycle of ``min(restart, maxiter)`` steps for the solve ``s``
        (and reduction buffers for its Gram-Schmidt). Not collective."""
        m = int(min(restart, max(s.stop.maxiter, 1)))
        s.red.reserve(m + 2)
        lay, nloc, dt = s.layout, s.layout.local_size, s.dtype
        V = np.zeros((m + 1, nloc), dtype=dt)
        Z = np.zeros((m, nloc), dtype=dt) if flexible else None
        return cls(
            V=V, Vv=[DistVector(lay, V[i]) for i in range(m + 1)],
            Z=Z, Zv=None if Z is None else [DistVector(lay, Z[i]) for i in range(m)],
            H=np.zeros((m + 1, m), dtype=dt), g=np.zeros(m + 1, dtype=dt),
            cs=np.zeros(m),             # the rotations' cosines are real
            sn=np.zeros(m, dtype=dt), hcol=np.zeros(m + 1, dtype=dt),
            htmp=np.zeros(m + 1, dtype=dt), t=s.vector(), t2=s.vector(),
            xk=s.vector() if s.has_callback else None,
            xs=s.vector() if s.checkpoints is not None else None,
            orthog=orthog, left=left, flexible=flexible,
            precond_right=not left and not s.trivial_pc and not flexible,
            complex=s.complex)

    @property
    def m(self) -> int:
        """The cycle's length."""
        return self.H.shape[1]

    def names(self) -> list[str]:
        """The names of a mid-cycle checkpoint's vectors besides ``x``: the
        cycle's start and the bases."""
        return ["x_cycle"] + ["v%d" % i for i in range(self.m + 1)] + (
            ["z%d" % i for i in range(self.m)] if self.flexible else [])


def arnoldi_solve(s: System, restart: int, orthog: str, left: bool, flexible: bool):
    """Run restarted (F)GMRES cycles on a set-up solve. Collective."""
    if s.b2norm == 0.0:
        return zero_rhs(s)
    c = Cycle.allocate(s, restart, orthog, left, flexible)
    ck = s.checkpoints
    state = None
    if ck is not None:
        # xs: the current iterate of a mid-cycle checkpoint (and what a resume
        # reads as "x"); a mid-cycle checkpoint also holds the cycle's state
        vecs = dict(zip(c.names(), [s.x] + c.Vv + (c.Zv if flexible else [])))
        state = ck.resume({"x": c.xs, **vecs}, optional=c.names())
    s.begin()
    it = j0 = 0                     # j0: the inner step the first cycle starts at
    if state is not None:
        it = state.iteration
        j0 = _resume_cycle(s, state, c)
        if j0 == 0:
            np.copyto(s.x.local, c.xs.local)    # the iterate (at a restart boundary)
    # a resumed solve continues at a restart, not at iteration 0
    return _restarted(s, c, it, j0, first=state is None)


def _restarted(s: System, c: Cycle, it: int, j0: int, first: bool):
    """Cycles from iteration ``it`` (the first from inner step ``j0``) to the
    end. Collective."""
    truth, ck, x = s.truth, s.checkpoints, s.x
    have_t = False                  # t already holds b - A x (after the truth test)
    while True:
        if j0 == 0:
            reason = _start_cycle(s, c, it, first, have_t)
            first = have_t = False
            if reason is not None:
                break
        k, it, reason = _cycle(s, c, j0, it)
        j0 = 0
        _update(s, c, x, k)
        if reason is not None:
            # the Arnoldi estimate claimed convergence: confirm it from x; if the
            # true residual fails, the next cycle starts from t = b - A x
            reason = truth.confirm(reason, it, c.t, c.t2)
            if reason is not None:
                break
            have_t = True
            continue
        if ck is not None and ck.due(it):
            ck.save(it, {"x": x})     # at a restart boundary x is the state
    return finish(s, reason, it)


def _start_cycle(s: System, c: Cycle, it: int, first: bool, have_t: bool):
    """The (preconditioned) residual from ``x`` into ``v_0``, tested: at
    iteration 0 as the first norm, later in place of the last estimate.
    Returns why to stop, or None with ``g = beta e_1``. Collective."""
    stop, red, t, v0 = s.stop, s.red, c.t, c.Vv[0]
    if have_t:
        pass
    elif first and s.x0_is_zero:
        np.copyto(t.local, s.b.local)
    else:
        s.matvec(s.x, t)
        np.subtract(s.b.local, t.local, out=t.local)
    if c.left:
        s.precondition(t, v0)
    else:
        np.copyto(v0.local, t.local)
    red.put(0, v0.local, v0.local)
    if c.left:
        # ||b - A x|| rides along: the truth of a convergence met here
        red.put(1, t.local, t.local)
    out = red.reduce(2 if c.left else 1)
    beta = math.sqrt(out[0].real)
    tnorm = math.sqrt(out[1].real) if c.left else beta
    reason = None
    if first:
        if s.x0_is_zero and stop.bnorm is None:
            stop.bnorm = beta
        s.reference_norm(c.t2)
        reason = stop.test(0, beta)
    else:
        if stop.bnorm is None:       # resumed with another M: ||M b|| anew
            s.reference_norm(c.t2)
        # report the true residual of the restart instead of the estimate
        stop.norms[-1] = beta
        if not math.isfinite(beta):
            reason = ConvergedReason.NANORINF
        elif beta <= stop.tolerance():
            reason = stop.converged_reason()
    # the residual was just computed from x: a restart could not help
    reason = s.truth.confirm(reason, it, t, None, tnorm=tnorm, can_restart=False)
    if reason is None:
        v0.local *= 1.0 / beta
        c.g.fill(0.0)
        c.g[0] = beta
    return reason


def _cycle(s: System, c: Cycle, j0: int, it: int):
    """Arnoldi steps ``j0 .. m-1`` of a cycle, each tested; returns ``(k, it,
    reason)`` with ``k`` the steps the cycle holds. Collective."""
    stop, ck, x = s.stop, s.checkpoints, s.x
    k, reason = j0, None
    for j in range(j0, c.m):
        hnext, happy = _arnoldi_step(s, c, j)
        reason = _rotate(c, j, hnext)
        if reason is not None:
            break
        k = j + 1
        it += 1
        reason = stop.test(it, abs(c.g[j + 1]))
        if c.xk is not None:
            np.copyto(c.xk.local, x.local)
            _update(s, c, c.xk, k)
            s.callback(c.xk)
        if reason is None and happy:
            reason = ConvergedReason.BREAKDOWN
        if reason is not None:
            break
        if k < c.m and ck is not None and ck.due(it):
            # mid-cycle: the current iterate x + V y (a small triangular
            # solve), with the cycle's state for an exact continuation
            np.copyto(c.xs.local, x.local)
            _update(s, c, c.xs, k)
            _save_cycle(s, c, it, k)
    return k, it, reason


def _arnoldi_step(s: System, c: Cycle, j: int) -> tuple[float, bool]:
    """``v_{j+1}`` from the operator applied to ``v_j``, orthogonalised
    against the basis (column ``j`` of ``H`` into ``hcol``) and normalised;
    returns ``(h[j+1, j], happy)``, ``happy`` when the Krylov space is
    invariant (``v_{j+1}`` is then left unnormalised). Collective."""
    vj, wv = c.Vv[j], c.Vv[j + 1]
    if c.flexible:
        s.precondition(vj, c.Zv[j])
        s.matvec(c.Zv[j], wv)
    elif c.left:
        s.matvec(vj, c.t)
        s.precondition(c.t, wv)
    elif c.precond_right:
        s.precondition(vj, c.t)
        s.matvec(c.t, wv)
    else:
        s.matvec(vj, wv)
    if c.orthog == "mgs":
        hnext, wn0 = _mgs(s, c, j, wv.local)
    else:
        hnext, wn0 = _cgs(s, c, j, wv.local)
    happy = not hnext > HAPPY * wn0
    if not happy:
        wv.local *= 1.0 / hnext
    return hnext, happy


def _mgs(s: System, c: Cycle, j: int, w: np.ndarray) -> tuple[float, float]:
    """Modified Gram-Schmidt: ``j + 2`` reductions. Returns ``(||w|| after,
    ||w|| before)``. Collective."""
    red, V, hcol = s.red, c.V, c.hcol
    for i in range(j + 1):
        red.put(0, V[i], w)
        if i == 0:
            red.put(1, w, w)
        out = red.reduce(2 if i == 0 else 1)
        hcol[i] = out[0]
        if i == 0:
            wn0 = math.sqrt(out[1].real)
        s.axpy(-hcol[i], V[i], w)
    red.put(0, w, w)
    return math.sqrt(red.reduce(1)[0].real), wn0


def _cgs(s: System, c: Cycle, j: int, w: np.ndarray) -> tuple[float, float]:
    """Classical Gram-Schmidt: the projections and ``||w||`` in one fused
    reduction, then the new norm in another (``"cgs"``) or, for ``"cgs2"``,
    deduced, and a second pass when the Daniel-Gragg-Kaufman-Stewart test
    asks for it. Returns ``(||w|| after, ||w|| before)``. Collective."""
    red, Vk, hcol, htmp, dot = s.red, c.V[:j + 1], c.hcol, c.htmp, s.dot
    k = j + 1
    red.put_rows(0, Vk, w)
    red.put(k, w, w)
    out = red.reduce(k + 1)
    hcol[:k] = out[:k]
    wn0 = math.sqrt(out[k].real)
    s.gemv_sub(Vk, hcol[:k], w)
    if c.orthog == "cgs":
        red.put(0, w, w)
        return math.sqrt(red.reduce(1)[0].real), wn0
    # Daniel-Gragg-Kaufman-Stewart test: the new norm follows from
    # Pythagoras unless w lost more than 1/sqrt(2) of its length to the
    # basis, in which case it is orthogonalised again
    nsq = out[k].real - float(dot(hcol[:k], hcol[:k]).real)
    if nsq > 0.5 * out[k].real:
        return math.sqrt(nsq), wn0
    red.put_rows(0, Vk, w)
    red.put(k, w, w)
    out = red.reduce(k + 1)
    htmp[:k] = out[:k]
    wwp = out[k].real
    s.gemv_sub(Vk, htmp[:k], w)
    hcol[:k] += htmp[:k]
    nsq = wwp - float(dot(htmp[:k], htmp[:k]).real)
    if nsq > 1e-2 * wwp:
        return math.sqrt(nsq), wn0
    # heavy cancellation (near breakdown): measure instead of deducing
    red.put(0, w, w)
    return math.sqrt(red.reduce(1)[0].real), wn0


def _rotate(c: Cycle, j: int, hnext: float) -> ConvergedReason | None:
    """Apply the previous Givens rotations to column ``j`` (``hcol``), then a
    new one that annihilates ``hnext``; store the column in ``H`` and rotate
    ``g``. Returns why to stop when the rotation does not exist (zero or not
    finite), else None. Not collective."""
    hcol, cs, sn, g = c.hcol, c.cs, c.sn, c.g
    cplx = c.complex
    for i in range(j):
        hi, hi1 = hcol[i], hcol[i + 1]
        hcol[i] = cs[i] * hi + sn[i] * hi1
        hcol[i + 1] = -(sn[i].conjugate() if cplx else sn[i]) * hi + cs[i] * hi1
    hjj = hcol[j]
    rr = math.hypot(abs(hjj), hnext)
    if rr == 0.0 or not math.isfinite(rr):
        return ConvergedReason.BREAKDOWN if rr == 0.0 else ConvergedReason.NANORINF
    if not cplx:
        cs[j], sn[j] = hjj / rr, hnext / rr
        hcol[j] = rr
    elif hjj == 0:
        cs[j], sn[j] = 0.0, 1.0
        hcol[j] = hnext
    else:
        # the complex rotation [[c, s], [-conj(s), c]] with c real:
        # c = |h|/rr, s = (h/|h|) hnext/rr maps (h, hnext) to ((h/|h|) rr, 0)
        phase = hjj / abs(hjj)
        cs[j], sn[j] = abs(hjj) / rr, phase * (hnext / rr)
        hcol[j] = phase * rr
    c.H[:j + 1, j] = hcol[:j + 1]
    c.H[j + 1, j] = 0.0
    g[j + 1] = -(sn[j].conjugate() if cplx else sn[j]) * g[j]
    g[j] = cs[j] * g[j]
    return None


def _update(s: System, c: Cycle, target: DistVector, k: int) -> None:
    """``target += (Z or M V)[:, :k] y`` with ``H[:k, :k] y = g[:k]``.
    Collective with right preconditioning (one application of ``M``), else
    not."""
    from scipy.linalg import solve_triangular
    if k == 0:
        return
    y = solve_triangular(c.H[:k, :k], c.g[:k], check_finite=False)
    if c.flexible:
        s.gemv_sub(c.Z[:k], y, target.local, alpha=1.0)
    elif c.precond_right:
        c.t2.fill(0.0)
        s.gemv_sub(c.V[:k], y, c.t2.local, alpha=1.0)
        s.precondition(c.t2, c.t)
        s.axpy(1.0, c.t.local, target.local)
    else:
        s.gemv_sub(c.V[:k], y, target.local, alpha=1.0)


# -- checkpoints inside a cycle ----------------------------------------------------------

def _save_cycle(s: System, c: Cycle, it: int, k: int) -> None:
    """Write a mid-cycle checkpoint after inner step ``k``: ``x`` is the
    current iterate ``xs``, ``x_cycle`` the cycle's start, ``v0 .. vk`` (and
    ``z0 .. z{k-1}``) the basis, the rotated ``R``, ``g``, ``cs``, ``sn`` its
    scalars. Collective."""
    vecs = {"x": c.xs, "x_cycle": s.x}
    vecs.update(("v%d" % i, c.Vv[i]) for i in range(k + 1))
    if c.flexible:
        vecs.update(("z%d" % i, c.Zv[i]) for i in range(k))
    iu = np.triu_indices(k)
    s.checkpoints.save(it, vecs, inner=k, R=c.H[:k, :k][iu].tolist(),
                       g=c.g[:k + 1].tolist(), cs=c.cs[:k].tolist(), sn=c.sn[:k].tolist())


def _resume_cycle(s: System, state, c: Cycle) -> int:
    """Restore a mid-cycle state into ``H, g, cs, sn`` (the vectors are
    restored by the checkpointer); return the inner step to continue at, 0
    for a restart from ``x`` (a restart boundary, a restarted resume, or a
    cycle longer than this solve's ``restart``). Not collective (the manifest
    is the same on every rank)."""
    sc = state.scalars
    k = int(sc.get("inner", 0))
    if not state.exact or k == 0 or k >= c.m:
        return 0
    try:
        R = np.asarray(sc["R"], dtype=float)
        gg = np.asarray(sc["g"], dtype=float)
        cs = np.asarray(sc["cs"], dtype=float)
        sn = np.asarray(sc["sn"], dtype=float)
        iu = np.triu_indices(k)
        if R.shape != (iu[0].size,) or gg.shape != (k + 1,) or cs.shape != (k,) \
                or sn.shape != (k,):
            raise ValueError
    except (KeyError, TypeError, ValueError):
        raise CheckpointError("cannot resume from %r: its GMRES cycle state is malformed"
                              % (s.checkpoints.resume_path,)) from None
    c.H[:k, :k][iu] = R
    c.g[:k + 1] = gg
    c.cs[:k] = cs
    c.sn[:k] = sn
    return k
