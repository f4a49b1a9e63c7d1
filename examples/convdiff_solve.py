"""Solve a nonsymmetric convection-diffusion problem with GMRES or BiCGStab.

Run it with

    mpiexec -n 4 python -m mpi4py examples/convdiff_solve.py
    mpiexec -n 2 python -m mpi4py examples/convdiff_solve.py --plot convdiff.png

The matrix is the gallery's upwind discretisation of
``-nu lap(u) + w . grad(u)`` on the unit square (or cube); with a small
diffusion ``nu`` the convection dominates and the matrix is far from
symmetric, so CG does not apply. The script compares several nonsymmetric
Krylov methods on the same system, each with the chosen preconditioner, and
prints a small table on rank 0: iterations, reason, time, reductions and the
true residual.

BiCGStab's residual is not monotone: on this problem it climbs past 10^4
times the initial residual before it converges, which is exactly what the
default divergence test (``divtol=1e4``, PETSc's ``-ksp_divtol``) takes for
divergence. So BiCGStab runs here with ``divtol=None`` (no divergence test),
and the script says how high its residual went; ``--divtol 1e4`` shows the
early DIVERGED_DTOL stop.
"""

from __future__ import annotations

import argparse
import inspect

from mpi4py import MPI

import dmsolve
import dmsolve.gallery


def _divtol(text: str):
    """``--divtol``: a number, ``none`` (no divergence test) or ``default``."""
    if text.lower() in ("none", "default"):
        return None if text.lower() == "none" else "default"
    return float(text)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=96, help="grid points per side")
    p.add_argument("--dim", type=int, choices=(2, 3), default=2)
    p.add_argument("--diffusion", type=float, default=0.01, help="nu > 0")
    p.add_argument("--methods", default="gmres,fgmres,bicgstab",
                   help="comma-separated Krylov methods")
    p.add_argument("--pc", default="jacobi", help="preconditioner name or 'none'")
    p.add_argument("--restart", type=int, default=30, help="GMRES/FGMRES restart")
    p.add_argument("--rtol", type=float, default=1e-8)
    p.add_argument("--maxiter", type=int, default=5000)
    p.add_argument("--divtol", type=_divtol, default="default", help="divergence test ||r|| >= divtol*||r0||, or "
                   "'none' (default: the method's default, none for bicgstab)")
    p.add_argument("--monitor", action="store_true", help="print every residual norm")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.add_argument("--plot", metavar="PNG", default="",
                   help="plot the methods' residual histories to PNG (rank 0)")
    return p.parse_args(argv)


def main(comm: MPI.Comm, argv=None) -> dict:
    """Run the example; ``argv`` is an argv list (``None``: the command line).
    Collective on ``comm``. Returns ``{method: SolveInfo}``."""
    args = parse_args(argv)
    A = dmsolve.gallery.convection_diffusion(args.n, comm, dim=args.dim,
                                             diffusion=args.diffusion)
    b = dmsolve.gallery.rhs(A, "ones")
    bnorm = b.norm()
    rank = comm.Get_rank()
    if rank == 0 and not args.quiet:
        print("%dD convection-diffusion, nu=%g, %d unknowns on %d ranks, pc=%s"
              % (args.dim, args.diffusion, A.shape[0], comm.Get_size(), args.pc))
        print("| method | iterations | reason | solve s | reductions | true rel. residual |")
        print("|---|---|---|---|---|---|")
    results, notes = {}, []
    for method in args.methods.split(","):
        options = dict(rtol=args.rtol, maxiter=args.maxiter)
        if method in ("gmres", "fgmres"):
            options["restart"] = args.restart
        default = inspect.signature(dmsolve.krylov.METHODS[method]).parameters["divtol"].default
        if args.divtol != "default":
            options["divtol"] = args.divtol
        elif method == "bicgstab":
            # BiCGStab's residual rises far above ||r0|| before it falls (see the
            # docstring): the default divergence test would stop it on the way
            options["divtol"] = None
        else:
            options["divtol"] = default
        if args.monitor:
            options["monitor"] = dmsolve.KSPMonitor(prefix="  [%s] " % method)
        x, info = dmsolve.solve(A, b, method=method, pc=args.pc, **options)
        # GMRES with a preconditioner tests the preconditioned residual (left
        # preconditioning, as PETSc), so measure the true one the same way for all.
        r = b.copy()
        r.axpy(-1.0, A @ x)
        info.extra["true_relative_residual"] = r.norm() / bnorm
        results[method] = info
        notes.append(_divergence_note(method, info, options["divtol"], default))
        if rank == 0 and not args.quiet:
            print("| %s | %d | %s | %.3f | %d | %.2e |"
                  % (method, info.iterations, info.reason.petsc_name, info.solve_seconds,
                     info.reductions, info.extra["true_relative_residual"]))
    if rank == 0 and not args.quiet:
        print("\n".join(note for note in notes if note))
    if args.plot and rank == 0:
        _plot(results, args.plot, "%dD convection-diffusion, nu=%g, pc=%s"
              % (args.dim, args.diffusion, args.pc))
        if not args.quiet:
            print("wrote %s" % args.plot)
    return results


def _plot(results: dict, path: str, title: str) -> None:
    """The residual norm each method monitored, relative to its first, per iteration."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, info in results.items():
        norms = info.residual_norms
        ax.semilogy([r / norms[0] for r in norms], label="%s (%s)" % (method, info.reason.name))
    ax.set_xlabel("iteration")
    ax.set_ylabel("monitored residual norm / initial")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _divergence_note(method: str, info, divtol, default) -> str:
    """A line on the divergence test, when it decided or would have decided the run."""
    norms = info.residual_norms
    rise = max(norms) / norms[0] if len(norms) > 1 and norms[0] > 0 else 0.0
    if divtol is None and default is not None and rise >= default:
        return ("note: %s ran with divtol=None: its residual rose to %.1e x ||r0|| on the "
                "way, past the default divergence test (divtol=%g), which would have "
                "stopped it with DIVERGED_DTOL" % (method, rise, default))
    if info.reason.name == "DIVTOL":
        return ("note: %s stopped when its residual reached divtol=%g x ||r0||; the "
                "residual of %s is not monotone, so try --divtol none" % (method, divtol,
                                                                          method))
    return ""


if __name__ == "__main__":
    main(MPI.COMM_WORLD)

# Things to try
# -------------
# - ``--diffusion 0.001``: stronger convection; watch GMRES(30) need more
#   restarts, and try ``--restart 100``.
# - ``--pc none`` against ``--pc jacobi``.
# - ``--methods gmres --monitor``: the left-preconditioned norms that GMRES
#   monitors differ from the true residual printed in the table.
# - ``--dim 3 --n 32`` for a 3D problem.
# - ``--methods bicgstab --divtol 1e4``: the default divergence test stops
#   BiCGStab on its way up; ``--divtol none`` lets it converge.
