"""``dmsolve.solve(..., backend="petsc")``: PETSc's KSP and PC under our names and
options, behind the same input checks as our methods (:func:`dmsolve.krylov.check_system`)."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .._matrix import DistCSR
from .._registry import Registry
from .._vector import DistVector
from ..krylov import (CheckedSystem, ConvergedReason, SolveInfo, check_gmres_options,
                      check_system)
from ..validate import agreed, check_int, check_real
from ._convert import operator_to_petsc, petsc, vec_to_petsc
from ._pc import PythonPC

__all__ = ["ksp_solve", "KSP_TYPES", "PC_TYPES", "convert_reason"]

#: Our method names -> PETSc KSPType.
KSP_TYPES = Registry("Krylov method (backend='petsc')")
for _ours, _theirs in (("cg", "cg"), ("pipecg", "pipecg"), ("gmres", "gmres"),
                       ("fgmres", "fgmres"), ("bicgstab", "bcgs"), ("minres", "minres")):
    KSP_TYPES.register(_ours, _theirs)
del _ours, _theirs

#: Our preconditioner names -> PETSc PCType.
PC_TYPES = Registry("preconditioner (backend='petsc')")
# Our preconditioner options -> PETSc options database entries (prefixed per
# solve), by the same names as PC_TYPES: ``mapper(**options) -> dict``.
_PC_OPTIONS = Registry("preconditioner (backend='petsc')")


def _pc(name: str, pc_type: str):
    """Register our preconditioner ``name`` as PETSc's ``pc_type`` with the
    decorated option mapper."""
    def add(mapper):
        PC_TYPES.register(name, pc_type)
        _PC_OPTIONS.register(name, mapper)
        return mapper
    return add


# (side, default norm, allowed norms) as our methods define them, so the stopping
# test means the same thing under both backends.
_METHOD_NORMS = {
    "cg": ("left", "unpreconditioned", ("unpreconditioned", "preconditioned", "natural")),
    "pipecg": ("left", "unpreconditioned", ("unpreconditioned", "preconditioned", "natural")),
    "gmres": (None, None, ()),          # left: preconditioned, right: unpreconditioned
    "fgmres": ("right", "unpreconditioned", ("unpreconditioned",)),
    "bicgstab": ("right", "unpreconditioned", ("unpreconditioned",)),
    "minres": ("left", None, ()),       # natural with a PC, else unpreconditioned
}
_SUB = {"ilu0": {"sub_pc_type": "ilu", "sub_pc_factor_levels": "0"},
        "lu": {"sub_pc_type": "lu"}}


def _sub_options(who, sub, sub_options):
    if sub not in _SUB:
        raise ValueError("%s: sub=%r has no PETSc equivalent here; use one of %s"
                         % (who, sub, sorted(_SUB)))
    if sub_options:
        raise TypeError("%s: sub_options %s have no PETSc mapping; use petsc_options="
                        % (who, sorted(sub_options)))
    return dict(_SUB[sub])


@_pc("jacobi", "jacobi")
def _opts_jacobi(**kw):
    if kw:
        raise TypeError("jacobi: options %s have no PETSc mapping (PCJACOBI takes none "
                        "here); use petsc_options=" % sorted(kw))
    return {}


@_pc("none", "none")
def _opts_none(**kw):
    if kw:
        raise TypeError("none: takes no options, got %s" % sorted(kw))
    return {}


@_pc("bjacobi", "bjacobi")
def _opts_bjacobi(sub="ilu0", sub_options=None):
    return _sub_options("bjacobi", sub, sub_options)


@_pc("asm", "asm")
def _opts_asm(overlap=1, sub="ilu0", sub_options=None, restricted=True):
    overlap = check_int("asm: overlap", overlap, low=0)
    o = _sub_options("asm", sub, sub_options)
    o.update({"pc_asm_overlap": str(overlap),
              "pc_asm_type": "restrict" if restricted else "basic"})
    return o


@_pc("amg", "gamg")
def _opts_amg(theta=None, max_levels=None, max_coarse=None):
    o = {}
    theta = check_real("amg: theta", theta, low=0.0, high=1.0, allow_none=True)
    max_levels = check_int("amg: max_levels", max_levels, low=1, allow_none=True)
    max_coarse = check_int("amg: max_coarse", max_coarse, low=1, allow_none=True)
    if theta is not None:
        o["pc_gamg_threshold"] = repr(theta)
    if max_levels is not None:
        o["pc_mg_levels"] = str(max_levels)
    if max_coarse is not None:
        o["pc_gamg_coarse_eq_limit"] = str(max_coarse)
    return o


_ORTHOG = {"cgs": {}, "cgs2": {"ksp_gmres_cgs_refinement_type": "refine_ifneeded"},
           "mgs": {"ksp_gmres_modifiedgramschmidt": None}}

# PETSc's KSPConvergedReason names -> ours. Names PETSc has and we lack keep their
# spelling in info.extra["petsc_reason"]; see convert_reason.
_REASONS = {
    "CONVERGED_RTOL": ConvergedReason.RTOL, "CONVERGED_RTOL_NORMAL": ConvergedReason.RTOL,
    "CONVERGED_ATOL": ConvergedReason.ATOL, "CONVERGED_ATOL_NORMAL": ConvergedReason.ATOL,
    "CONVERGED_HAPPY_BREAKDOWN": ConvergedReason.HAPPY_BREAKDOWN,
    "CONVERGED_RTOL_NORMAL_EQUATIONS": ConvergedReason.RTOL,
    "CONVERGED_ATOL_NORMAL_EQUATIONS": ConvergedReason.ATOL,
    "DIVERGED_MAX_IT": ConvergedReason.MAXITER,          # PETSc >= 3.24
    "DIVERGED_ITS": ConvergedReason.MAXITER, "DIVERGED_DTOL": ConvergedReason.DIVTOL,
    "DIVERGED_BREAKDOWN": ConvergedReason.BREAKDOWN,
    "DIVERGED_BREAKDOWN_BICG": ConvergedReason.BREAKDOWN,
    "DIVERGED_INDEFINITE_PC": ConvergedReason.INDEFINITE_PC,
    "DIVERGED_INDEFINITE_MAT": ConvergedReason.INDEFINITE_MAT,
    "DIVERGED_NANORINF": ConvergedReason.NANORINF,
}


def convert_reason(code: int) -> tuple[ConvergedReason, str]:
    """PETSc's ``KSPConvergedReason`` code -> ``(our ConvergedReason, PETSc's name)``.

    A converged reason we have no member for (``CONVERGED_ITS``, ...) maps to
    ``RTOL`` and a diverged one (``DIVERGED_PCSETUP_FAILED``,
    ``DIVERGED_NULL``, ...) to ``BREAKDOWN``; the returned name is always
    PETSc's exact one (e.g. ``DIVERGED_MAX_IT``, called ``DIVERGED_ITS``
    before PETSc 3.24, for our ``MAXITER``).
    Not collective.
    """
    PETSc = petsc()
    names = {getattr(PETSc.KSP.ConvergedReason, n): n
             for n in dir(PETSc.KSP.ConvergedReason)
             if n.startswith(("CONVERGED_", "DIVERGED_"))}
    name = names.get(int(code), "KSP_REASON_%d" % int(code))
    ours = _REASONS.get(name)
    if ours is None:
        ours = ConvergedReason.RTOL if int(code) > 0 else ConvergedReason.BREAKDOWN
    return ours, name


_PREFIX = itertools.count()

_NORM_NAMES = {"unpreconditioned": "UNPRECONDITIONED", "preconditioned": "PRECONDITIONED",
               "natural": "NATURAL"}


@dataclass
class _Plan:
    """What :func:`ksp_solve` sets up, once every check has passed. Not collective."""

    method: str                     # our name
    ksp_type: str
    pc_type: str                    # PETSc's, "python" for a dmsolve object
    pc_name: str                    # ours, for info.extra
    pc_object: Any = None           # the dmsolve preconditioner run as PC python
    options: dict = field(default_factory=dict)     # options database entries
    restart: int | None = None
    side: str | None = None
    norm: str = "unpreconditioned"
    system: CheckedSystem | None = None

    @property
    def has_pc(self) -> bool:
        return self.pc_type != "none"


def _plan(method, pc, A, b, x0, *, rtol, atol, divtol, maxiter, restart, side, orthog,
          norm_type, shift, nullspace, callback, monitor, petsc_options) -> _Plan:
    """The option mapping and its checks, then the Krylov door our own methods
    use (:func:`~dmsolve.krylov.check_system`, whose finiteness test, the only
    rank-dependent one, comes last). Not collective."""
    m = KSP_TYPES.canonical(method)
    if shift:
        raise TypeError("minres shift has no PETSc KSPMINRES equivalent; shift the matrix")
    plan = _pc_plan(m, pc, A)
    _gmres_plan(plan, restart, orthog, side)
    _norm_plan(plan, side, norm_type)
    plan.options.update(_database_entries(petsc_options))
    s = check_system(m, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, divtol=divtol,
                     callback=callback, monitor=monitor, nullspace=nullspace)
    if "c" in (np.dtype(getattr(s.A, "dtype", np.float64)).kind, b.dtype.kind,
               "f" if x0 is None else x0.dtype.kind):
        raise TypeError("%s: backend='petsc' runs a real PETSc build (make petsc); this "
                        "system is complex: use backend='dmsolve'" % m)
    plan.system = s
    return plan


def _pc_plan(m: str, pc, A) -> _Plan:
    """The preconditioner: a name (PETSc's own PC, our options mapped to its
    database entries) or an object (our PC as PC python). Not collective."""
    plan = _Plan(method=m, ksp_type=KSP_TYPES[m], pc_type="none", pc_name="none")
    if pc is None or isinstance(pc, (str, tuple, list)):
        try:
            key, mapper, opts = _PC_OPTIONS.resolve("none" if pc is None else pc)
        except ValueError as e:
            raise ValueError("%s (or pass a built dmsolve preconditioner object to run it "
                             "inside KSP as PC python)" % e) from None
        plan.options.update(mapper(**opts))
        plan.pc_type, plan.pc_name = PC_TYPES[key], key
    else:
        if not callable(getattr(pc, "apply", None)):
            raise TypeError("pc must be a name, a (name, options) pair or a preconditioner "
                            "with apply(r, out), got %s" % type(pc).__name__)
        plan.pc_object, plan.pc_type = pc, "python"
        plan.pc_name = getattr(pc, "name", type(pc).__name__)
    if not isinstance(A, DistCSR) and plan.pc_type not in ("none", "python"):
        raise TypeError("PETSc's %s needs the matrix entries: give A as a DistCSR, or "
                        "a dmsolve preconditioner object" % plan.pc_type)
    return plan


def _gmres_plan(plan: _Plan, restart, orthog, side) -> None:
    """``restart``, ``orthog`` and ``side`` as our gmres and fgmres check them;
    refused for the other methods. Not collective."""
    m = plan.method
    if m in ("gmres", "fgmres"):
        restart = 30 if restart is None else restart
        orthog = "cgs" if orthog is None else orthog
        if m == "gmres":
            side = "left" if side is None else side
        check_gmres_options(restart, orthog, side if m == "gmres" else "right")
        plan.restart = int(restart)
        plan.options.update(_ORTHOG[orthog])
    else:
        if restart is not None:
            raise TypeError("restart= is an option of gmres and fgmres, not of %s" % m)
        if orthog is not None:
            raise TypeError("orthog= is an option of gmres and fgmres, not of %s" % m)


def _norm_plan(plan: _Plan, side, norm_type) -> None:
    """The side and the tested norm, as our method of the same name defines
    them. Not collective."""
    m = plan.method
    dside, dnorm, allowed = _METHOD_NORMS[m]
    if m == "gmres":
        side = "left" if side is None else side
        dnorm = "preconditioned" if side == "left" and plan.has_pc else "unpreconditioned"
        if norm_type is not None and norm_type != dnorm:
            raise ValueError("gmres with side=%r tests the %s norm; norm_type=%r is not "
                             "available" % (side, dnorm, norm_type))
        plan.side, plan.norm = side, dnorm
        return
    if side is not None:
        raise TypeError("side= is an option of gmres only, not of %s" % m)
    if m == "minres":
        dnorm = "natural" if plan.has_pc else "unpreconditioned"
        allowed = (dnorm,)
    norm = dnorm if norm_type is None else norm_type
    if norm not in allowed:
        raise ValueError("%s: norm_type must be one of %s, got %r"
                         % (m, ", ".join(allowed), norm_type))
    if not plan.has_pc:
        norm = "unpreconditioned"     # all coincide without a preconditioner
    plan.side, plan.norm = dside, norm


def _database_entries(petsc_options) -> dict:
    """``petsc_options`` as options database entries (no leading dash, values
    as strings or None). Not collective."""
    if petsc_options is None:
        return {}
    if not isinstance(petsc_options, dict) or not all(isinstance(k, str)
                                                      for k in petsc_options):
        raise TypeError("petsc_options must be a dict of option names (without the "
                        "leading '-') to values")
    return {k.lstrip("-"): (None if v is None else str(v)) for k, v in petsc_options.items()}


def _orthonormal(vecs: list[DistVector]) -> list[DistVector]:
    """Modified Gram-Schmidt on DistVectors (collective), as PETSc's MatNullSpace wants."""
    out = []
    for v in vecs:
        w = DistVector(v.layout, v.local.astype(np.float64))
        for q in out:
            w.axpy(-q.dot(w), q)
        nrm = w.norm()
        if nrm == 0.0:
            raise ValueError("nullspace vectors are linearly dependent")
        out.append(w.scale(1.0 / nrm))
    return out


