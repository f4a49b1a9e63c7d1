"""The numpydoc sections every Krylov method's docstring shares (parameters,
returns, raises, the notes on errors, the truth test and complex systems)."""

from __future__ import annotations

__all__ = ["document", "COMMON_PARAMETERS", "COMMON_SECTIONS"]


COMMON_PARAMETERS = """\
    A : distributed operator, scipy sparse matrix, ndarray or LinearOperator
        ``DistCSR``, :class:`~dmsolve.DistLinearOperator` or anything with
        ``row_layout == col_layout`` and ``matvec(x, out=None)``. Or, as
        scipy takes it, the same global object on every rank: a scipy
        sparse matrix or 2-D array is distributed in block rows
        (``DistCSR.from_global(A, MPI.COMM_WORLD)``); a scipy
        ``LinearOperator`` is applied by every rank to the gathered vector,
        keeping its own rows (as :func:`dmsolve.solve` does).
    b : DistVector or ndarray
        Right-hand side on ``A.row_layout``; finite. With a global ``A``, a
        numpy array, the same on every rank: ``x`` then comes back as a
        numpy array on every rank (see Returns). A complex ``A``, ``b`` or
        ``x0`` makes the solve complex (see Notes).
    x0 : DistVector, ndarray or "Mb", optional
        Initial guess on ``A.col_layout`` (zeros by default; a numpy array
        with a global ``A``); ``"Mb"`` starts from ``M b`` (``b`` without
        ``M``), as scipy's. Never modified.
    rtol, atol : float, keyword-only
        Stopping test ``||r|| <= max(rtol*||b||, atol)`` with ``||.||`` the
        norm named by ``info.norm_type``; a convergence it claims is then
        confirmed with the true residual (see Notes). Defaults ``1e-5`` and
        ``0``.
    maxiter : int, optional
        Maximum number of iterations (default ``10 * N``).
    M : preconditioner, optional
        An approximation of ``A^{-1}``: an object with ``apply(r, out=None)``,
        an operator with ``matvec(x, out=None)``, or a callable ``M(r)``,
        each returning a DistVector. As scipy's ``M``: a scipy
        ``LinearOperator``, sparse matrix or 2-D array (the same on every
        rank; a matrix is distributed on ``A``'s rows, an operator applied
        to the gathered vector), and, with a global ``A``, a callable
        ``M(r)`` taking and returning global numpy vectors.
    callback : callable, optional
        ``callback(xk)`` after every iteration with the current iterate
        (a work vector: copy it to keep it). Called ``info.iterations`` times.
        When ``b`` was a numpy array, ``xk`` is the whole iterate as a numpy
        array on every rank, as scipy gives it (a gather per call).
    nullspace : DistVector or sequence of DistVector, optional
        A basis of the null space of ``A`` for singular consistent systems
        (e.g. the constant vector for a Neumann or graph Laplacian). It is
        orthonormalised once and tested, as PETSc's ``MatNullSpaceTest``:
        a vector ``q`` with ``||A q|| > NULLSPACE_RTOL * ||A v|| / ||v||``
        (``v`` a fixed vector of the global index; ``k + 1`` products at
        set-up) is refused with ValueError. It is removed from every
        preconditioned vector (as PETSc's ``MatNullSpaceRemove``), so the
        iterates stay in the complement of the null space. Each removal is
        one reduction. The methods that remove it from ``b`` report the
        removed part ``||b - P b|| / ||b||`` in
        ``info.extra["nullspace_removed"]``.
    monitor : KSPMonitor, True, int or callable, optional
        ``monitor(iteration, rnorm)`` at every iteration (``True`` for a
        :class:`KSPMonitor` printing on rank 0; an int ``k >= 1`` for one
        printing iterations ``0, k, 2k, ...`` and the last). Off by default.
    raise_on_failure : bool, optional
        Raise :class:`ConvergenceError` instead of returning when the solve
        does not converge.
    divtol : float or None, optional
        Stop with ``DIVTOL`` when ``||r|| >= divtol * ||r0||`` (default
        ``1e4`` as PETSc; None disables the test).
    checkpoint : dmsolve.checkpoint.Checkpointer, optional
        Write checkpoints and/or resume from one (see docs/checkpoint.md;
        :func:`dmsolve.solve` builds it from ``checkpoint=``,
        ``checkpoint_every=`` and ``resume=``). Off by default.
    reproducible : bool, optional
        True: the returned ``x``, the iteration count, the reason and the
        residual history are the same bits at any number of ranks and for
        any row partition (docs/reproducible.md). Every reduction is exact
        (an int64 superaccumulator, rounded once: still one ``Allreduce``),
        ``A``'s rows are summed in the order of their columns' canonical
        keys (:attr:`DistCSR.origin`, else the global ids), and vector
        updates avoid BLAS. ``A`` must be a float64 DistCSR and ``M`` none or
        a preconditioner built with ``reproducible=True`` (jacobi, cheby,
        amg; in double precision: ``precision="single"`` is refused); others
        raise ValueError, a complex system TypeError. Off by default."""

COMMON_RETURNS = """\
    x : DistVector or ndarray
        The approximate solution on ``A.col_layout`` (a new vector); when
        ``b`` was a numpy array, the whole solution as a numpy array on
        every rank (float64, or complex128 for a complex system), where
        scipy returns ``(x, info)`` with an int ``info``: here ``info`` stays
        a :class:`SolveInfo` (``info.converged`` is scipy's ``info == 0``).
    info : SolveInfo
        Convergence report, the same on every rank: ``converged``, ``reason``,
        ``iterations``, ``residual_norms``, ``norm_type``,
        ``true_residual_norm`` (``||b - A x||_2`` of the returned ``x``),
        timings and the number of global ``reductions``."""

