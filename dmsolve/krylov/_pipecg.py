"""Pipelined conjugate gradients: one non-blocking reduction per iteration,
overlapped with the preconditioner and the matrix-vector product."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._vector import DistVector
from ._docs import document
from ._threaded import pipecg_dots, pipecg_update
from ._info import ConvergedReason
from ._result import finish, zero_rhs
from ._stopping import DEFAULT_DIVTOL
from ._system import System, make_system

__all__ = ["pipecg"]


@document
def pipecg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
           nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
           norm_type="unpreconditioned", checkpoint=None, check=False,
           reproducible=False):
    """Solve ``A x = b`` by pipelined preconditioned conjugate gradients.

    Mathematically CG (``A`` symmetric positive (semi-)definite, ``M``
    symmetric positive definite; Hermitian for a complex system), rearranged so that each iteration's three
    inner products ``(r, u)``, ``(w, u)`` and the residual norm travel in
    one ``Iallreduce`` that runs while the preconditioner and the
    matrix-vector product of the same iteration are computed. Stops when
    ``||r|| <= max(rtol*||b||, atol)``.

    Parameters
    ----------
    COMMON_PARAMETERS
    norm_type : {"unpreconditioned", "preconditioned", "natural"}, optional
        As in :func:`cg`: ``||r||``, ``||M r||`` or ``sqrt(r^T M r)``.
    check : bool, optional
        As in :func:`cg`: test at set-up that ``A`` and ``M`` are symmetric.

    COMMON_SECTIONS

    Exactly one global reduction per iteration without ``nullspace`` (each
    null-space removal adds one blocking reduction). The residual is
    updated by recurrences, so at tight tolerances the true residual can lag
    the monitored one more than in :func:`cg` (the confirmation from ``x``
    at a claimed convergence then restarts the recurrences), and iteration
    counts may differ from CG's by one or two, more near the attainable
    accuracy (measured: 256 against CG's 248 on poisson2d n=64 at rtol
    1e-12; 330-355 against 281 on anisotropic2d n=40). When the
    recurrence's ``p^T A p`` turns non-positive, ``p^T A p`` is measured
    directly (one product, one reduction): a non-positive value stops with
    ``INDEFINITE_MAT``; a positive one means the recurrences lost accuracy
    on an SPD problem, and the residual is replaced: the recurrences restart
    from ``r = b - A x`` (two products and one preconditioner application;
    ``info.extra["residual_replacements"]`` counts them). The test of
    iteration ``k`` is made with the norm that arrives with its reduction,
    so the last preconditioner application and product are wasted (as in
    PETSc's ``KSPPIPECG``). The eight vector updates of an iteration and the
    next iteration's three inner products are one pass over the vectors
    (:func:`._fused_kernels.pipecg_update`), not eleven.

    References
    ----------
    .. [1] P. Ghysels and W. Vanroose, "Hiding global synchronization latency
       in the preconditioned conjugate gradient algorithm", Parallel
       Computing 40(7):224-238, 2014, Algorithm 3 (preconditioned).
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003.
    .. [3] S. Cools, E. F. Yetkin, E. Agullo, L. Giraud and W. Vanroose,
       "Analyzing the effect of local rounding error propagation on the
       maximal attainable accuracy of the pipelined conjugate gradient
       method", SIAM J. Matrix Anal. Appl. 39(1):426-450, 2018 (residual
       replacement).

    Examples
    --------
    A random sparse SPD matrix (the same at any number of ranks) with a
    Jacobi preconditioner: the iterations of CG, in one reduction each
    (plus those of the set-up and the final check) where CG needs two:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> import preconditioners
    >>> A = dmsolve.gallery.random_spd(100, comm, density=0.05)
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> M = preconditioners.make("jacobi", A)
    >>> x, info = dmsolve.pipecg(A, b, rtol=1e-8, M=M)
    >>> print(info.converged, info.reason, info.iterations, info.reductions)
    True ConvergedReason.RTOL 16 21
    >>> x_cg, info_cg = dmsolve.cg(A, b, rtol=1e-8, M=M)
    >>> print(info_cg.iterations, info_cg.reductions)
    16 37
    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True
    """
    s = make_system("pipecg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                    reproducible=reproducible,
                    callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                    norm_type=norm_type, raise_on_failure=raise_on_failure,
                    project_rhs=True, checkpoint=checkpoint, symmetric=True,
                    check_symmetry=check)
    if s.b2norm == 0.0:
        return zero_rhs(s)
    v = PipeVectors.of(s)
    ck = s.checkpoints
    state = None if ck is None else ck.resume(v.saved())
    s.begin()
    if state is not None and state.exact:
        # the recurrences go on where they were: start 0 (< it), so beta is
        # gamma / gamma_old
        sc = state.scalars
        return _iterate(s, v, state.iteration, 0, sc["gamma"], sc["alpha"])
    it = 0 if state is None else state.iteration
    s.residual(v.r, v.n)
    s.precondition(v.r, v.u)
    s.matvec(v.u, v.w)
    if not s.x0_is_zero:
        s.reference_norm(v.m)
    return _iterate(s, v, it, it, 1.0, 1.0)


@dataclass
class PipeVectors:
    """Pipelined CG's vectors (Ghysels and Vanroose's names): ``u = M r``,
    ``w = A u``, ``m = M w``, ``n = A m``, and the recurrences' ``z, q, s,
    p``; the reduction in flight has its own buffers ``send`` and ``recv``;
    ``norm_code`` says which inner product is the tested norm: ``(r, r)``,
    ``(u, u)`` or ``(r, u)``. Not collective."""

    x: DistVector
    r: DistVector
    u: DistVector
    w: DistVector
    m: DistVector
    n: DistVector
    z: DistVector
    q: DistVector
    s: DistVector
    p: DistVector
    send: np.ndarray
    recv: np.ndarray
    norm_code: int

    @classmethod
    def of(cls, s: System) -> "PipeVectors":
        """New work vectors and buffers for the solve ``s`` (its ``x`` as the iterate)."""
        work = [s.vector() for _ in range(9)]
        code = ("unpreconditioned", "preconditioned", "natural").index(s.stop.norm_type)
        return cls(s.x, *work, s.red.buffer(4), s.red.buffer(4), code)

    def saved(self) -> dict[str, DistVector]:
        """What a checkpoint holds (with ``gamma`` and ``alpha``)."""
        return {"x": self.x, "r": self.r, "u": self.u, "w": self.w, "z": self.z,
                "q": self.q, "s": self.s, "p": self.p}


def _iterate(s: System, v: PipeVectors, it: int, start: int, gamma_old: float,
             alpha_old: float):
    """Pipelined CG from iteration ``it``, the recurrences having started at
    iteration ``start``. Collective."""
    stop, truth, ck = s.stop, s.truth, s.checkpoints
    # the norm of the next reduction is that of a residual recomputed from x
    # (a restart at an iteration already recorded): retested, not recorded
    fresh = False
    replacements = 0
    have_dots = False           # the update pass left the next inner products in send
    while True:
        gamma, delta, nsq = _reduce_overlapped(s, v, it, have_dots)
        have_dots = False
        if it == 0 and stop.bnorm is None:
            stop.bnorm = math.sqrt(abs(nsq))
        # as in cg: the sign of a rounding-level (r, u) is noise, not indefiniteness
        if gamma < 0 and not (stop.bnorm is not None
                              and math.sqrt(abs(nsq)) <= stop.tolerance()):
            reason = ConvergedReason.INDEFINITE_PC
            if not fresh:
                stop.norms.append(math.sqrt(abs(nsq)))
        elif fresh:
            reason = truth.retest(math.sqrt(abs(nsq)))
        else:
            reason = stop.test(it, math.sqrt(abs(nsq)))
        if it > 0 and not fresh:
            s.callback(v.x)
        fresh = False
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, the recurrence restarts from r = b - A x (left in r)
            reason = truth.confirm(reason, it, v.r, v.n)
            if reason is not None:
                break
            _restart(s, v)
            start, fresh = it, True
            continue
        if it > start:
            beta = gamma / gamma_old
            pap = delta - beta * gamma / alpha_old    # = p^T A p
        else:
            beta = 0.0
            pap = delta
        if not pap > 0:
            if not pap <= 0:
                reason = ConvergedReason.NANORINF
                break
            if it == start:
                # delta = u^T A u of a u computed from x: A is not positive definite
                reason = ConvergedReason.INDEFINITE_MAT
                break
            reason = _replace_residual(s, v, beta)
            if reason is not None:
                break
            replacements += 1
            start, fresh = it, True
            continue
        if gamma == 0:
            reason = ConvergedReason.BREAKDOWN
            break
        alpha = gamma / pap
        # z = n + beta z, q = m + beta q, s = w + beta s, p = u + beta p;
        # x += alpha p, r -= alpha s, u -= alpha q, w -= alpha z; and the
        # next reduction's (r, u), (u, w) and the norm's, all in one pass
        pipecg_update(alpha, beta, v.norm_code, (v.n.local, v.m.local, v.w.local, v.u.local,
                      v.z.local, v.q.local, v.s.local, v.p.local, v.x.local, v.r.local), v.send)
        have_dots = True
        gamma_old, alpha_old = gamma, alpha
        it += 1
        if ck is not None and ck.due(it):
            ck.save(it, v.saved(), gamma=gamma_old, alpha=alpha_old)
    return finish(s, reason, it, residual_replacements=replacements)


def _reduce_overlapped(s: System, v: PipeVectors, it: int,
                       have_dots: bool) -> tuple[float, float, float]:
    """``(r, u)``, ``(w, u)`` and the tested norm squared in one
    ``Iallreduce``, overlapped with ``m = M w`` and ``n = A m``. Collective."""
    red = s.red
    send, recv = v.send, v.recv
    if red.exact:
        # exact parts of (r, u), (w, u) and the norm's: the fused pass's
        # lane sums are not partition-independent
        red.put(0, v.r.local, v.u.local, send)
        red.put(1, v.w.local, v.u.local, send)
        a, c = ((v.r, v.r), (v.u, v.u), (v.r, v.u))[v.norm_code]
        red.put(2, a.local, c.local, send)
    elif not have_dots:
        # summed as the fused pass sums them: a resumed run is the same run
        pipecg_dots(v.norm_code, v.w.local, v.u.local, v.r.local, send)
    req = red.ireduce(3, send, recv)
    if it < s.stop.maxiter:
        s.precondition(v.w, v.m)      # m = M w and n = A m, overlapped
        s.matvec(v.m, v.n)
    red.wait(req, 3, recv)
    # real for a Hermitian A and M
    return float(recv[0].real), float(recv[1].real), float(recv[2].real)


def _replace_residual(s: System, v: PipeVectors, beta: float) -> ConvergedReason | None:
    """The recurrence's ``p^T A p`` turned non-positive: measure it directly.

    On an SPD problem a non-positive value is the pipelined recurrences
    losing accuracy (their rounding errors are amplified, Cools et al.
    2018); only a non-positive measured value proves ``A`` indefinite
    (returned as the reason). Otherwise the residual is replaced: the
    recurrences restart from ``r = b - A x`` and None is returned (``m``
    and ``n`` are recomputed by the next pass, so they serve as work
    vectors). Collective.
    """
    red, m, n = s.red, v.m, v.n
    np.copyto(m.local, v.u.local)
    s.axpy(beta, v.p.local, m.local)
    s.matvec(m, n)
    red.put(0, m.local, n.local)
    red.put(1, m.local, m.local)
    out = red.reduce(2).real
    if not out[0] > 0:
        return (ConvergedReason.INDEFINITE_MAT if out[1] > 0 and out[0] <= 0
                else ConvergedReason.BREAKDOWN if out[0] == 0
                else ConvergedReason.NANORINF)
    s.matvec(s.x, n)
    np.subtract(s.b.local, n.local, out=v.r.local)
    _restart(s, v)
    return None


def _restart(s: System, v: PipeVectors) -> None:
    """``u = M r``, ``w = A u`` for a residual ``r`` recomputed from ``x``: the
    recurrences start again there. Collective."""
    s.precondition(v.r, v.u)
    s.matvec(v.u, v.w)