def ksp_solve(A, b, method: str = "cg", pc=None, *, x0=None, rtol=1e-5, atol=0.0,
              maxiter=None, restart=None, side=None, orthog=None, norm_type=None,
              divtol=1e4, shift=0.0, nullspace=None, callback=None, monitor=None,
              raise_on_failure=False, petsc_options=None):
    """Solve ``A x = b`` with PETSc's KSP under dmsolve's names (``backend="petsc"``).

    The same call as :func:`dmsolve.solve`, run by PETSc: ``method`` is mapped
    to a ``KSPType`` (:data:`KSP_TYPES`: cg, pipecg, gmres, fgmres,
    bicgstab -> bcgs, minres), ``pc`` by name to a ``PCType``
    (:data:`PC_TYPES`: none, jacobi, bjacobi, asm, amg -> gamg) with our
    options translated (``asm``: ``overlap``, ``sub`` in {ilu0, lu},
    ``restricted``; ``bjacobi``: ``sub``; ``amg``: ``theta`` ->
    ``pc_gamg_threshold``, ``max_levels``, ``max_coarse`` ->
    ``pc_gamg_coarse_eq_limit``), while a built dmsolve preconditioner object
    runs inside KSP as a ``PC`` of type ``python`` (:class:`PythonPC`).

    The stopping test is ours, ``||r|| <= max(rtol*||b||, atol)``, with the
    side and norm our method of the same name uses (cg, pipecg:
    unpreconditioned by default, ``norm_type`` selectable; gmres: left and
    preconditioned, or ``side="right"`` and unpreconditioned; fgmres,
    bicgstab: right, unpreconditioned; minres: natural with a
    preconditioner). PETSc's default test with a zero initial guess is the
    same inequality (strict).

    Parameters
    ----------
    A : DistCSR or distributed operator
        A DistCSR is copied into an AIJ matrix (:func:`to_petsc`); any other
        operator with ``matvec`` becomes a PETSc ``python`` shell matrix
        (then ``pc`` must be ``"none"`` or a dmsolve object).
    b : DistVector
    method, pc
        As in :func:`dmsolve.solve`.
    x0, rtol, atol, maxiter, restart, side, orthog, norm_type, divtol, \
nullspace, callback, monitor, raise_on_failure
        As for our methods (defaults too: ``maxiter`` ``10*N``, ``restart``
        30, ``orthog`` ``"cgs"``, ``divtol`` 1e4). ``callback(xk)`` gets the
        iterate from ``KSPBuildSolution``; ``monitor(it, rnorm)`` (or
        ``True`` for a :class:`~dmsolve.KSPMonitor`) gets every norm.
    petsc_options : dict, optional
        Extra PETSc options database entries for this solve only, without
        the leading dash (``{"pc_gamg_agg_nsmooths": 1, "ksp_view": None}``);
        they are given a private prefix and removed afterwards.

    Returns
    -------
    x : DistVector
    info : SolveInfo
        ``reason`` mapped from ``KSPConvergedReason`` (:func:`convert_reason`;
        PETSc's exact name in ``info.extra["petsc_reason"]``),
        ``residual_norms`` PETSc's residual history, ``setup_seconds`` the
        conversion plus ``KSPSetUp`` (preconditioner set-up),
        ``solve_seconds`` ``KSPSolve``. ``reductions`` is not counted
        (0). ``info.extra`` also holds ``ksp_type``, ``pc_type``.

    Raises
    ------
    ValueError
        Unknown method or preconditioner name, bad tolerance or option value,
        or a layout mismatch: on every rank.
    TypeError
        An option that has no PETSc mapping for this method or preconditioner,
        or an argument of the wrong type: on every rank.
    ImportError
        petsc4py is not installed (``make petsc``).
    ConvergenceError
        With ``raise_on_failure=True``, if PETSc did not converge.

    Notes
    -----
    Collective on ``A.comm``.
    """
    PETSc = petsc()
    t0 = time.perf_counter()
    comm = getattr(getattr(A, "row_layout", None), "comm", None)
    if comm is None:
        comm = getattr(getattr(b, "layout", None), "comm", None)
    if comm is None:
        raise TypeError("A must be a distributed operator and b a DistVector, got %s and %s"
                        % (type(A).__name__, type(b).__name__))
    with agreed(comm):
        plan = _plan(method, pc, A, b, x0, rtol=rtol, atol=atol, divtol=divtol,
                     maxiter=maxiter, restart=restart, side=side, orthog=orthog,
                     norm_type=norm_type, shift=shift, nullspace=nullspace,
                     callback=callback, monitor=monitor, petsc_options=petsc_options)

    s = plan.system
    layout = s.A.row_layout
    mat = operator_to_petsc(s.A)
    bl = np.ascontiguousarray(b.local, dtype=PETSc.ScalarType)
    xl = np.zeros(layout.local_size, dtype=PETSc.ScalarType)
    if x0 is not None:
        np.copyto(xl, x0.local)
    size = (layout.local_size, layout.global_size)
    bv = PETSc.Vec().createWithArray(bl, size=size, comm=comm)
    xv = PETSc.Vec().createWithArray(xl, size=size, comm=comm)
    x = DistVector(layout, xl)

    prefix = "dmsolve%d_" % next(_PREFIX)
    db = PETSc.Options(prefix)
    ksp = PETSc.KSP().create(comm=comm)
    ns = None
    try:
        ksp.setOptionsPrefix(prefix)
        ksp.setOperators(mat)
        pyctx = _configure(ksp, plan, nonzero_guess=x0 is not None)
        if s.nullspace is not None:
            qs = _orthonormal(s.nullspace)
            ns = PETSc.NullSpace().create(vectors=[vec_to_petsc(q) for q in qs], comm=comm)
            mat.setNullSpace(ns)
        for k, v in plan.options.items():
            db[k] = v
        ksp.setFromOptions()
        ksp.setConvergenceHistory(length=min(s.maxiter, 100_000) + 1)
        if s.monitor is not None and hasattr(s.monitor, "start"):
            s.monitor.start(plan.method, comm)
        if s.callback is not None or s.monitor is not None:
            ksp.setMonitor(_monitor(s.monitor, s.callback, layout))
        ksp.setUp()
        t1 = time.perf_counter()
        ksp.solve(bv, xv)
        t2 = time.perf_counter()
        info = _info(ksp, plan, bv, x0 is None, comm)
        info.setup_seconds, info.solve_seconds = t1 - t0, t2 - t1
        if pyctx is not None and hasattr(pyctx.M, "describe"):
            info.extra["pc_describe"] = pyctx.M.describe()
        if s.monitor is not None and hasattr(s.monitor, "finish"):
            s.monitor.finish(info)
    finally:
        for k in plan.options:
            db.delValue(k)
        ksp.destroy()
        if ns is not None:
            ns.destroy()
        mat.destroy()
        bv.destroy()
        xv.destroy()
    if raise_on_failure:
        info.check()
    return x, info


