"""Matvec of the 3D Poisson matrix: DistCSR against scipy in the same run.

    mpiexec -n 2 python -m mpi4py bench/bench_matvec.py --n 100

Measures, in one process tree: scipy ``A @ x`` (rank 0 alone), DistCSR on one
rank (COMM_SELF, rank 0), DistCSR on all ranks, a STREAM-triad bandwidth, the
bytes of each matrix, and the peak resident memory per rank.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from _common import bench_parser, best_time, peak_rss_mb, run, stream_triad_gbs  # noqa: E402

import dmsolve.gallery  # noqa: E402
from dmsolve import DistCSR  # noqa: E402


def matvec_bytes(nnz: int, n: int) -> int:
    """Minimum memory traffic of a CSR matvec with 32-bit indices: values and
    column indices, row pointers, x once, y written (and zeroed) once."""
    return 12 * nnz + 4 * (n + 1) + 8 * n + 16 * n


def main(comm: MPI.Comm, args) -> dict:
    n = args.n
    rank, size = comm.Get_rank(), comm.Get_size()
    A = dmsolve.gallery.poisson3d(n, comm)
    N, nnz = A.shape[0], A.global_nnz()
    results = {"n": n, "rows": N, "nnz": nnz, "ranks": size}

    # all ranks: distributed matvec
    x, y = A.create_vectors()
    x.local[:] = 1.0
    t_dist = best_time(lambda: A.matvec(x, y), repeats=args.repeats, number=10, comm=comm)

    # gathered copy for the serial references (rank 0 only)
    S = A.to_scipy(root=0)
    if rank == 0:
        xs = np.ones(N)
        t_scipy = best_time(lambda: S @ xs, repeats=args.repeats, number=10)
        A1 = DistCSR.from_global(S, MPI.COMM_SELF)
        x1, y1 = A1.create_vectors()
        x1.local[:] = 1.0
        t_one = best_time(lambda: A1.matvec(x1, y1), repeats=args.repeats, number=10)
        np.testing.assert_allclose(y1.local, S @ xs)
        bw = stream_triad_gbs()
        scipy_bytes = S.data.nbytes + S.indices.nbytes + S.indptr.nbytes
        ours_bytes = A1.local_nbytes
        results.update(scipy_ms=t_scipy * 1e3, one_rank_ms=t_one * 1e3,
                       stream_gbs=bw, scipy_matrix_mb=scipy_bytes / 2**20,
                       dist_matrix_mb_one_rank=ours_bytes / 2**20)
        del S, A1
    comm.Barrier()
    mine = A.local_nbytes
    results["dist_matrix_mb_per_rank"] = comm.gather(mine / 2**20, root=0)
    results["peak_rss_mb_per_rank"] = comm.gather(peak_rss_mb(), root=0)
    results["dist_ms"] = t_dist * 1e3
    if rank == 0:
        tb = matvec_bytes(nnz, N)
        r = results
        r["one_rank_over_scipy"] = r["one_rank_ms"] / r["scipy_ms"]
        r["dist_over_scipy"] = r["dist_ms"] / r["scipy_ms"]
        r["bandwidth_fraction_one_rank"] = tb / (r["one_rank_ms"] * 1e-3) / 1e9 / r["stream_gbs"]
        r["bandwidth_fraction_scipy"] = tb / (r["scipy_ms"] * 1e-3) / 1e9 / r["stream_gbs"]
        r["markdown"] = "\n".join([
            "3D Poisson %d^3 (%d rows, %d nonzeros); STREAM-triad bandwidth %.1f GB/s "
            "(one core)." % (n, N, nnz, r["stream_gbs"]),
            "",
            "| matvec | time / scipy | target | fraction of one core's bandwidth bound |",
            "|---|---|---|---|",
            "| scipy `A @ x` (1 process) | 1.00 | | %.2f |" % r["bandwidth_fraction_scipy"],
            "| DistCSR, 1 rank | %.2f | <= 1.1 | %.2f |" % (r["one_rank_over_scipy"],
                                                          r["bandwidth_fraction_one_rank"]),
            "| DistCSR, %d ranks | %.2f | <= 0.65 (2 ranks) | |" % (size, r["dist_over_scipy"]),
            "",
            "Matrix bytes: DistCSR on 1 rank / scipy CSR = %.3f (target <= 1.3); per rank at "
            "%d ranks: %s MiB. Peak resident memory per rank: %s MiB." % (
                r["dist_matrix_mb_one_rank"] / r["scipy_matrix_mb"], size,
                ", ".join("%.1f" % v for v in r["dist_matrix_mb_per_rank"]),
                ", ".join("%.0f" % v for v in r["peak_rss_mb_per_rank"])),
        ])
        print(r["markdown"])
    return results


if __name__ == "__main__":
    p = bench_parser(__doc__)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    run(main, p)
