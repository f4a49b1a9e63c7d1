"""BiCGStab for nonsymmetric systems, right preconditioned."""

from __future__ import annotations

import cmath
import math
from dataclasses import dataclass

import numpy as np

from .._vector import DistVector
from ._docs import document
from ._info import ConvergedReason
from ._result import finish, zero_rhs
from ._stopping import DEFAULT_DIVTOL
from ._system import System, make_system

__all__ = ["bicgstab"]


@document
def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
             checkpoint=None,
             reproducible=False):
    """Solve ``A x = b`` by the biconjugate gradient stabilised method.

    Right preconditioned, so the tested residual is the true one: stops when
    ``||b - A x|| <= max(rtol*||b||, atol)`` (also at the half step, when
    ``||s||`` already meets the test).

    Parameters
    ----------
    COMMON_PARAMETERS

    COMMON_SECTIONS

    Three reductions per iteration (``r0^T v``; ``t^T s``, ``t^T t`` and
    ``||s||`` fused; ``||r||`` and ``r0^T r`` fused). ``rho = 0`` or
    ``omega = 0`` stops with ``BREAKDOWN``.

    References
    ----------
    .. [1] H. A. van der Vorst, "Bi-CGSTAB: a fast and smoothly converging
       variant of Bi-CG for the solution of nonsymmetric linear systems",
       SIAM J. Sci. Stat. Comput. 13(2):631-644, 1992.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003, Algorithm 7.7.

    Examples
    --------
    Upwind convection-diffusion on a 10 x 10 grid, a nonsymmetric matrix:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> A = dmsolve.gallery.convection_diffusion(10, comm)
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> x, info = dmsolve.bicgstab(A, b, rtol=1e-8)
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 17
    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True
    """
    s = make_system("bicgstab", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                    reproducible=reproducible,
                    callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                    norm_type="unpreconditioned", raise_on_failure=raise_on_failure,
                    project_rhs=False, checkpoint=checkpoint)
    if s.b2norm == 0.0:
        return zero_rhs(s)
    st = BiCGState.of(s)
    ck = s.checkpoints
    state = None if ck is None else ck.resume(st.saved())
    s.begin()
    if state is not None and state.exact:
        for name in BiCGState.SCALARS:
            setattr(st, name, state.scalars[name])
        return _iterate(s, st, state.iteration, 0, None)
    it = 0 if state is None else state.iteration
    if state is not None:
        s.stop.norms.pop()          # re-measured below from the restored x
    s.residual(st.r, st.t)
    reason = s.stop.test(it, _new_shadow(s, st))
    return _iterate(s, st, it, it, reason)


@dataclass(slots=True)
class BiCGState:
    """BiCGStab's state (van der Vorst's names): the iterate ``x``, the
    residual ``r`` and the shadow residual ``rhat``, the direction ``p``,
    ``v = A M p``, the half-step residual ``s`` and ``t = A M s``;
    ``phat = M p`` and ``shat = M s`` (``p`` and ``s`` themselves without a
    preconditioner); the scalars ``rho = rhat^H r`` (and the previous one),
    ``alpha`` and ``omega``. Not collective."""

    #: the scalars a checkpoint holds, in this order
    SCALARS = ("rho", "rho_old", "alpha", "omega")

    x: DistVector
    r: DistVector
    rhat: DistVector
    p: DistVector
    v: DistVector
    s: DistVector
    t: DistVector
    phat: DistVector
    shat: DistVector
    rho: float | complex = 0.0
    rho_old: float | complex = 0.0
    alpha: float | complex = 1.0
    omega: float | complex = 1.0

    @classmethod
    def of(cls, s: System) -> "BiCGState":
        """A new state for the solve ``s`` (its ``x`` as the iterate)."""
        r, rhat, p, v, sv, t = (s.vector() for _ in range(6))
        phat = p if s.trivial_pc else s.vector()
        shat = sv if s.trivial_pc else s.vector()
        return cls(s.x, r, rhat, p, v, sv, t, phat, shat)

    def saved(self) -> dict[str, DistVector]:
        """What a checkpoint holds (with :meth:`scalars`)."""
        return {"x": self.x, "r": self.r, "rhat": self.rhat, "p": self.p, "v": self.v}

    def scalars(self) -> dict:
        """The scalars a checkpoint holds, by name."""
        return {name: getattr(self, name) for name in self.SCALARS}