def _configure(ksp, plan: _Plan, nonzero_guess: bool):
    """Type, tolerances, restart, PC, side and norm of ``ksp`` from the plan;
    returns the :class:`PythonPC` context of a dmsolve preconditioner, or
    None. Collective on the KSP's communicator."""
    PETSc = petsc()
    s = plan.system
    ksp.setType(plan.ksp_type)
    ksp.setTolerances(rtol=s.rtol, atol=s.atol,
                      divtol=1e300 if s.divtol is None else s.divtol, max_it=s.maxiter)
    if plan.restart is not None:
        ksp.setGMRESRestart(plan.restart)
    kpc = ksp.getPC()
    pyctx = None
    if plan.pc_type == "python":
        kpc.setType(PETSc.PC.Type.PYTHON)
        pyctx = PythonPC(plan.pc_object)
        kpc.setPythonContext(pyctx)
    else:
        kpc.setType(plan.pc_type)
    if plan.side is not None:
        ksp.setPCSide(PETSc.PC.Side.LEFT if plan.side == "left" else PETSc.PC.Side.RIGHT)
    if plan.has_pc:
        # without a PC every norm is the unpreconditioned one: keep the method's default
        ksp.setNormType(getattr(PETSc.KSP.NormType, _NORM_NAMES[plan.norm]))
    if nonzero_guess:
        ksp.setInitialGuessNonzero(True)
    return pyctx


