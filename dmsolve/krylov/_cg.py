"""Preconditioned conjugate gradients for symmetric positive definite systems."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._vector import DistVector
from ._docs import document
from ._threaded import xpay
from ._info import ConvergedReason
from ._result import finish, zero_rhs
from ._stopping import DEFAULT_DIVTOL
from ._system import System, make_system

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
    The 7-point Laplacian on a 10 x 10 x 10 grid, with a right-hand side
    that is the same at any number of ranks:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import dmsolve
    >>> comm = MPI.COMM_WORLD
    >>> A = dmsolve.gallery.poisson3d(10, comm)
    >>> b = dmsolve.gallery.rhs(A, "random")
    >>> x, info = dmsolve.cg(A, b, rtol=1e-8)
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 41

    The residual, checked with scipy on the gathered matrix and vectors
    (``gather()`` gives every rank the whole vector):

    >>> As, xs, bs = A.to_scipy(), x.gather(), b.gather()
    >>> print(np.linalg.norm(bs - As @ xs) <= 1e-8 * np.linalg.norm(bs))
    True

    Algebraic multigrid as the preconditioner, built by name:

    >>> import preconditioners
    >>> x, info = dmsolve.cg(A, b, rtol=1e-8, M=preconditioners.make("amg", A))
    >>> print(info.converged, info.reason, info.iterations)
    True ConvergedReason.RTOL 8

    As scipy takes them, a scipy matrix and a numpy vector, the same on
    every rank; ``x`` comes back as a numpy array on every rank. The 1-D
    Laplacian with ``b = 1`` has the solution ``x_i = i (n + 1 - i) / 2``:

    >>> import scipy.sparse as sp
    >>> T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
    >>> x, info = dmsolve.cg(T, np.ones(50), rtol=1e-10)
    >>> print(type(x).__name__, info.converged, info.iterations)
    ndarray True 25
    >>> print(x[:3].round(3))
    [25. 49. 72.]
    """
    s = make_system("cg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                    reproducible=reproducible,
                    callback=callback, nullspace=nullspace, monitor=monitor, divtol=divtol,
                    norm_type=norm_type, raise_on_failure=raise_on_failure,
                    project_rhs=True, checkpoint=checkpoint, symmetric=True,
                    check_symmetry=check)
    if s.b2norm == 0.0:
        return zero_rhs(s)
    v = CGVectors.of(s)
    ck = s.checkpoints
    state = None if ck is None else ck.resume(v.saved())
    s.begin()
    if state is not None and state.exact:
        it, rz, reason = state.iteration, state.scalars["rz"], None
    else:
        if state is not None:
            s.stop.norms.pop()      # re-measured below from the restored x
        it = 0 if state is None else state.iteration
        rz, reason = _start(s, v, it)
    return _iterate(s, v, it, rz, reason)


@dataclass
class CGVectors:
    """CG's vectors: the iterate ``x``, the residual ``r``, ``z = M r`` (``r``
    itself without a preconditioner), the direction ``p`` and ``q = A p``;
    ``n1^H n2`` is the tested norm squared. Not collective."""

    x: DistVector
    r: DistVector
    z: DistVector
    p: DistVector
    q: DistVector
    n1: DistVector
    n2: DistVector

    @classmethod
    def of(cls, s: System) -> "CGVectors":
        """New work vectors for the solve ``s`` (its ``x`` as the iterate)."""
        r, q, p = s.vector(), s.vector(), s.vector()
        z = r if s.trivial_pc else s.vector()
        n1, n2 = {"unpreconditioned": (r, r), "preconditioned": (z, z),
                  "natural": (r, z)}[s.stop.norm_type]
        return cls(s.x, r, z, p, q, n1, n2)

    def saved(self) -> dict[str, DistVector]:
        """What a checkpoint holds (with ``r^T M r``)."""
        return {"x": self.x, "r": self.r, "p": self.p}


def _start(s: System, v: CGVectors, it: int) -> tuple[float, ConvergedReason | None]:
    """The first residual from ``x``, its test and ``p = z``; returns ``(r^T z,
    reason)``. Collective."""
    s.residual(v.r, v.q)
    rz, nsq = _precondition_and_reduce(s, v)
    if s.x0_is_zero and s.stop.bnorm is None:
        s.stop.bnorm = math.sqrt(abs(nsq))
    s.reference_norm(v.q)
    if rz < 0:
        reason = ConvergedReason.INDEFINITE_PC
        s.stop.norms.append(math.sqrt(abs(nsq)))
    else:
        reason = s.stop.test(it, math.sqrt(nsq))
    np.copyto(v.p.local, v.z.local)
    return rz, reason


def _iterate(s: System, v: CGVectors, it: int, rz: float, reason):
    """CG from iteration ``it`` to the end. Collective."""
    red, stop, truth, ck = s.red, s.stop, s.truth, s.checkpoints
    x, r, z, p, q = v.x, v.r, v.z, v.p, v.q
    while True:
        if reason is not None:
            # a claimed convergence is confirmed from x; if the true residual
            # fails, CG restarts from x with r = b - A x (which confirm left in r)
            reason = truth.confirm(reason, it, r, q)
            if reason is not None:
                break
            rz, nsq = _precondition_and_reduce(s, v)
            if rz < 0 and not math.sqrt(abs(nsq)) <= stop.tolerance():
                reason = ConvergedReason.INDEFINITE_PC
                break
            reason = truth.retest(math.sqrt(abs(nsq)))
            if reason is not None:
                break
            np.copyto(p.local, z.local)
        s.matvec(p, q)
        red.put(0, p.local, q.local)
        pq = float(red.reduce(1)[0].real)     # real for a Hermitian A
        if not pq > 0:
            reason = ConvergedReason.INDEFINITE_MAT if pq <= 0 else ConvergedReason.NANORINF
            break
        alpha = rz / pq
        rr = red.cg_update(alpha, p.local, q.local, x.local, r.local)
        rz_new, nsq = _precondition_and_reduce(s, v, rr)
        it += 1
        # a negative r^T M r is a sign of an indefinite M unless r is already
        # at rounding level (then its sign is noise and the solve converged)
        if rz_new < 0 and not math.sqrt(abs(nsq)) <= stop.tolerance():
            reason = ConvergedReason.INDEFINITE_PC
            stop.norms.append(math.sqrt(abs(nsq)))
        else:
            reason = stop.test(it, math.sqrt(abs(nsq)))
        s.callback(x)
        if reason is None and rz_new == 0:
            reason = ConvergedReason.BREAKDOWN   # r != 0 but r^T M r == 0
        if reason is not None:
            continue
        beta = rz_new / rz
        rz = rz_new
        xpay(beta, z.local, p.local)
        if ck is not None and ck.due(it):
            ck.save(it, v.saved(), rz=rz)
    return finish(s, reason, it)


def _precondition_and_reduce(s: System, v: CGVectors, rr=None) -> tuple[float, float]:
    """``z = M r``, then ``(r^T z, n1^T n2)`` in one fused reduction; ``rr``
    is ``r^T r`` when the caller has it already (from the fused update).
    Collective."""
    r, z, n1, n2 = v.r, v.z, v.n1, v.n2
    if z is not r:
        s.precondition(r, z)
    red = s.red
    # one pass over the vectors; with the exact reducer every part is exact
    # (rr too, deposited by the update): the same bits at any rank count
    red.put2(0, r.local, z.local, n1.local, n2.local, rr=rr if n1 is r and n2 is r else None)
    out = red.reduce(2)
    return float(out[0].real), float(out[1].real)     # real for a Hermitian M