def _iterate(s: System, st: BiCGState, it: int, start: int, reason):
    """BiCGStab from iteration ``it``, the recurrence having started at
    iteration ``start``. Collective."""
    stop, truth, ck, x = s.stop, s.truth, s.checkpoints, s.x
    while True:
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, BiCGStab restarts from r = b - A x (left in r by confirm)
            reason = truth.confirm(reason, it, st.r, st.t)
            if reason is not None:
                break
            start = it
            reason = truth.retest(_new_shadow(s, st))
            if reason is not None:
                break
        if st.rho == 0.0:
            reason = ConvergedReason.BREAKDOWN
            break
        reason = _bicg_half_step(s, st, it == start)
        if reason is not None:
            break
        ts, tt, ss = _stabiliser_products(s, st)
        it += 1
        snorm = math.sqrt(ss)
        if snorm <= stop.tolerance() or tt == 0.0:
            # the half step already solves the system (or cannot be improved)
            s.axpy(st.alpha, st.phat.local, x.local)
            reason = stop.test(it, snorm)
            s.callback(x)
            if reason is None:
                reason = ConvergedReason.BREAKDOWN
            continue
        reason = stop.test(it, _stabilise(s, st, ts / tt))
        s.callback(x)
        if reason is None and st.omega == 0.0:
            reason = ConvergedReason.BREAKDOWN
        if reason is None and ck is not None and ck.due(it):
            ck.save(it, st.saved(), **st.scalars())
    return finish(s, reason, it)


def _new_shadow(s: System, st: BiCGState) -> float:
    """``rhat = r`` and ``rho = r^H r`` for a residual computed from ``x``;
    returns ``||r||``. Collective: one reduction."""
    np.copyto(st.rhat.local, st.r.local)
    s.red.put(0, st.r.local, st.r.local)
    st.rho = s.scalar(s.red.reduce(1)[0])
    return math.sqrt(st.rho.real)


def _bicg_half_step(s: System, st: BiCGState, first: bool) -> ConvergedReason | None:
    """The BiCG half of an iteration: ``p = r + beta (p - omega v)`` (``r``
    when ``first``), ``v = A M p``, ``alpha = rho / rhat^H v``, ``s = r -
    alpha v``. Returns why to stop (``rhat^H v`` zero or not finite) or
    None. Collective: one reduction."""
    p = st.p
    if first:
        np.copyto(p.local, st.r.local)
    else:
        beta = (st.rho / st.rho_old) * (st.alpha / st.omega)
        s.axpy(-st.omega, st.v.local, p.local)        # p = r + beta (p - omega v)
        p.local *= beta
        p.local += st.r.local
    if st.phat is not p:
        s.precondition(p, st.phat)
    s.matvec(st.phat, st.v)
    s.red.put(0, st.rhat.local, st.v.local)
    rv = s.scalar(s.red.reduce(1)[0])
    if rv == 0.0 or not cmath.isfinite(rv):
        return ConvergedReason.BREAKDOWN if rv == 0.0 else ConvergedReason.NANORINF
    st.alpha = st.rho / rv
    np.copyto(st.s.local, st.r.local)
    s.axpy(-st.alpha, st.v.local, st.s.local)
    return None


def _stabiliser_products(s: System, st: BiCGState) -> tuple:
    """``t = A M s``, then ``(t^H s, t^H t, s^H s)`` in one reduction. Collective."""
    if st.shat is not st.s:
        s.precondition(st.s, st.shat)
    s.matvec(st.shat, st.t)
    red = s.red
    red.put(0, st.t.local, st.s.local)
    red.put(1, st.t.local, st.t.local)
    red.put(2, st.s.local, st.s.local)
    out = red.reduce(3)
    return s.scalar(out[0]), float(out[1].real), float(out[2].real)


def _stabilise(s: System, st: BiCGState, omega) -> float:
    """The stabilising half: ``x += alpha M p + omega M s``, ``r = s - omega
    t``, then ``||r||`` and the next ``rho = rhat^H r`` in one reduction;
    returns ``||r||``. Collective."""
    st.omega = omega
    x = st.x
    s.axpy(st.alpha, st.phat.local, x.local)
    s.axpy(omega, st.shat.local, x.local)
    np.copyto(st.r.local, st.s.local)
    s.axpy(-omega, st.t.local, st.r.local)
    red = s.red
    red.put(0, st.r.local, st.r.local)
    red.put(1, st.rhat.local, st.r.local)
    out = red.reduce(2)
    st.rho_old, st.rho = st.rho, s.scalar(out[1])
    return math.sqrt(float(out[0].real))