def _monitor(mon: Callable | None, callback: Callable | None, layout) -> Callable:
    """A KSP monitor calling ``mon(it, rnorm)`` and ``callback(xk)`` (from
    ``KSPBuildSolution``, after iteration 0). Collective when called."""
    def monitor(ksp_, it, rnorm):
        if mon is not None:
            mon(it, rnorm)
        if callback is not None and it > 0:
            sol = ksp_.buildSolution()
            callback(DistVector(layout, sol.getArray(readonly=True)))
    return monitor


def _info(ksp, plan: _Plan, bv, x0_zero: bool, comm) -> SolveInfo:
    """The :class:`SolveInfo` of a finished KSP solve (timings left at 0).
    Collective (the reference norm may apply the PC)."""
    s = plan.system
    reason, pname = convert_reason(ksp.getConvergedReason())
    hist = np.array(ksp.getConvergenceHistory(), dtype=float)
    bnorm = _reference_norm(ksp, bv, hist, plan.norm, x0_zero, comm)
    return SolveInfo(
        converged=reason.converged, reason=reason, iterations=int(ksp.getIterationNumber()),
        residual_norms=hist, norm_type=plan.norm, method=plan.method, rtol=s.rtol,
        atol=s.atol, bnorm=bnorm, reductions=0,
        extra={"backend": "petsc", "petsc_reason": pname, "ksp_type": ksp.getType(),
               "pc_type": ksp.getPC().getType(), "pc": plan.pc_name})


def _reference_norm(ksp, bv, hist, norm, x0_zero, comm) -> float:
    """``||b||`` in the tested norm, as PETSc's KSPConvergedDefault measures it."""
    if x0_zero and hist.size:
        return float(hist[0])
    if norm == "unpreconditioned":
        return float(bv.norm())
    z = bv.duplicate()
    ksp.getPC().apply(bv, z)
    val = float(z.norm()) if norm == "preconditioned" else math.sqrt(abs(float(bv.dot(z))))
    z.destroy()
    return val