COMMON_RAISES = """\
    TypeError
        A positional tolerance, or an argument of the wrong type.
    ValueError
        ``b`` or ``x0`` on the wrong layout or communicator, non-finite
        entries (agreed across ranks), bad tolerances, a preconditioner
        that is not reproducible with ``reproducible=True``.
    ConvergenceError
        With ``raise_on_failure=True``, if the solve did not converge.
    Exception
        An exception raised by ``A``, ``M``, ``callback`` or ``monitor`` on
        any rank is raised on every rank at the next reduction: the same
        type (sent pickled), its message followed by the failing ranks;
        :class:`~dmsolve.CollectiveError` if it cannot be pickled. A
        ``BaseException`` (``KeyboardInterrupt``) is re-raised unchanged on
        its rank, and raised as ``CollectiveError`` on the others. If the
        other ranks never get there (they wait in a communication of the
        user's own that the failing rank skipped), the failing rank raises
        its own exception alone after :data:`dmsolve._errors.AGREE_GRACE`
        seconds."""

COMMON_NOTES = """\
    Collective on ``A.comm``. Errors in user code on one rank only are
    folded into the next reduction as an extra slot of its buffer, and all
    ranks then raise through :func:`dmsolve.agree`. Every reduction is a
    non-blocking ``Iallreduce``; a rank that holds an error polls it for
    ``AGREE_GRACE`` seconds (3) and, if the other ranks do not arrive
    because they wait in a communication of the operator, preconditioner or
    callback that the failing rank did not make, raises its exception alone,
    with a note saying so: under ``python -m mpi4py`` that aborts the job.
    That does not happen when the communication is dmsolve's own halo
    exchange (a matrix applied inside the user's operator): the failing rank
    announces its failure on ``A.comm``'s error channel, the waiting ranks
    leave the exchange and come to the reduction, and after the agreement
    ``A.comm`` serves the next collective and solve.
    Such a rank makes no further user call before the others have finished
    the one it failed in (a non-blocking barrier precedes a user call that
    follows another with no reduction in between). User code that itself
    uses non-blocking collectives on ``A.comm`` should use a duplicate of
    it, which theirs cannot pair up with.
    ``b = 0`` returns ``x = 0`` after 0 iterations; an ``x0`` that already
    satisfies the test returns after 0 iterations. A NaN or infinite
    residual norm stops with ``NANORINF``.

    At a claimed convergence (in the method's norm: unpreconditioned,
    preconditioned, natural, or a recurrence or Arnoldi estimate of one) the
    true residual ``r = b - A x`` is computed once from ``x`` (one product
    and one reduction). In the unpreconditioned norm it must meet the test
    itself; in a preconditioned or natural norm, a different norm, it must
    meet ``||r||_2 <= TRUTH_SLACK * max(rtol*||b||_2, atol)``. If it does
    not, the method restarts from ``x`` (fresh residual, fresh recurrence;
    the iteration count and ``residual_norms`` go on), at most
    ``TRUTH_RESTARTS`` times within ``maxiter``, and then stops with
    ``FALSE_CONVERGENCE`` (not converged), as it does at once when the
    fresh residual meets the method's test without the true one doing so
    (typically a singular or inconsistent preconditioner).
    ``info.true_residual_norm`` is ``||r||_2`` of the returned ``x``,
    measured at every exit but ``NANORINF`` (one product and one reduction
    at the end of a solve that did not claim convergence).
    ``info.setup_seconds`` and ``info.solve_seconds`` leave out numba's
    compilation and import (a first run's), which
    ``info.extra["compile_seconds"]`` reports.

    Complex systems: when ``A`` (its ``dtype``), ``b`` or ``x0`` is complex,
    the solve runs in complex128, with inner products ``a^H b`` (``np.vdot``)
    and complex reductions; CG, pipelined CG and MINRES then need a
    Hermitian ``A`` and ``M`` (``check=True`` tests ``y^H A x = conj(x^H A
    y)``), GMRES, FGMRES and BiCGStab take any complex ``A``. jacobi,
    bjacobi and asm (and user preconditioners) apply; a preconditioner with
    ``supports_complex = False`` (amg, cheby, gemslr) and ``checkpoint=``
    are refused with TypeError at the door."""


# The Returns, Raises and Notes sections every method shares; the method's own
# notes follow COMMON_SECTIONS in its docstring.
COMMON_SECTIONS = """\
    Returns
    -------
%s

    Raises
    ------
%s

    Notes
    -----
%s""" % (COMMON_RETURNS, COMMON_RAISES, COMMON_NOTES)


def document(func):
    """Fill the shared numpydoc sections into ``func.__doc__``: the line
    ``COMMON_PARAMETERS`` in Parameters, and ``COMMON_SECTIONS`` (Returns,
    Raises and the first paragraph of Notes). Not collective."""
    if func.__doc__ is None:          # python -OO strips docstrings
        return func
    func.__doc__ = (func.__doc__
                    .replace("    COMMON_PARAMETERS", COMMON_PARAMETERS)
                    .replace("    COMMON_SECTIONS", COMMON_SECTIONS))
    return func
