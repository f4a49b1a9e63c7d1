"""Weak-scaling harness: per-rank memory and traffic of dmsolve's distributed
paths at fixed work per rank, written to docs/scaling.md (``make scale``).

    python bench/scale.py --ranks 1 2 4 8 16 --n 20 --out docs/scaling.md

The driver starts one fresh ``mpiexec -n p`` per case and rank count, which runs

    mpiexec -n p python -m mpi4py bench/scale.py --case NAME --n 20 --json FILE

In the worker, every rank builds the case's input on a counting duplicate of
COMM_WORLD (bench/_counting.py), runs the case once first (by default at the
same size: imports done, numba kernels loaded, inner communicators made),
builds the input again, warms MPI's node-shared collective buffers (see
:func:`warm_mpi`), then resets the
counters and the RSS high-water mark (``5`` into /proc/self/clear_refs) and
runs the measured case. Figures per rank: peak RSS growth (VmHWM after minus
VmRSS before), bytes sent and received, collectives, point-to-point
messages, BSP supersteps (``Ledger.record_superstep`` calls), iterations.
The code measured is whatever ``dmsolve``/``topology``/``preconditioners``
are first on ``PYTHONPATH``; the document names it.

Work per rank is fixed by ``--n``: every 3D case is an ``n x n x (n p)`` slab
stack, one ``n^3`` slab per rank (rows of Poisson, vertices of a complex or a
grid); the Hodge case is a ``3n x 3n p`` triangulated grid.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _provenance  # noqa: E402

MIB = 2.0 ** 20


# -- memory ---------------------------------------------------------------------------------
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no %s in /proc/self/status" % field)


def reset_peak() -> int:
    """Reset this process's RSS high-water mark; return VmRSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") * 1024


def peak() -> int:
    """VmHWM in bytes (since the last :func:`reset_peak`)."""
    return _status_kib("VmHWM") * 1024


# -- inputs (fixed work per rank) -------------------------------------------------------------
def _poisson(comm, n):
    from dmsolve import gallery
    return gallery.poisson3d(n, comm, ny=n, nz=n * comm.Get_size())


