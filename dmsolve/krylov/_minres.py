"""MINRES for symmetric (possibly indefinite or singular) systems."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._vector import DistVector
from ..validate import check_real
from ._docs import document
from ._info import ConvergedReason
from ._result import finish, zero_rhs
from ._stopping import DEFAULT_DIVTOL
from ._system import System, make_system

__all__ = ["minres"]

_EPS = np.finfo(float).eps


@document
def minres(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
           nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
           shift=0.0, checkpoint=None, check=False,
           reproducible=False):
    """Solve ``(A - shift I) x = b`` by MINRES, for symmetric (Hermitian) ``A``.

    ``A`` may be indefinite, and singular if the system is consistent; ``M``
    must be symmetric (Hermitian) positive definite; ``shift`` is real. Stops when
    ``||r|| <= max(rtol*||b||, atol)``, where without ``M`` the norm is the
    2-norm of ``r = b - A x`` and with ``M`` the natural norm
    ``sqrt(r^T M r)`` (and ``||b||`` likewise), the quantity MINRES
    minimises; the norms are the recurrence's estimates ``phibar``.

    Parameters
    ----------
    COMMON_PARAMETERS
    shift : float, optional
        Solve with ``A - shift I`` instead of ``A``.
    check : bool, optional
        Test at set-up that ``A`` (and ``M``) is symmetric, as scipy's
        ``minres(check=True)``: ``y^T A x`` against ``x^T A y`` for two fixed
        vectors of the global index (the same verdict at any rank count),
        within ``SYMMETRY_RTOL``; a nonsymmetric ``A`` or ``M`` raises
        ValueError on every rank. Costs two products, two preconditioner
        applications and one reduction. Off by default: MINRES on a
        nonsymmetric matrix does not converge (it runs to ``maxiter``) or
        converges to a wrong answer, which the true-residual check at the
        end then reports as ``FALSE_CONVERGENCE``.

    COMMON_SECTIONS

    Two reductions per iteration (``v^T A v`` and the next Lanczos
    ``beta``). A negative ``r^T M r`` stops with ``INDEFINITE_PC``. A
    Lanczos breakdown (``beta = 0``) with a singular projected matrix, so
    that the residual cannot be reduced (``b`` in the null space of ``A``,
    or with a part in it), stops with ``BREAKDOWN``, not ``RTOL``. A
    preconditioner whose ``symmetric`` attribute is False is refused with
    ValueError. With
    ``nullspace`` the null-space part of ``b`` is removed first (``A`` is
    symmetric) and the iterates stay orthogonal to the null space, giving the
    minimum-norm solution when ``x0`` is None. A checkpoint holds ``x`` and
    the Lanczos state ``r1, r2, y, w, w2`` with its scalars.

    References
    ----------
    .. [1] C. C. Paige and M. A. Saunders, "Solution of sparse indefinite
       systems of linear equations", SIAM J. Numer. Anal. 12(4):617-629, 1975.
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003.

    Examples
    --------
    The 7-point Laplacian on a 6 x 6 x 6 grid shifted by one, symmetric and
    indefinite (its eigenvalues lie between -0.41 and 10.4). CG stops
    at the first negative curvature it meets; MINRES solves it:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> A = dmsolve.gallery.shifted_laplacian(6, comm, shift=1.0, alpha=(0, 0, 0))
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> x, info = dmsolve.cg(A, b, rtol=1e-8)
    >>> print(info.converged, info.reason)
    False ConvergedReason.INDEFINITE_MAT
    >>> x, info = dmsolve.minres(A, b, rtol=1e-8)
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 33
    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True

    The same system from the unshifted Laplacian, with ``shift``:

    >>> L = dmsolve.gallery.poisson3d(6, comm)
    >>> x, info = dmsolve.minres(L, b, rtol=1e-8, shift=1.0)
    >>> print(info.converged, info.iterations)
    True 33
    """
    s = make_system("minres", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                    reproducible=reproducible,
                    callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                    norm_type="natural" if M is not None else "unpreconditioned",
                    raise_on_failure=raise_on_failure, project_rhs=True,
                    checkpoint=checkpoint, check=lambda: check_real("shift", shift),
                    symmetric=True, check_symmetry=check)
    if s.b2norm == 0.0:
        return zero_rhs(s)
    s.shift = float(shift)
    L = Lanczos(*(s.vector() for _ in range(7)))
    ck = s.checkpoints
    state = None if ck is None else ck.resume(L.saved(s.x), shift=s.shift)
    s.begin()
    if state is not None and state.exact:
        for name in Lanczos.SCALARS:
            setattr(L, name, state.scalars[name])
        # start - 1: the Lanczos recurrence goes on with r1
        return _iterate(s, L, state.iteration, state.iteration - 1, None)
    it = 0 if state is None else state.iteration
    if state is not None:
        s.stop.norms.pop()          # re-measured below from the restored x

    s.residual(L.r1, L.y, s.shift)
    s.precondition(L.r1, L.y)
    s.red.put(0, L.r1.local, L.y.local)
    beta1 = float(s.red.reduce(1)[0].real)
    if beta1 < 0:
        s.stop.norms.append(math.sqrt(-beta1))
        return finish(s, ConvergedReason.INDEFINITE_PC, it)
    beta1 = math.sqrt(beta1)
    if s.x0_is_zero and s.stop.bnorm is None:
        s.stop.bnorm = beta1
    s.reference_norm(L.v)
    reason = s.stop.test(it, beta1)
    np.copyto(L.r2.local, L.r1.local)
    L.restart(beta1)
    return _iterate(s, L, it, it, reason)


@dataclass(slots=True)
class Lanczos:
    """MINRES's state (Paige and Saunders' names): the last two Lanczos
    vectors ``r1, r2`` (unnormalised), ``y = M r2`` (then the next vector),
    ``v = y / beta``, the directions ``w, w1, w2`` that update ``x``; the
    recurrence's ``oldb, beta``, and ``dbar, epsln, phibar, cs, sn`` of the
    last rotation (``phibar`` the residual norm). Not collective."""

    #: the scalars a checkpoint holds, in this order
    SCALARS = ("oldb", "beta", "dbar", "epsln", "phibar", "cs", "sn")

    r1: DistVector
    r2: DistVector
    y: DistVector
    v: DistVector
    w: DistVector
    w1: DistVector
    w2: DistVector
    oldb: float = 0.0
    beta: float = 0.0
    dbar: float = 0.0
    epsln: float = 0.0
    phibar: float = 0.0
    cs: float = -1.0
    sn: float = 0.0

    def restart(self, beta1: float) -> None:
        """Start the recurrence from ``r1 = r2`` with ``sqrt(r1^T M r1) = beta1``."""
        self.oldb, self.beta, self.dbar, self.epsln = 0.0, beta1, 0.0, 0.0
        self.phibar, self.cs, self.sn = beta1, -1.0, 0.0

    def saved(self, x: DistVector) -> dict[str, DistVector]:
        """What a checkpoint holds (with :meth:`scalars`)."""
        return {"x": x, "r1": self.r1, "r2": self.r2, "y": self.y, "w": self.w,
                "w2": self.w2}

    def scalars(self) -> dict[str, float]:
        """The scalars a checkpoint holds, by name."""
        return {name: getattr(self, name) for name in self.SCALARS}


def _iterate(s: System, L: Lanczos, it: int, start: int, reason):
    """MINRES from iteration ``it``; the Lanczos recurrence uses ``r1`` from
    iteration ``start + 1`` on. Collective."""
    stop, truth, ck, x = s.stop, s.truth, s.checkpoints, s.x
    while True:
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, MINRES restarts from r1 = b - (A - shift I) x
            reason = truth.confirm(reason, it, L.r1, L.y)
            if reason is not None:
                break
            reason = _restart(s, L)
            if reason is not None:
                break
            start = it
        alfa, bsq = _lanczos(s, L, it > start)
        it += 1
        if bsq < 0:
            stop.norms.append(L.phibar)
            s.callback(x)
            reason = ConvergedReason.INDEFINITE_PC
            break
        if not _rotate(s, L, alfa, math.sqrt(bsq)):
            # beta = 0 (the Krylov space is invariant) and the projected
            # tridiagonal matrix is singular: the residual phibar cannot be
            # reduced further (b has a part in the null space of A, e.g. b
            # in it). Unless phibar already meets the test, a breakdown, not a
            # happy one; x stays as it is
            reason = stop.test(it, abs(L.phibar))
            s.callback(x)
            if reason is None or not reason.converged:
                reason = ConvergedReason.BREAKDOWN
            continue
        reason = stop.test(it, abs(L.phibar))
        s.callback(x)
        if reason is None and L.beta == 0.0:
            reason = ConvergedReason.BREAKDOWN
        if reason is None and ck is not None and ck.due(it):
            ck.save(it, L.saved(x), **L.scalars())
    return finish(s, reason, it)


def _lanczos(s: System, L: Lanczos, extend: bool) -> tuple[float, float]:
    """One Lanczos step: ``v = y / beta``, ``y = (A - shift I) v - alfa r2/beta
    - beta r1/oldb`` (the last term when ``extend``), then ``y = M r2`` for the
    new ``r2``; returns ``(alfa, r2^T M r2)``. Collective: two reductions."""
    red = s.red
    np.multiply(L.y.local, 1.0 / L.beta, out=L.v.local)
    s.matvec(L.v, L.y)
    if s.shift:
        s.axpy(-s.shift, L.v.local, L.y.local)
    if extend:
        s.axpy(-L.beta / L.oldb, L.r1.local, L.y.local)
    red.put(0, L.v.local, L.y.local)
    alfa = float(red.reduce(1)[0].real)     # real for a Hermitian A
    s.axpy(-alfa / L.beta, L.r2.local, L.y.local)
    L.r1, L.r2, L.y = L.r2, L.y, L.r1       # r1 <- r2, r2 <- y, y is free
    s.precondition(L.r2, L.y)
    L.oldb = L.beta
    red.put(0, L.r2.local, L.y.local)
    return alfa, float(red.reduce(1)[0].real)


def _rotate(s: System, L: Lanczos, alfa: float, beta: float) -> bool:
    """Apply the previous rotation to the new column, then a new one to
    annihilate ``beta``, and update ``x``. False, with ``x`` unchanged, when
    the projected matrix is singular (``rho = 0``). Not collective."""
    L.beta = beta
    oldeps = L.epsln
    delta = L.cs * L.dbar + L.sn * alfa
    gbar = L.sn * L.dbar - L.cs * alfa
    L.epsln = L.sn * beta
    L.dbar = -L.cs * beta
    rho = math.hypot(gbar, beta)
    if rho == 0.0:
        return False
    gamma = max(rho, _EPS)
    L.cs, L.sn = gbar / gamma, beta / gamma
    phi = L.cs * L.phibar
    L.phibar = L.sn * L.phibar
    # w = (v - oldeps w1 - delta w2) / gamma with (w1, w2) <- (w2, w)
    L.w1, L.w2, L.w = L.w2, L.w, L.w1
    w = L.w
    np.copyto(w.local, L.v.local)
    s.axpy(-oldeps, L.w1.local, w.local)
    s.axpy(-delta, L.w2.local, w.local)
    w.local *= 1.0 / gamma
    s.axpy(phi, w.local, s.x.local)
    return True


def _restart(s: System, L: Lanczos) -> ConvergedReason | None:
    """Restart the recurrence from ``r1 = b - (A - shift I) x`` (left there
    by the truth test): None, or why to stop instead (the fresh residual
    meets the test, or ``M`` is indefinite). Collective."""
    s.precondition(L.r1, L.y)
    s.red.put(0, L.r1.local, L.y.local)
    beta1 = float(s.red.reduce(1)[0].real)
    if beta1 < 0:
        return ConvergedReason.INDEFINITE_PC
    beta1 = math.sqrt(beta1)
    reason = s.truth.retest(beta1)
    if reason is not None:
        return reason
    np.copyto(L.r2.local, L.r1.local)
    L.restart(beta1)
    return None
