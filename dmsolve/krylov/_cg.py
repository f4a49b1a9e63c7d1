"""Preconditioned conjugate gradients for symmetric positive definite systems."""

from __future__ import annotations

import math

import numpy as np

from ._common import DEFAULT_DIVTOL, Context, document
from ._info import ConvergedReason

__all__ = ["cg"]


@document
def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       nullspace=None, monitor=None, raise_on_failure=False, divtol=DEFAULT_DIVTOL,
       norm_type="unpreconditioned", checkpoint=None, check=False,
       reproducible=False):
    """Solve ``A x = b`` by the preconditioned conjugate gradient method.

    ``A`` must be symmetric positive (semi-)definite and ``M`` symmetric
    positive definite (Hermitian for a complex system). Stops when ``||r|| <= max(rtol*||b||, atol)``, by
    default with ``r = b - A x`` and the 2-norm, as scipy's ``cg``.

    Parameters
    ----------
    COMMON_PARAMETERS
    norm_type : {"unpreconditioned", "preconditioned", "natural"}, optional
        The norm of the stopping test: ``||r||``, ``||M r||`` (PETSc's
        default for CG) or ``sqrt(r^T M r)``; ``||b||`` is measured in the
        same norm.
    check : bool, optional
        Test at set-up that ``A`` and ``M`` are symmetric, as scipy's
        ``minres(check=True)`` (see :func:`minres`): two products, two
        preconditioner applications and one reduction. Off by default.

    COMMON_SECTIONS

    Two reductions per iteration: ``p^T A p``, then ``r^T z`` fused with
    the residual norm in one ``Allreduce``. The vector updates are fused
    into single passes (:mod:`._fused_kernels`): ``x += alpha p``,
    ``r -= alpha q`` and ``r^T r`` in one, ``p = z + beta p`` in another. A non-positive ``p^T A p``
    stops with ``INDEFINITE_MAT`` and a negative ``r^T M r`` with
    ``INDEFINITE_PC``, instead of returning a wrong answer. With
    ``nullspace``, the component of ``b`` in the null space is removed
    first (``A`` is symmetric, so it is also the null space of ``A^T``).
    A preconditioner whose ``symmetric`` attribute is False (restricted
    ``asm``, ``gemslr``) is refused with ValueError.
    A checkpoint holds ``x, r, p`` and ``r^T M r`` (see
    :mod:`dmsolve.checkpoint`).

    References
    ----------
    .. [1] M. R. Hestenes and E. Stiefel, "Methods of conjugate gradients for
       solving linear systems", J. Res. Nat. Bur. Standards 49 (1952).
    .. [2] Y. Saad, *Iterative Methods for Sparse Linear Systems*, 2nd ed.,
       SIAM, 2003, Algorithm 9.1.

    Examples
    --------
    >>> x, info = cg(A, b, rtol=1e-8)          # doctest: +SKIP
    >>> info.check().iterations                # doctest: +SKIP
    """
    ctx = Context("cg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                  reproducible=reproducible,
                  callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                  norm_type=norm_type, raise_on_failure=raise_on_failure,
                  project_rhs=True, checkpoint=checkpoint, symmetric=True,
                  check_symmetry=check)
    if ctx.b2norm == 0.0:
        return ctx.zero_rhs()
    from ._fused_kernels import cg_update, dot2, xpay     # numba: on the first solve
    x = ctx.x
    r, q, p = ctx.vector(), ctx.vector(), ctx.vector()
    z = r if ctx.trivial_pc else ctx.vector()
    # the second number of the fused reduction: which norm is tested
    nvec = {"unpreconditioned": (r, r), "preconditioned": (z, z), "natural": (r, z)}
    n1, n2 = nvec[ctx.norm_type]
    ck = ctx.checkpoint
    state = None if ck is None else ck.resume(ctx, {"x": x, "r": r, "p": p})
    ctx.begin()

    if state is not None and state.exact:
        it, rz, reason = state.iteration, state.scalars["rz"], None
    else:
        it = 0 if state is None else state.iteration
        if state is not None:
            ctx.norms.pop()         # re-measured below from the restored x
        ctx.residual(r, q)
        rz, nsq = _precondition_and_reduce(ctx, dot2, r, z, n1, n2)
        if ctx.x0_is_zero and ctx.bnorm is None:
            ctx.bnorm = math.sqrt(abs(nsq))
        ctx.reference_norm(q)

        reason = ConvergedReason.INDEFINITE_PC if rz < 0 else None
        if reason is None:
            reason = ctx.test(it, math.sqrt(nsq))
        else:
            ctx.norms.append(math.sqrt(abs(nsq)))
        np.copyto(p.local, z.local)
    while True:
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, CG restarts from x with r = b - A x (which confirm left in r)
            reason = ctx.confirm(reason, it, r, q)
            if reason is not None:
                break
            rz, nsq = _precondition_and_reduce(ctx, dot2, r, z, n1, n2)
            if rz < 0 and not math.sqrt(abs(nsq)) <= ctx.tolerance():
                reason = ConvergedReason.INDEFINITE_PC
                break
            reason = ctx.retest(math.sqrt(abs(nsq)))
            if reason is not None:
                break
            np.copyto(p.local, z.local)
        ctx.matvec(p, q)
        ctx.put(0, p.local, q.local)
        pq = float(ctx.reduce(1)[0].real)     # real for a Hermitian A
        if not pq > 0:
            reason = ConvergedReason.INDEFINITE_MAT if pq <= 0 else ConvergedReason.NANORINF
            break
        alpha = rz / pq
        rr = cg_update(alpha, p.local, q.local, x.local, r.local)
        rz_new, nsq = _precondition_and_reduce(ctx, dot2, r, z, n1, n2, rr)
        it += 1
        # a negative r^T M r is a sign of an indefinite M unless r is already
        # at rounding level (then its sign is noise and the solve converged)
        if rz_new < 0 and not math.sqrt(abs(nsq)) <= ctx.tolerance():
            reason = ConvergedReason.INDEFINITE_PC
            ctx.norms.append(math.sqrt(abs(nsq)))
        else:
            reason = ctx.test(it, math.sqrt(abs(nsq)))
        ctx.callback(x)
        if reason is None and rz_new == 0:
            reason = ConvergedReason.BREAKDOWN   # r != 0 but r^T M r == 0
        if reason is not None:
            continue
        beta = rz_new / rz
        rz = rz_new
        xpay(beta, z.local, p.local)
        if ck is not None and ck.due(it):
            ck.save(ctx, it, {"x": x, "r": r, "p": p}, rz=rz)
    return ctx.finish(reason, it)


def _precondition_and_reduce(ctx, dot2, r, z, n1, n2, rr=None) -> tuple[float, float]:
    """``z = M r``, then ``(r^T z, n1^T n2)`` in one fused reduction; ``rr``
    is ``r^T r`` when the caller has it already (from the fused update);
    ``dot2`` is :func:`._fused_kernels.dot2`, imported once by the caller.
    Collective."""
    if z is not r:
        ctx.precondition(r, z)
    send = ctx.send
    if ctx.repro:
        # exact parts (rr, a lane sum, is not): the same bits at any rank count
        ctx.put(0, r.local, z.local)
        ctx.put(1, n1.local, n2.local)
    elif rr is not None and n1 is r and n2 is r:
        send[1] = rr
        send[0] = rr if z is r else ctx.dot(r.local, z.local)
    else:
        dot2(r.local, z.local, n1.local, n2.local, send)
    red = ctx.reduce(2)
    return float(red[0].real), float(red[1].real)     # real for a Hermitian M