def _xyz_of_rows(A, n):
    lay = A.row_layout
    i = np.arange(lay.start, lay.stop)
    return np.stack((i % n, (i // n) % n, i // (n * n)), axis=1).astype(np.float64)


def _noise(ids, seed=7):
    """Uniform [0, 1) noise keyed by global id (rank-independent)."""
    x = np.asarray(ids, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(29)
    return (x >> np.uint64(11)).astype(np.float64) / 2.0 ** 53


def _smooth(xyz, n):
    u = xyz / n
    return np.sin(3.1 * u[:, 0]) * np.cos(2.3 * u[:, 1]) * np.sin(0.7 * u[:, 2] + 1)


def _tets_of_slab(comm, n):
    """This rank's tetrahedra of the Freudenthal triangulation of the vertex
    grid ``n x n x (n p)``: the cells with z in this rank's slab of planes."""
    from topology import freudenthal_cells
    p, r = comm.Get_size(), comm.Get_rank()
    nz = n * p
    z0, z1 = r * n, min((r + 1) * n, nz - 1)
    cx, cy, cz = np.meshgrid(np.arange(n - 1), np.arange(n - 1), np.arange(z0, z1),
                             indexing="ij")
    base = np.stack((cx.ravel(), cy.ravel(), cz.ravel()), axis=1)
    off = freudenthal_cells(3)                              # (6, 4, 3)
    corners = base[:, None, None, :] + off[None, :, :, :]   # (cells, 6, 4, 3)
    vid = corners[..., 0] + n * (corners[..., 1] + n * corners[..., 2])
    return vid.reshape(-1, 4).astype(np.int64)


def _points(comm, n):
    # this rank's slab of the coordinates (SimplicialComplex(local_points=...):
    # vertices numbered in rank order, nothing of global size on any rank)
    r = comm.Get_rank()
    i = np.arange(r * n ** 3, (r + 1) * n ** 3)
    return np.stack((i % n, (i // n) % n, i // (n * n)), axis=1).astype(np.float64)


def _tri_grid(comm, m):
    """This rank's triangles of an ``m x (m p)`` vertex grid cut into triangles."""
    p, r = comm.Get_size(), comm.Get_rank()
    rows = m * p
    ntri = 2 * (m - 1) * (rows - 1)
    lo, hi = ntri * r // p, ntri * (r + 1) // p
    t = np.arange(lo, hi)
    cell, half = t // 2, t % 2
    x, y = cell % (m - 1), cell // (m - 1)
    a, b, c, d = x + y * m, x + 1 + y * m, x + (y + 1) * m, x + 1 + (y + 1) * m
    return np.where(half[:, None] == 0, np.stack((a, b, c), 1), np.stack((b, d, c), 1))


# -- the cases: prepare(comm, n) -> state; run(state) -> extra figures ------------------------
def prep_csr(comm, n):
    """Triplets of the 7-point Laplacian for this rank's rows, assembled by
    DistCSR.from_coo, then 10 matvecs."""
    from dmsolve import DistVector
    A = _poisson(comm, n)           # only for its row layout
    p = comm.Get_size()
    N = n * n * n * p
    lo, hi = A.row_layout.start, A.row_layout.stop
    rows = np.arange(lo, hi)
    x, y, z = rows % n, (rows // n) % n, rows // (n * n)
    R, C, V = [rows], [rows], [np.full(rows.size, 6.0)]
    for ok, d in ((x > 0, -1), (x < n - 1, 1), (y > 0, -n), (y < n - 1, n),
                  (z > 0, -n * n), (z < n * p - 1, n * n)):
        R.append(rows[ok])
        C.append(rows[ok] + d)
        V.append(np.full(int(ok.sum()), -1.0))
    trip = (np.concatenate(R), np.concatenate(C), np.concatenate(V))
    return {"comm": comm, "trip": trip, "N": N, "DistVector": DistVector}


def run_csr(s):
    from dmsolve import DistCSR
    r, c, v = s["trip"]
    A = DistCSR.from_coo(r, c, v, (s["N"], s["N"]), s["comm"])
    x = s["DistVector"](A.col_layout, np.ones(A.col_layout.local_size))
    y = A.matvec(x)
    for _ in range(9):
        A.matvec(x, out=y)
    return {}


def prep_cg_amg(comm, n):
    from dmsolve import gallery
    A = _poisson(comm, n)
    return {"A": A, "b": gallery.rhs(A, "ones")}


def run_cg_amg(s):
    import preconditioners
    from dmsolve import cg
    M = preconditioners.make("amg", s["A"])
    x, info = cg(s["A"], s["b"], rtol=1e-8, M=M, maxiter=500)
    return {"iterations": int(info.iterations), "converged": bool(info.converged)}


def _prep_partition(comm, n):
    A = _poisson(comm, n)
    return {"A": A, "coords": _xyz_of_rows(A, n)}


def _run_partition(method):
    def run(s):
        from dmsolve.partition import partition
        opts = {"coords": s["coords"]} if method in ("rcb", "hilbert") else {}
        part = partition(s["A"], method, **opts)
        return {"local_parts": int(np.size(getattr(part, "parts", [])))}
    return run


def _prep_complex(comm, n):
    return {"comm": comm, "n": n, "tets": _tets_of_slab(comm, n), "points": _points(comm, n)}


def _run_complex(method):
    def run(s):
        from dmsolve import DistVector
        from topology import SimplicialComplex, critical_points
        pts = s["points"] if method in ("rcb", "hilbert") else None
        cx = SimplicialComplex([s["tets"]], s["comm"], local_points=pts, partition=method)
        gids = cx.owned_global_ids(0)
        n = s["n"]
        xyz = np.stack((gids % n, (gids // n) % n, gids // (n * n)), axis=1).astype(float)
        f = DistVector(cx.vertex_layout, _smooth(xyz, n) + 0.05 * _noise(gids))
        cp = critical_points(cx, f)
        return {"critical": [int(c) for c in np.ravel(cp.counts())]
                if not isinstance(cp.counts(), dict) else cp.counts()}
    return run


def _grid_field(comm, n, noise):
    from dmsolve import DistVector
    from topology import Grid
    grid = Grid((n, n, n * comm.Get_size()), comm)
    lay = grid.vertex_layout
    ids = np.arange(lay.start, lay.stop)
    xyz = grid.coordinates(ids).astype(np.float64)
    return {"grid": grid, "f": DistVector(lay, _smooth(xyz, n) + noise * _noise(ids))}


def prep_persistence(comm, n):
    return _grid_field(comm, n, 0.5)


def run_persistence(s):
    from topology import persistence_diagram
    dg = persistence_diagram(s["grid"], s["f"])
    return {"pairs_per_dim": [dg.report[d]["pairs"] for d in range(3)]}


def prep_mergetree(comm, n):
    return _grid_field(comm, n, 0.5)


def run_mergetree(s):
    from topology import merge_tree
    merge_tree(s["grid"], s["f"])
    return {}


def prep_hodge(comm, n):
    from dmsolve import DistVector
    from topology import SimplicialComplex
    m = 3 * n
    cx = SimplicialComplex([_tri_grid(comm, m)], comm)
    rows, _ = cx.local_simplices(1)
    own = rows[cx.owned_slice(1)]
    px, py = own % m / m, own // m / m
    flow = (np.sin(3 * px[:, 1]) - np.sin(3 * px[:, 0]) + (py[:, 1] - py[:, 0]) * px[:, 0]
            + 0.1 * np.cos(17 * own.sum(axis=1)))
    return {"cx": cx, "f": DistVector(cx.simplex_layout(1), flow)}


def run_hodge(s):
    from topology import hodge_decomposition
    hd = hodge_decomposition(s["cx"], s["f"], rtol=1e-8, pc="amg")
    its = {k: int(v.iterations) for k, v in hd.infos.items()}
    return {"iterations": max(its.values()) if its else 0, "iterations_by_system": its}


def prep_betti(comm, n):
    from topology import SimplicialComplex
    return {"cx": SimplicialComplex([_tets_of_slab(comm, n)], comm)}


def run_betti(s):
    from topology import betti_numbers
    return {"betti": betti_numbers(s["cx"])}


def prep_gemslr(comm, n):
    return {"A": _poisson(comm, n)}


def run_gemslr(s):
    import preconditioners
    preconditioners.make("gemslr", s["A"])
    return {}


CASES = {
    "csr": ("DistCSR assembly (from_coo) + 10 matvecs, 3D Laplacian", prep_csr, run_csr),
    "cg_amg": ("CG + amg, 3D Poisson (rtol 1e-8)", prep_cg_amg, run_cg_amg),
    "partition_block": ("partition 'block', 3D Poisson", _prep_partition, _run_partition("block")),
    "partition_metis": ("partition 'metis', 3D Poisson", _prep_partition, _run_partition("metis")),
    "partition_rcb": ("partition 'rcb', 3D Poisson", _prep_partition, _run_partition("rcb")),
    "partition_hilbert": ("partition 'hilbert', 3D Poisson", _prep_partition,
                          _run_partition("hilbert")),
    "partition_multilevel": ("partition 'multilevel', 3D Poisson", _prep_partition,
                             _run_partition("multilevel")),
    "complex_block": ("SimplicialComplex (tets) 'block' + critical points", _prep_complex,
                      _run_complex("block")),
    "complex_metis": ("SimplicialComplex (tets) 'metis' + critical points", _prep_complex,
                      _run_complex("metis")),
    "complex_multilevel": ("SimplicialComplex (tets) 'multilevel' + critical points",
                           _prep_complex, _run_complex("multilevel")),
    "complex_rcb": ("SimplicialComplex (tets) 'rcb' + critical points", _prep_complex,
                    _run_complex("rcb")),
    "complex_hilbert": ("SimplicialComplex (tets) 'hilbert' + critical points", _prep_complex,
                        _run_complex("hilbert")),
    "persistence": ("grid persistence diagram, noisy field", prep_persistence, run_persistence),
    "mergetree": ("grid join tree, noisy field", prep_mergetree, run_mergetree),
    "hodge": ("Hodge decomposition, triangulated 2D grid (CG + amg)", prep_hodge, run_hodge),
    "gemslr": ("gemslr set-up, 3D Poisson", prep_gemslr, run_gemslr),
    "betti": ("Betti numbers (GF(2) ranks of B_2, B_3), tets of the slab", prep_betti,
              run_betti),
}


# -- the worker (one case, under mpiexec) ----------------------------------------------------
#: Rounds of small collectives in :func:`warm_mpi` (MPICH's ring of intranode
#: collective cells is fully touched after about 2000 Allreduces at 16 ranks).
WARM_COLLECTIVES = 3000


def warm_mpi(world) -> None:
    """Touch the MPI library's own node-shared collective buffers once.

    MPICH's intranode Allreduce/Bcast/Reduce cycle through a ring of shared
    cells whose pages enter a rank's RSS as they are first touched: 3000
    Allreduces of 8-512 bytes grow every rank by 0.9 MiB at 4 ranks and 2.7
    MiB at 16 (most of it within the first 300), whatever the program. That
    is a fixed cost of the MPI library per process, not dmsolve's data, and
    a case with more collectives would otherwise show more of it. Point-to-
    point buffers are *not* warmed: the memory a rank pays per distinct peer
    it talks to is part of what the harness measures."""
    from mpi4py import MPI
    for i in range(WARM_COLLECTIVES):
        a = np.zeros(1 + i % 64)
        world.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        if i % 8 == 0:                  # and the cells' full size, now and then
            b = np.zeros(8192 if i % 64 == 0 else 512)
            world.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
            world.Bcast(a, root=0)
            world.Reduce(a.copy(), a, op=MPI.SUM, root=0)
    world.Barrier()


def worker(case: str, n: int, warm_n: int, json_path: str) -> None:
    from mpi4py import MPI
    sys.path.insert(0, HERE)
    from _counting import TALLY, counting

    world = MPI.COMM_WORLD
    comm = counting(world)
    _, prep, run = CASES[case]
    if warm_n > 0:              # imports, numba kernels, inner communicators
        run(prep(comm, warm_n))
    state = prep(comm, n)
    warm_mpi(world)
    gc.collect()
    world.Barrier()
    TALLY.reset()
    rss0 = reset_peak()
    t0 = time.perf_counter()
    extra = run(state)
    seconds = time.perf_counter() - t0
    growth = peak() - rss0
    tally = TALLY.as_dict()
    del state
    seconds = world.allreduce(seconds, op=MPI.MAX)
    rows = world.gather({"growth": growth, "rss0": rss0, **tally}, root=0)
    if world.Get_rank() == 0:
        p = world.Get_size()
        g = np.array([r["growth"] for r in rows], dtype=np.float64)
        calls: dict[str, list[int]] = {}
        for r in rows:
            for k, v in r["by_call"].items():
                row = calls.setdefault(k, [0, 0, 0])
                row[0] = max(row[0], v[0])
                row[1] = max(row[1], v[1])
                row[2] = max(row[2], v[2])
        out = {"case": case, "ranks": p, "n": n, "seconds": seconds,
               "mem_max": float(g.max()), "mem_mean": float(g.mean()),
               "mem_rank0": float(g[0]),
               "rss_before_max": max(r["rss0"] for r in rows),
               "sent_max": max(r["bytes_sent"] for r in rows),
               "recv_max": max(r["bytes_recv"] for r in rows),
               "sent_rank0": rows[0]["bytes_sent"], "recv_rank0": rows[0]["bytes_recv"],
               "collectives": max(r["collectives"] for r in rows),
               "p2p_max": max(r["p2p_sent"] + r["p2p_recv"] for r in rows),
               "supersteps": max(r["supersteps"] for r in rows),
               "by_call_max": calls, **extra}
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)


def probe_worker(json_path: str) -> None:
    """Worker mode: BSP machine parameters g and l of this machine (rank 0 writes)."""
    from mpi4py import MPI
    from dmsolve.bsp import probe
    par = probe(MPI.COMM_WORLD)
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(json_path, "w") as f:
            json.dump({"g": par.g, "l": par.l, "ranks": par.ranks}, f)


def run_probe(mpiexec, timeout, p=2) -> dict | None:
    """g and l from ``dmsolve.bsp.probe`` at ``p`` ranks, in a fresh mpiexec."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="scale-probe-")
    os.close(fd)
    cmd = [mpiexec, "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
           "--probe", "--json", path]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        ok = proc.returncode == 0 and os.path.getsize(path) > 0
        res = json.load(open(path)) if ok else None
    except subprocess.TimeoutExpired:
        res = None
    os.unlink(path)
    return res


# -- targets --------------------------------------------------------------------------------
#: Absolute slack on the memory targets (RSS moves in pages and allocator arenas).
MEM_FLOOR = 2 * MIB
#: The O(p) term of the traffic target: words (8 bytes) per other rank.
WORDS_PER_RANK = 64


def check_targets(runs: dict[int, dict], base: int = 4) -> dict:
    """Pass/fail of the targets for one case, comparing the largest
    rank count measured with ``base`` ranks (and 1 rank for iterations).
    Each value is ``(ok or None, text)``; None when not measurable."""
    ps = sorted(p for p, r in runs.items() if "error" not in r)
    out = {}
    if not ps:
        return {k: (None, "no run") for k in ("mem", "bytes", "steps", "rank0", "its")}
    top = ps[-1]
    R = runs[top]
    if base in runs and "error" not in runs[base] and top > base:
        B = runs[base]
        lim = 1.25 * B["mem_max"] + MEM_FLOOR
        out["mem"] = (R["mem_max"] <= lim, "%.1f vs %.1f MiB at %d (limit %.1f)" % (
            R["mem_max"] / MIB, B["mem_max"] / MIB, base, lim / MIB))
        bt, bb = max(R["sent_max"], R["recv_max"]), max(B["sent_max"], B["recv_max"])
        lim = 1.25 * bb + 8 * WORDS_PER_RANK * top
        out["bytes"] = (bt <= lim, "%s vs %s at %d (limit %s)" % (
            _b(bt), _b(bb), base, _b(lim)))
        st, sb = R["supersteps"], B["supersteps"]
        lim = math.ceil(sb * math.log2(top) / math.log2(base))
        out["steps"] = (st <= lim, "%d vs %d at %d (limit %d)" % (st, sb, base, lim))
    else:
        for k in ("mem", "bytes", "steps"):
            out[k] = (None, "needs runs at %d and more ranks" % base)
    worst = None
    for p in ps:
        if p < 2:
            continue
        r = runs[p]
        ratio = r["mem_rank0"] / r["mem_mean"] if r["mem_mean"] > 0 else 1.0
        # the same absolute slack as the memory target: at 4 ranks both ends of
        # the slab stack (ranks 0 and p-1 alike) grow ~2.1-2.5 MiB more than the
        # middle ranks in DistCSR.from_coo, none of it in Python's allocations
        # (tracemalloc peaks are equal, 0.93 MiB); not at 8 ranks
        ok = r["mem_rank0"] <= 1.2 * r["mem_mean"] + MEM_FLOOR
        if worst is None or (not ok and worst[0]) or (ok == worst[0] and ratio > worst[2]):
            worst = (ok, p, ratio)
    out["rank0"] = ((worst[0], "%.2fx the mean at %d (worst)" % (worst[2], worst[1]))
                    if worst else (None, "needs 2+ ranks"))
    if "iterations" in R and 1 in runs and "iterations" in runs[1]:
        i1, it = runs[1]["iterations"], R["iterations"]
        out["its"] = (it <= i1 + 2, "%d vs %d at 1" % (it, i1))
    else:
        out["its"] = (None, "-")
    return out


def _b(x: float) -> str:
    x = float(x)
    for unit, f in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if x >= f:
            return "%.1f %s" % (x / f, unit)
    return "%d B" % x


# -- the driver -----------------------------------------------------------------------------
def run_case(case, p, n, warm_n, mpiexec, timeout) -> dict:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="scale-%s-%d-" % (case, p))
    os.close(fd)
    cmd = [mpiexec, "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
           "--case", case, "--n", str(n), "--warm-n", str(warm_n), "--json", path]
    t0 = time.time()
    # a fixed mmap threshold: large arrays are mmapped and returned on free, so
    # that the warm-up run does not leave heap the measured run reuses unseen
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="65536")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        ok = proc.returncode == 0 and os.path.getsize(path) > 0
        err = "" if ok else (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])
    except subprocess.TimeoutExpired:
        ok, err = False, ["timeout after %d s" % timeout]
    wall = time.time() - t0
    if ok:
        with open(path) as f:
            res = json.load(f)
    else:
        tail = [ln for ln in err if ln.strip()][-3:]
        res = {"case": case, "ranks": p, "error": " / ".join(tail)[:300]}
    res["wall"] = wall
    os.unlink(path)
    return res


def measured_code() -> dict:
    """The commit of the checkout whose ``dmsolve`` is first on the path (the
    code the workers measure): :func:`_provenance.code`. Not collective."""
    import importlib.util
    spec = importlib.util.find_spec("dmsolve")
    return _provenance.code(os.path.dirname(os.path.dirname(spec.origin)) if spec else ROOT)


#: What a reader needs to read a case's figures right, measured outside the
#: harness (the commands are in the notes).
CASE_NOTES = {
    "cg_amg": "Coarse levels on fewer ranks (`min_rows_per_rank` 2000, at most 4x fewer ranks "
              "per level, GAMG's `process_eq_limit` trade) sit on the last rank of each group "
              "of ranks, and the Galerkin rows are finished on the ranks where their "
              "aggregates were made before they move, each once (docs/design/"
              "amg-agglomeration.md): memory and rank 0 pass. Bytes: a gathering rank's "
              "`galerkin:gather` no longer grows with p (206 KiB at 4 ranks, 216 at 16, "
              "bench/scale_labels.py); what grows is the busiest rank's ghost-row fetch and "
              "neighbour partial rows (an end slab at 4 ranks, an interior one with two "
              "neighbours from 8 on) and the solve's halo exchanges on the coarse levels. A "
              "smaller `min_rows_per_rank` keeps more ranks on the coarse levels (less "
              "traffic per rank, more latency). Hodge's amg solves make the same trade.",
    "complex_block": "Memory: from 32 ranks a rank that sends to more than 2 sqrt(p) ranks in "
                     "one superstep routes its messages through two hops (docs/bsp.md, "
                     "\"Routed exchanges\"), so that psort's supersteps talk to O(sqrt p) "
                     "peers, not p - 1 (MPICH keeps about 100 KiB per peer): 3.3 MiB at 64 "
                     "ranks and n = 10, against 9.1 when every rank talked to every rank; complex_rcb "
                     "4.8 (8.5), complex_hilbert 4.9 (9.9), mergetree 3.7 (4.3). A routed "
                     "message is sent twice (to its hop, then on), and the harness counts "
                     "both: that is what the bytes targets of complex_rcb, complex_hilbert "
                     "and mergetree miss by.",
    "complex_hilbert": "Bytes: at 4 ranks the Hilbert parts of the slab stack are the slabs "
                       "and no simplex moves; from 16 ranks on the curve cuts across the "
                       "slabs and every rank's simplices move once (8.9 MiB per rank at n = "
                       "20 and 64 ranks, the same as complex_multilevel at 4 ranks, where "
                       "everything moves too): a rank's own share, once, not a global term. "
                       "Points given in the curve's order skip the sort and move nothing "
                       "(`dmsolve.partition.hilbert`); a slab stack is not in that order.",
    "persistence": "Bytes: psort's exchange moves (p-1)/p of each rank's keys, and from 32 "
                   "ranks psort's supersteps go through two hops (docs/bsp.md, \"Routed "
                   "exchanges\") and count twice; the D1 reduction sends each column to the "
                   "owner of its pivot and again when its pivot changes (DIPHA's scheme; "
                   "`reduce_z2:columns` received 9.2 KiB at 4 ranks and 10.4 KiB at 16, n = "
                   "10, bench/scale_labels.py): the growth is the sort's. Memory passes.",
    "mergetree": "Bytes: psort's supersteps routed through two hops from 32 ranks count "
                 "twice (as complex_block), and its O(p)-word collectives (Allgather(v) 31 "
                 "KiB received at 64 ranks).",
    "partition_metis": "Supersteps: at 4 ranks `metis_partition` gathers the graph (within "
                       "its gather limit) and runs serial METIS, no superstep; at 64 it runs "
                       "the parallel multilevel path (37). The target compares two "
                       "algorithms; partition_multilevel is the same path at every rank count "
                       "(37 vs 13, passes). Bytes: as partition_multilevel.",
    "partition_multilevel": "Bytes: the coarse graph gathered up the binomial tree is "
                            "max(2000, 40 p) vertices by design (234 KiB received at 64 "
                            "ranks, n = 20), and each refinement round agrees on the part "
                            "weights by an Allreduce of p words (196 calls, 98 KiB at 64 "
                            "ranks).",
    "gemslr": "A split whose parts are uncoupled (the interface planes of a slab stack fall "
              "whole into parts at 64 ranks) makes those parts a level and leaves no last "
              "level (19 GMRES iterations either way); stopping the levels there would leave "
              "every remaining node as a last level factored on every rank (25335 rows: 30 "
              "MiB of Allgatherv per rank in set-up at n = 20). Supersteps: at 4 ranks each level's "
              "subgraph is gathered for serial METIS, at 64 it is partitioned in parallel (as "
              "partition_metis); that gather (while the subgraph is at most four ranks' "
              "shares, so that the ordering at 1-4 ranks is the serial one) is also rank 0's "
              "extra memory at 4 ranks.",
    "hodge": "Bytes and memory: amg's coarse levels on fewer ranks, as cg_amg. "
             "The gradient system's iterations grow with the strip, not with the ranks: "
             "the same global problem as at 64 ranks (a 30 x 1920 strip) takes 14 iterations "
             "on one rank too, and pyamg (smoothed aggregation, CG, tol 1e-8) on the gathered "
             "gradient system takes 14 as well (6 on the 30 x 30 strip of one rank; "
             "bench/hodge_strip_reference.py). The "
             "iterations target compares different problems here; dmsolve matches the serial "
             "reference at every size.",
}


# other runs of this harness kept in docs/, named in each other's header
OTHER_RUNS = {
    "scaling.md": "every case at 1-64 ranks, n = 10 (1000 rows or vertices per rank)",
    "scaling-n20.md": "the cases that miss a target at n = 10, again at n = 20 (8000 rows or "
                      "vertices per rank) at 4 and 64 ranks: "
                      "the misses that are a constant O(p) term pass there",
}


def _other_runs(out: str | None) -> list[str]:
    """Header lines naming the other runs in ``out``'s folder."""
    if out is None:
        return []
    here, name = os.path.split(os.path.abspath(out))
    return ["- Also: [%s](%s), %s." % (f, f, what) for f, what in OTHER_RUNS.items()
            if f != name and os.path.exists(os.path.join(here, f))]


def _remeasured(meta: dict) -> dict:
    """The cases an ``--update`` run measured again, by the code and date it
    measured (``"commit 1a2b3c4, 2026-01-31 12:00"``)."""
    by_code: dict = {}
    for case, stamp in meta.get("remeasured", {}).items():
        ranks = stamp.get("ranks")
        where = ("at p = %s" % ", ".join(map(str, ranks))) if ranks else "at every rank count"
        when = "%s: %s, %s" % (where, _provenance.code_text(stamp), stamp.get("date", "?"))
        by_code.setdefault(when, []).append(case)
    return by_code


def markdown(results: dict, cases: list[str], ranks: list[int], n: int, started: str,
             wall: float, out: str | None = None) -> str:
    L = ["# Weak scaling: per-rank memory and traffic", "",
         "Written by `make scale` (bench/scale.py); do not edit by hand.", "",
         "- Date: %s (UTC), %.0f s in all." % (started, wall),
         "- Machine: %s. Ranks are oversubscribed on the cores: times are not the figure." %
         _provenance.machine_text(results.get("_meta", {}).get("machine")),
         "- Code measured: %s." % _provenance.code_text(results.get("_meta", {}).get("code")),
         *["- Re-measured (`--update`) %s: %s." % (when.split(": ", 1)[0],
                                                     ", ".join(cases_) + ", at "
                                                     + when.split(": ", 1)[1])
           for when, cases_ in _remeasured(results.get("_meta", {})).items()],
         *_other_runs(out),
         "- Work per rank: n = %d, an n x n x n slab per rank of an n x n x (n p) problem "
         "(%d rows, grid or complex vertices per rank); Hodge: a %d x %d p triangulated grid." %
         (n, n ** 3, 3 * n, 3 * n),
         "- One fresh `mpiexec -n p` per case and rank count. Each rank runs the case once "
         "first, unmeasured (at the same size by default: imports, numba kernels, inner "
         "communicators), builds the input again, runs 3000 small collectives (MPICH's "
         "node-shared collective cells enter RSS as first touched: 0.9 MiB per rank at "
         "4 ranks, 2.7 MiB at 16, whatever the program; point-to-point buffers are not "
         "warmed), then resets its RSS high-water mark "
         "(`5` > /proc/self/clear_refs) and its counters and runs the measured case. "
         "Workers run with MALLOC_MMAP_THRESHOLD_=65536, so that arrays of 64 KiB and more "
         "are fresh pages (counted) rather than heap the warm-up freed.", "",
         "Columns: **mem max / mean** = peak RSS growth during the case (VmHWM after minus "
         "VmRSS before), max and mean over ranks; **r0/mean** = rank 0's growth over the "
         "mean; **sent / recv** = most bytes sent / received by one rank (logical payload, "
         "see bench/_counting.py: an Alltoall(v) counts the blocks to and from other ranks, "
         "an Allgather(v) one's own block sent and the others' received, a reduction the "
         "vector once each way, a Bcast once at the root and once at each other rank); "
         "**coll** = collective calls of the busiest rank (including Dup/Split and "
         "nonblocking ones); **p2p** = point-to-point messages (persistent halo starts "
         "included); **steps** = BSP supersteps (`Ledger.record_superstep` calls); "
         "**its** = Krylov iterations (Hodge: the larger of its two systems).", ""]
    L += ["## Targets", "",
          "At fixed work per rank, comparing the largest rank count measured (64 if run) "
          "with 4 ranks: mem max <= 1.25x + %.0f MiB; bytes (max of sent, recv) <= 1.25x "
          "+ %d words x p; supersteps <= S(4) log2(p) / 2; rank 0 <= 1.2x the mean + %.0f "
          "MiB at every p >= 2; iterations <= those at 1 rank + 2. **FAIL** marks a missed "
          "target." % (MEM_FLOOR / MIB, WORDS_PER_RANK, MEM_FLOOR / MIB), "",
          "| case | top p | memory | bytes | supersteps | rank 0 | iterations |",
          "|---|---|---|---|---|---|---|"]
    fails = []
    for c in cases:
        runs = results.get(c, {})
        t = check_targets(runs)
        ok_ps = [p for p in sorted(runs) if "error" not in runs[p]]
        cells = []
        for k in ("mem", "bytes", "steps", "rank0", "its"):
            ok, txt = t[k]
            mark = "-" if ok is None else ("pass" if ok else "**FAIL**")
            cells.append("%s: %s" % (mark, txt) if ok is not None else txt)
            if ok is False:
                fails.append((c, k))
        L.append("| %s | %s | %s |" % (c, ok_ps[-1] if ok_ps else "-", " | ".join(cells)))
    L += ["", "Missed: %s." % (", ".join("%s/%s" % f for f in fails) or "none"), ""]
    L += ["## Figures per case", ""]
    for c in cases:
        runs = results.get(c, {})
        L += ["### %s: %s" % (c, CASES[c][0]), "",
              "| p | mem max | mem mean | r0/mean | sent | recv | coll | p2p | steps | its "
              "| case s | run s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in ranks:
            r = runs.get(p)
            if r is None:
                continue
            if "error" in r:
                L.append("| %d | failed: %s |||||||||||" % (p, r["error"].replace("|", "/")))
                continue
            ratio = r["mem_rank0"] / r["mem_mean"] if r["mem_mean"] > 0 else float("nan")
            L.append("| %d | %.1f MiB | %.1f MiB | %.2f | %s | %s | %d | %d | %d | %s | %.1f "
                     "| %.0f |" % (p, r["mem_max"] / MIB, r["mem_mean"] / MIB, ratio,
                                   _b(r["sent_max"]), _b(r["recv_max"]), r["collectives"],
                                   r["p2p_max"], r["supersteps"], r.get("iterations", "-"),
                                   r["seconds"], r["wall"]))
        top = max((p for p in runs if "error" not in runs[p]), default=None)
        if top is not None:
            calls = runs[top]["by_call_max"]
            heavy = sorted(calls.items(), key=lambda kv: -max(kv[1][1], kv[1][2]))[:5]
            L += ["", "Heaviest calls at %d ranks (calls, max bytes sent, max received by "
                  "one rank): %s." % (top, "; ".join("%s %d, %s, %s" % (
                      k, v[0], _b(v[1]), _b(v[2])) for k, v in heavy))]
        if c in CASE_NOTES:
            L += ["", CASE_NOTES[c]]
        L.append("")
    L += ["## What is not counted", "",
          "- Traffic on communicators dmsolve makes without going through the case's "
          "communicator (none seen: `bsp._comm.inner_comm` duplicates the counting "
          "communicator, which returns a counting communicator; `Split`, `Split_type` and "
          "`Create_dist_graph_adjacent` do too).",
          "- Persistent requests are counted at every `MPI.Prequest.Startall` of "
          "`dmsolve.bsp._pattern` (the harness replaces that module's `MPI` with a view "
          "whose `Prequest.Startall` tallies the starts); a persistent request started "
          "another way (`req.Start()`) would not be counted.",
          "- `Irecv` is counted at posting with the posted buffer's size (an upper bound); "
          "a receive matched by `Mprobe`/`Improbe` (the sparse BSP exchange's NBX) at the "
          "probe, with the probed size. One-sided (RMA) calls and MPI-IO are not counted "
          "(dmsolve uses none today).",
          "- Supersteps are what `BSP.sync` records in a ledger; exchanges outside BSP "
          "(collectives in solvers, partitioners) appear under coll only.",
          "- The memory figure is the whole process's (numpy, numba, MPI buffers, the "
          "Python heap), not dmsolve's alone; the pymetis and scipy work inside a case "
          "counts. Inputs built before the case (triplets, fields, each rank's slab of "
          "the points) are not counted as growth.",
          "- Allocations under 64 KiB can reuse heap freed by the warm-up run and are then "
          "not seen as growth; at small n the memory columns are within a few MiB of noise "
          "(allocator arenas, MPI's per-peer buffers), hence the absolute slack on the "
          "memory targets. Arrays of global size are above 64 KiB from a few thousand "
          "entries on, and are seen.", ""]
    import scale_project
    L.append(scale_project.markdown({c: results[c] for c in cases if c in results},
                                    results.get("_probe")))
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", help="worker mode: run this case (under mpiexec)")
    ap.add_argument("--json", help="worker mode: write the figures here (rank 0)")
    ap.add_argument("--probe", action="store_true",
                    help="worker mode: measure g and l with dmsolve.bsp.probe")
    ap.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--n", type=int, default=20, help="slab edge: n^3 per rank")
    ap.add_argument("--warm-n", type=int, default=None,
                    help="size of the warm-up run (default n: the same paths and kernels; 0: none)")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "scaling.md"))
    ap.add_argument("--results", default=None, help="also write all figures as JSON here")
    ap.add_argument("--mpiexec", default=os.path.join(os.path.dirname(sys.executable),
                                                      "mpiexec"))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per mpiexec")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="only rewrite --out from the figures of an earlier --results file")
    ap.add_argument("--started", default=None, help="with --render: the date of that run")
    ap.add_argument("--update", metavar="RESULTS_JSON",
                    help="run --cases at --ranks, replace their figures in this earlier "
                         "--results file (noting the code measured) and rewrite --out from it")
    args = ap.parse_args(argv)
    if args.update:
        with open(args.update) as f:
            old = json.load(f)
        meta = old.setdefault("_meta", {})
        stamp = dict(measured_code(), date=datetime.datetime.now(
            datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), ranks=sorted(args.ranks))
        for p in args.ranks:
            for c in args.cases:
                r = run_case(c, p, args.n, args.n if args.warm_n is None else args.warm_n,
                             args.mpiexec, args.timeout)
                old.setdefault(c, {})[str(p)] = r
                meta.setdefault("remeasured", {})[c] = stamp
                with open(args.update, "w") as f:
                    json.dump(old, f, indent=1)
                print("%-16s p=%-3d %s" % (c, p, r.get("error") or "mem %.1f MiB, steps %d"
                      % (r["mem_max"] / MIB, r["supersteps"])), flush=True)
        return main(["--render", args.update, "--out", args.out,
                     "--started", args.started or "?"])
    if args.render:
        with open(args.render) as f:
            raw = json.load(f)
        probe, meta = raw.pop("_probe", None), raw.pop("_meta", None)
        res = {c: {int(p): r for p, r in v.items()} for c, v in raw.items()}
        wall = sum(r.get("wall", 0.0) for v in res.values() for r in v.values())
        ranks = sorted({p for v in res.values() for p in v})
        n = next(r["n"] for v in res.values() for r in v.values() if "n" in r)
        cases = [c for c in CASES if c in res]
        res.update({k: v for k, v in (("_probe", probe), ("_meta", meta)) if v})
        with open(args.out, "w") as f:
            f.write(markdown(res, cases, ranks, n, args.started or "?", wall, args.out))
        print("wrote", args.out)
        return 0
    if args.warm_n is None:
        args.warm_n = args.n
    if args.probe:
        probe_worker(args.json)
        return 0
    if args.case:
        worker(args.case, args.n, args.warm_n, args.json)
        return 0
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    t0 = time.time()
    results: dict = {}
    # named now: a later --render of these figures must not name the code checked out then
    results["_meta"] = {"code": measured_code(), "machine": _provenance.machine()}
    probe = run_probe(args.mpiexec, args.timeout)
    if probe:
        results["_probe"] = probe
    # every case at one rank count before the next count, so that a run stopped
    # early still has all cases at the smaller counts
    for p in args.ranks:
        for c in args.cases:
            r = run_case(c, p, args.n, args.warm_n, args.mpiexec, args.timeout)
            results.setdefault(c, {})[p] = r
            # the document so far, so that a long run that is stopped leaves its figures
            _write(args, results, started, t0)
            print("%-16s p=%-3d %s" % (c, p, r.get("error") or "mem %.1f MiB, bytes %s / %s, "
                  "coll %d, steps %d, %.0f s" % (r["mem_max"] / MIB, _b(r["sent_max"]),
                                                 _b(r["recv_max"]), r["collectives"],
                                                 r["supersteps"], r["wall"])), flush=True)
    _write(args, results, started, t0)
    print("wrote", args.out)
    return 0


def _write(args, results, started, t0) -> None:
    if args.results:
        with open(args.results, "w") as f:
            json.dump(results, f, indent=1)
    cases = [c for c in args.cases if c in results]
    text = markdown(results, cases, args.ranks, args.n, started, time.time() - t0, args.out)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
