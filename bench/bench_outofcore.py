"""Out-of-core grid topology: a 512^3 float32 raw field under a 512 MiB budget.

    mpiexec -n 2 python -m mpi4py bench/bench_outofcore.py --n 512 --check-n 256 --json out/bench/outofcore.json

(quick run, seconds: ``... bench/bench_outofcore.py --n 32 --check-n 32 --budget 4MiB``)

The field is smooth (separable sines and Gaussians) plus small uniform
noise, written as raw float32 (id order, x fastest) into ``--workdir`` a few
planes at a time, so that making it never holds the whole array; the noise
of plane z comes from its own seeded generator, so the file is the same
whatever the block size. Every case runs in its own ``mpiexec -n RANKS``
launch (so a case's peak resident set is its own; the ranks of this launch
wait without spinning), and measures two phases, ``critical_points`` and
``persistence_diagram`` of a :class:`topology.RawField`, each after
writing "5" to /proc/self/clear_refs (peak RSS reset) and reading VmHWM
from /proc/self/status after it. Cases:

- ``large``: the ``--n``^3 field, ``Grid(..., memory_budget=--budget)``
  (as many virtual processors as the budget needs);
- ``memory``: the ``--check-n``^3 field on an in-memory Grid (the
  reference: answers and time);
- ``budget``: the ``--check-n``^3 field out of core under ``--budget``
  (the time ratio; "fits in the page cache": the raw file and the spill
  files are far below the machine's memory);
- ``v1``, ``v2``, ``v8``: the ``--check-n``^3 field at ``virtual=v`` with
  the smallest budget that ``v`` allows (at least ``--budget``), so that
  the staged states and messages spill.

Answers: critical points (ids and types) and the raw pairs of every
dimension (ties included) are hashed on rank 0 after the timed phases, and
compared with the in-memory case's. The out-of-core diagram includes D1
(its ``missing`` is empty). Where a diagram lists D1 in ``missing``, the
time ratio is against the in-memory run without its D1 (its
``_saddle_pairs`` is timed and taken off; the ratio against the whole
in-memory diagram is given too).

Where the time goes, per rank (the slowest rank's figure): reads of the raw
file, the sort of each slab's values (``argsort``), the classification, the
two sweeps per slab, the gluing of boundary trees, the spill-file reads and
writes (:class:`dmsolve.bsp.VirtualBSP`), the exchanges (the ledger's sync
time), and the rest (gathering the pairs, the distributed sort of the
diagram). The ledger gives the spill bytes of each superstep (``io_read``,
``io_written``); the bytes *touched* by a superstep are, on a rank, the sum
over its virtual processors' turns of the larger of the state's size before
and after the turn, plus the messages the turns received and the messages
delivered to the rank's processors by the superstep. Written once and read
once, a state costs at most two transfers per superstep and a message one
in each of its two supersteps: the I/O ratio ``(io_read + io_written) /
touched`` is at most 2 by design, and the target is that it is.
"""

from __future__ import annotations

import argparse
import collections
import functools
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _provenance  # noqa: E402
MIB = 2.0 ** 20


# -- the field -------------------------------------------------------------------------------------
def field_planes(n: int, z0: int, z1: int, seed: int = 19) -> np.ndarray:
    """Planes ``z0 .. z1-1`` of the n^3 field, float32, numpy order (z, y, x).

    A smooth part, a product of sines plus three Gaussian bumps (all
    separable, so a block costs a few passes over it), and uniform noise
    of amplitude 0.002 (the smooth part's gradient is about 30 per unit
    length: at 256^3 the noise matters only near the smooth critical points
    and in the flat tails of the bumps)."""
    t = np.arange(n) / n
    z = np.arange(z0, z1) / n
    x, y = t[None, None, :], t[None, :, None]
    zz = z[:, None, None]
    f = (np.sin(2 * np.pi * 1.3 * x + 0.4) * np.cos(2 * np.pi * 1.1 * y)
         * np.sin(2 * np.pi * 0.9 * zz + 1.0))
    f = f + 0.3 * np.sin(2 * np.pi * 3.7 * x + 1.1) * np.cos(2 * np.pi * 2.9 * zz)
    for amp, (cx, cy, cz), w in ((0.8, (0.3, 0.6, 0.4), 0.02), (-0.6, (0.7, 0.3, 0.7), 0.05),
                                 (0.5, (0.5, 0.5, 0.15), 0.01)):
        f = f + amp * (np.exp(-(x - cx) ** 2 / w) * np.exp(-(y - cy) ** 2 / w)
                       * np.exp(-(zz - cz) ** 2 / w))
    out = f.astype(np.float32)
    for k in range(z1 - z0):
        rng = np.random.default_rng((seed, n, z0 + k))
        out[k] += (0.002 * (2 * rng.random((n, n)) - 1)).astype(np.float32)
    return out


def write_field(path: str, n: int, block_bytes: int = 32 << 20) -> float:
    """Write the n^3 field to ``path`` a block of planes at a time, through a
    temporary moved into place (a failed write, a full disk, removes it and
    leaves any previous file as it was); seconds."""
    t = time.perf_counter()
    block = max(1, block_bytes // (8 * n * n))
    part = path + ".part"
    try:
        with open(part, "wb") as f:
            for z0 in range(0, n, block):
                field_planes(n, z0, min(z0 + block, n)).tofile(f)
        os.replace(part, path)
    except BaseException:
        try:
            os.remove(part)
        except OSError:
            pass            # the write's own error is the one to report
        raise
    return time.perf_counter() - t


# -- memory ----------------------------------------------------------------------------------------
def reset_peak() -> None:
    """Reset this process's peak resident set (VmHWM) to its current size."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_mib(field: str = "VmHWM") -> float:
    """This process's peak (``VmHWM``) or current (``VmRSS``) resident set, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


# -- instrumentation (timers around the kernels; bench side only) ----------------------------------
class Probe:
    """Seconds and bytes of the out-of-core kernels and of each virtual
    superstep, by wrapping module functions (looked up at call time)."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self.raw_bytes = 0
        self.steps = []           # (label, io_read, io_written, touched, work, sync)
        self._patch()

    def _timed(self, owner, name, key):
        fn = getattr(owner, name)
        seconds = self.seconds

        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds[key] += time.perf_counter() - t
        setattr(owner, name, wrapper)

    def _patch(self):
        import dmsolve.bsp._virtual as vb
        import topology.outofcore._slabs as oc
        import topology.persistence._diagram as pe
        from topology import RawField
        probe = self
        read = RawField.read_planes

        def read_planes(field, start, stop):
            t = time.perf_counter()
            out = read(field, start, stop)
            probe.seconds["raw read"] += time.perf_counter() - t
            probe.raw_bytes += (stop - start) * field.plane_size * field.dtype.itemsize
            return out
        RawField.read_planes = read_planes
        self._timed(oc, "_read_slab", "read + sort slab")
        self._timed(oc, "_slab_critical", "classify")
        self._timed(oc, "_slab_sweeps", "sweeps")
        self._timed(oc, "_glue", "glue")
        self._timed(oc, "saddle_parts", "D1 (in memory)")
        self._timed(pe, "sorted_block", "diagram sort")
        self._timed(vb.VirtualBSP, "_spill_state", "spill write")
        self._timed(vb, "_append_messages", "spill write")
        self._timed(vb.VirtualBSP, "_load_state", "spill read")
        self._timed(vb, "_read_messages", "spill read")
        step = vb.VirtualBSP.superstep

        def superstep(ctx, compute, label=""):
            touched = [0]

            def turn(vp, state, inbox):
                before = sum(a.nbytes for a in state.values())
                got = sum(a.nbytes for tag in inbox.tags() for _, a in inbox.messages(tag))
                compute(vp, state, inbox)
                touched[0] += max(before, sum(a.nbytes for a in state.values())) + got
            out = step(ctx, turn, label)
            row = ctx.ledger.steps[-1][1]
            probe.steps.append((label, int(row[10]), int(row[11]), touched[0] + int(row[3]),
                                float(row[0]), float(row[1])))
            return out
        vb.VirtualBSP.superstep = superstep

    def split(self) -> dict:
        s = dict(self.seconds)
        if "read + sort slab" in s:          # out of core: the slab's read, then its argsort
            s["sort slab"] = s.pop("read + sort slab") - s.get("raw read", 0.0)
        s["exchange (sync)"] = sum(r[5] for r in self.steps)
        return s

    def reset(self):
        self.seconds.clear()
        self.raw_bytes = 0
        self.steps = []


# -- one case (in its own mpiexec launch) ------------------------------------------------------------
def warm_up(comm) -> None:
    """Load the compiled kernels (numba's cache) outside the timers."""
    import topology as tp
    f = np.random.default_rng(0).random(8 * 8 * 8)
    for g in (tp.Grid((8, 8, 8), comm), tp.Grid((8, 8, 8), comm, virtual=2)):
        tp.critical_points(g, f)
        tp.persistence_diagram(g, f)


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def run_case(comm, args) -> dict:
    from mpi4py import MPI

    import topology as tp
    n = args.case_n
    warm_up(comm)
    probe = Probe()
    kw = {}
    if args.case_virtual:
        kw["virtual"] = args.case_virtual
    if args.case_budget:
        kw["memory_budget"] = args.case_budget
    if kw:
        kw["spill_dir"] = args.workdir
    grid = tp.Grid((n, n, n), comm, **kw)
    raw = tp.RawField(args.raw, (n, n, n), "float32")
    slab = max(b - a for a, b in grid.virtual_slabs) + 2     # a turn's planes, ghosts included
    out = {"n": n, "ranks": comm.Get_size(), "virtual": grid.virtual,
           "turn_vertices": int(comm.allreduce(slab, op=MPI.MAX)) * n * n,
           "budget_bytes": grid.memory_budget, "phases": {}}
    results = {}
    for phase, fn in (("critical points", tp.critical_points),
                      ("diagram", tp.persistence_diagram)):
        probe.reset()
        comm.Barrier()
        reset_peak()
        start = peak_mib("VmRSS")
        t = time.perf_counter()
        results[phase] = fn(grid, raw)
        seconds = time.perf_counter() - t
        rss = peak_mib()
        comm.Barrier()
        split = probe.split()
        keys = sorted(set().union(*comm.allgather(sorted(split))))
        local = np.array([split.get(k, 0.0) for k in keys] + [seconds])
        worst = np.empty_like(local)
        comm.Allreduce(local, worst, op=MPI.MAX)
        steps = comm.allgather(probe.steps)
        out["phases"][phase] = {
            "seconds": float(worst[-1]), "peak_rss_mib_per_rank": comm.allgather(rss),
            "start_rss_mib_per_rank": comm.allgather(start),
            "split_seconds_max": dict(zip(keys, map(float, worst[:-1]))),
            "raw_read_bytes": int(comm.allreduce(probe.raw_bytes)),
            # per superstep, per rank: (label, io_read, io_written, touched, work, sync)
            "supersteps": [[list(r[i]) for r in steps] for i in range(len(steps[0]))]
            if steps and steps[0] else []}
    cp, dg = results["critical points"], results["diagram"]
    out["critical_counts"] = cp.counts()
    out["report"] = {str(d): r for d, r in dg.report.items()}
    out["missing"] = dg.missing
    if not args.no_check:
        ids, types = cp.gather()
        g = dg.gather(root=0)
        if comm.Get_rank() == 0:
            out["hash"] = {"critical": digest(ids) + digest(types)}
            rawp = g.raw_pairs
            for d in range(4):
                m = rawp["dim"] == d
                out["hash"]["D%d" % d] = "".join(digest(rawp[k][m]) for k in sorted(rawp))
    return out


# -- the driver -------------------------------------------------------------------------------------
def launch(size: int, argv: list[str], timeout: float) -> dict:
    """This script as a fresh ``mpiexec -n size`` launch; its JSON result."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "HYDRA_", "MPIR_", "MPICH_", "OMPI_"))}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(size), sys.executable,
           "-m", "mpi4py", str(Path(__file__).resolve()), "--case-json", path] + argv
    try:
        t = time.perf_counter()
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout)
        wall = time.perf_counter() - t
        if p.returncode != 0:
            tail = (p.stderr or "").strip().splitlines()[-3:] or ["exit %d" % p.returncode]
            return {"error": "failed (%s)" % " | ".join(tail)[:400]}
        res = json.loads(Path(path).read_text())
        res["launch_seconds"] = wall
        return res
    except subprocess.TimeoutExpired:
        return {"error": "stopped after %.0f s" % timeout}
    finally:
        os.remove(path)


def min_budget(n: int, size: int, v: int) -> int:
    """The smallest memory budget a Grid of n^3 at ``size`` ranks takes with
    ``virtual=v`` (topology.domains.OutOfCoreGrid), rounded up to MiB."""
    from topology.domains import OUT_OF_CORE_BYTES_PER_VERTEX
    most = -(-n // size)
    need = 2 * (-(-most // v) + 2) * n * n * OUT_OF_CORE_BYTES_PER_VERTEX
    return int(math.ceil(need / MIB) * MIB)


def main(comm, args) -> dict:
    from dmsolve.bsp import parse_bytes
    size, rank = comm.Get_size(), comm.Get_rank()
    budget = parse_bytes(args.budget)
    cases = {}
    if rank == 0:
        os.makedirs(args.workdir, exist_ok=True)
        raws = {}
        for n in sorted({args.n, args.check_n}):
            raws[n] = os.path.join(args.workdir, "outofcore-field-%d.raw" % n)
            if not (args.keep_raw and os.path.exists(raws[n])):
                s = write_field(raws[n], n)
                print("field %d^3 written in %.1f s" % (n, s), flush=True)
        # ties in the compared field (the raw pairs include their zero-persistence pairs)
        vals = np.sort(np.fromfile(raws[args.check_n], dtype=np.float32))
        same = vals[1:] == vals[:-1]
        tied = np.zeros(vals.size, bool)
        tied[1:] |= same
        tied[:-1] |= same
        ties = int(np.count_nonzero(tied))
        del vals, same, tied
        base = ["--workdir", args.workdir] + (["--no-check"] if args.no_check else [])
        # the time comparison alternates, best of --repeats, as the machine's load drifts
        plan = [("memory", args.check_n, None, None),
                ("budget", args.check_n, None, budget)] * args.repeats
        plan += [("v%d" % v, args.check_n, v, max(budget, min_budget(args.check_n, size, v)))
                 for v in args.virtual]
        sv = args.spill_virtual
        if sv and sv <= args.check_n // size:
            plan.append(("v%d spilling" % sv, args.check_n, sv,
                         min_budget(args.check_n, size, sv)))
        plan.append(("large", args.n, None, budget))
        for name, n, v, b in plan:
            argv = base + ["--case-n", str(n), "--raw", raws[n]]
            if v:
                argv += ["--case-virtual", str(v)]
            if b:
                argv += ["--case-budget", str(b)]
            if name == "large" and args.n > args.check_n:
                argv.append("--no-check")
            got = launch(size, argv, args.timeout)
            print(name, _brief(got), flush=True)
            old = cases.get(name)
            if old is not None and "error" not in old:
                runs = old["runs_seconds"] + [total_time(got) if "error" not in got else None]
                if "error" in got or total_time(old) <= total_time(got):
                    got = old
                got["runs_seconds"] = runs
            elif "error" not in got:
                got["runs_seconds"] = [total_time(got)]
            cases[name] = got
        if not args.keep_raw:
            for p in raws.values():
                os.remove(p)
    _idle_wait(comm)
    cases = comm.bcast(cases, root=0)
    res = {"ranks": size, "n": args.n, "check_n": args.check_n, "budget": args.budget,
           "code": comm.bcast(_provenance.code(str(ROOT)) if rank == 0 else None, root=0),
           "cases": cases, "tied_vertices": comm.bcast(ties if rank == 0 else None, root=0)}
    if rank == 0:
        res["markdown"] = markdown(res, args)
        print(res["markdown"])
    return res


def _idle_wait(comm):
    """Wait for rank 0 without a spinning barrier (it runs the launches)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.05)


def _brief(c) -> str:
    if "error" in c:
        return c["error"]
    return ", ".join("%s %.2f s, peak %s MiB" % (k, p["seconds"], "/".join(
        "%.0f" % r for r in p["peak_rss_mib_per_rank"])) for k, p in c["phases"].items())


# -- the report -------------------------------------------------------------------------------------
def io_rows(case) -> list:
    """Per superstep: (phase, label, io_read, io_written, touched, ratio), the
    byte figures of the rank with the largest ratio."""
    rows = []
    for phase, p in case["phases"].items():
        for per_rank in p["supersteps"]:
            worst = max(per_rank, key=lambda r: (r[1] + r[2]) / max(r[3], 1))
            rows.append((phase, worst[0], worst[1], worst[2], worst[3],
                         (worst[1] + worst[2]) / max(worst[3], 1)))
    return rows


def total_time(case, no_d1=False) -> float:
    t = sum(p["seconds"] for p in case["phases"].values())
    if no_d1:
        t -= case["phases"]["diagram"]["split_seconds_max"].get("D1 (in memory)", 0.0)
    return t


def _split_text(p) -> str:
    s = dict(p["split_seconds_max"])
    order = ["raw read", "sort slab", "classify", "sweeps", "glue", "spill read",
             "spill write", "exchange (sync)", "D1 (in memory)", "diagram sort"]
    parts = ["%s %.1f" % (k, s[k]) for k in order if s.get(k, 0.0) >= 0.05]
    return ", ".join(parts) or "-"


def _same(case, ref) -> str:
    if "hash" not in case or "hash" not in ref:
        return "not checked"
    dims = [k for k in ("critical", "D0", "D1", "D2", "D3") if k in case["hash"]]
    missing_d1 = bool(case.get("missing"))
    bad = [k for k in dims if not (missing_d1 and k == "D1") and case["hash"][k] != ref["hash"][k]]
    checked = [k for k in dims if not (missing_d1 and k == "D1") and k != "D3"]
    return ("yes (%s)" % ", ".join(checked)) if not bad else "NO: %s differ" % ", ".join(bad)


def markdown(res, args) -> str:
    cases = res["cases"]
    size = res["ranks"]
    lines = [
        "Critical points and persistence diagram of a %d^3 raw float32 field (smooth sines and "
        "Gaussians plus uniform noise of 0.002, written plane block by plane block) at %d ranks "
        "under memory_budget=%s, and of the same field at %d^3 (%d vertices share their value "
        "with another) in memory, out of core under the same budget, and at virtual = %s with "
        "the smallest budget each allows (at least the budget), and at virtual = %d with the "
        "smallest budget it allows (so that states and messages spill); each case in its own mpiexec launch, peak RSS per "
        "rank from VmHWM after a reset of /proc/self/clear_refs before each phase, time ratios "
        "against the in-memory case of the same run (the in-memory and budget cases launched "
        "alternately, %d times each, the faster kept; the in-memory D1 taken off where the "
        "out-of-core diagram lists D1 as missing). Spill I/O from the BSP ledger (io_read, io_written); "
        "'touched' per superstep and rank = each virtual processor's state at the larger of "
        "its size before and after its turn + the messages it received + the messages "
        "delivered to the rank's processors. Targets: peak RSS <= 1 GiB per rank "
        "at %d^3; the same answers; (read + written) / touched <= 2; out of core <= 3x in "
        "memory at %d^3." % (res["n"], size, res["budget"], res["check_n"],
                             res.get("tied_vertices", -1),
                             ", ".join(str(v) for v in args.virtual), args.spill_virtual,
                             args.repeats, res["n"], res["check_n"]), ""]
    ok = [k for k, c in cases.items() if "error" not in c]
    for k, c in cases.items():
        if "error" in c:
            lines.append("Case %s not measured: %s." % (k, c["error"]))
    mem = cases.get("memory", {})
    verdicts = []
    large = cases.get("large", {})
    if "error" not in large and large:
        worst_rss = max(max(p["peak_rss_mib_per_rank"]) for p in large["phases"].values())
        verdicts.append("Large field: peak RSS %.0f MiB per rank at most (target <= 1024 "
                        "MiB: %s)." % (worst_rss, "met" if worst_rss <= 1024 else "missed"))
    if "error" not in mem and mem and "budget" in ok:
        r = total_time(cases["budget"]) / total_time(mem, no_d1=True)
        verdicts.append("Time at %d^3: out of core %.2fx the in-memory run without its D1 "
                        "(target <= 3x: %s), %.2fx the whole in-memory run (seconds of the "
                        "launches: in memory %s, out of core %s)." % (
                            res["check_n"], r, "met" if r <= 3 else "missed",
                            total_time(cases["budget"]) / total_time(mem),
                            ", ".join("%.1f" % t for t in mem["runs_seconds"] if t),
                            ", ".join("%.1f" % t for t in cases["budget"]["runs_seconds"] if t)))
        sames = [_same(cases[k], mem) for k in ok if k not in ("memory", "large")]
        verdicts.append("Same answers as in memory at %d^3 (%s): %s." % (
            res["check_n"], ", ".join(k for k in ok if k not in ("memory", "large")),
            "yes" if all(s.startswith("yes") for s in sames) else "NO"))
    ratios = [r[5] for k in ok for r in io_rows(cases[k])]
    if ratios:
        verdicts.append("I/O: spill bytes per superstep at most %.2fx the bytes touched "
                        "(target <= 2x: %s)." % (max(ratios), "met" if max(ratios) <= 2 else
                                                  "missed"))
    lines.append(" ".join(verdicts))
    lines += ["", "| case | grid | virtual / budget | phase | seconds | vs in memory | "
              "peak RSS per rank MiB | where the time goes (s, slowest rank) | raw file read "
              "MiB | spill read / written MiB (sum over supersteps, largest rank) | same answers |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in ok:
        c = cases[k]
        vb = "in memory" if c["virtual"] is None else "%d / %s" % (
            c["virtual"], "none" if c["budget_bytes"] is None else
            "%.0f MiB" % (c["budget_bytes"] / MIB))
        for phase, p in c["phases"].items():
            ref = mem.get("phases", {}).get(phase) if "error" not in mem else None
            rel = "-"
            if ref and k != "memory" and c["n"] == mem["n"]:
                t_ref = ref["seconds"] - (ref["split_seconds_max"].get("D1 (in memory)", 0.0)
                                          if c["missing"] and phase == "diagram" else 0.0)
                rel = "%.2fx" % (p["seconds"] / t_ref)
            steps = p["supersteps"]
            rd = sum(max(r[1] for r in s) for s in steps) / MIB if steps else 0.0
            wr = sum(max(r[2] for r in s) for s in steps) / MIB if steps else 0.0
            same = _same(c, mem) if (phase == "diagram" and k != "memory" and "error" not in mem
                                     and mem and c["n"] == mem["n"]) else ""
            lines.append("| %s | %d^3 | %s | %s%s | %.2f | %s | %s | %s | %.1f | %.1f / %.1f | %s |"
                         % (k, c["n"], vb, phase, " (D1 missing)" if phase == "diagram" and
                            c["missing"] else "", p["seconds"], rel,
                            " / ".join("%.0f" % r for r in p["peak_rss_mib_per_rank"]),
                            _split_text(p), p["raw_read_bytes"] / MIB, rd, wr, same))
    if "large" in ok:
        lines += ["", "Spill I/O of the large case per superstep (the rank with the largest "
                  "ratio; touched = states at their larger of before/after the turn + messages "
                  "received + messages delivered):", "",
                  "| phase | superstep | io read MiB | io written MiB | touched MiB | "
                  "(read + written) / touched |", "|---|---|---|---|---|---|"]
        for phase, lab, rd, wr, tch, r in io_rows(cases["large"]):
            lines.append("| %s | %s | %.1f | %.1f | %.1f | %.2f |" % (
                phase, lab, rd / MIB, wr / MIB, tch / MIB, r))
        c = cases["large"]
        per_turn = ["%s %.0f" % (ph, max(
            (pk - st) * MIB / c["turn_vertices"] for pk, st in
            zip(p["peak_rss_mib_per_rank"], p["start_rss_mib_per_rank"])))
            for ph, p in c["phases"].items()]
        lines += ["", "Large case: %d^3 = %d vertices, %d virtual processors per rank, %d "
                  "vertices per turn (a slab and its ghost planes); critical points %s; pairs "
                  "%s; missing: %s. Peak RSS above the phase's start per vertex of a turn "
                  "(bytes; the diagram's includes the staged states and messages up to the "
                  "budget): %s (topology.domains.OUT_OF_CORE_BYTES_PER_VERTEX sizes the turns "
                  "for 160)." % (
                      c["n"], c["n"] ** 3, c["virtual"], c["turn_vertices"],
                      c["critical_counts"],
                      {d: r["pairs"] + r["essential"] for d, r in c["report"].items()},
                      "; ".join(c["missing"]) or "none", ", ".join(per_turn))]
    return "\n".join(lines)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=512, help="the large field's side")
    p.add_argument("--check-n", type=int, default=256,
                   help="side of the field compared with the in-memory run")
    p.add_argument("--budget", default="512MiB", help="memory_budget of the out-of-core runs")
    p.add_argument("--virtual", type=int, nargs="+", default=[1, 2, 8],
                   help="virtual processors per rank of the answer checks")
    p.add_argument("--spill-virtual", type=int, default=32,
                   help="one more answer check at this virtual and the smallest budget it "
                        "allows, so that the states and messages spill (0: none)")
    p.add_argument("--repeats", type=int, default=2,
                   help="launches of the in-memory and budget cases, alternating (best kept)")
    p.add_argument("--workdir", default=tempfile.gettempdir(),
                   help="where the raw fields and the spill files go")
    p.add_argument("--keep-raw", action="store_true",
                   help="reuse raw files left by an earlier run, and keep them")
    p.add_argument("--no-check", action="store_true", help="skip the answer hashes")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per case")
    p.add_argument("--json", default=None, help="write results here (rank 0)")
    p.add_argument("--case-json", help=argparse.SUPPRESS)
    p.add_argument("--case-n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--case-virtual", type=int, help=argparse.SUPPRESS)
    p.add_argument("--case-budget", type=int, help=argparse.SUPPRESS)
    p.add_argument("--raw", help=argparse.SUPPRESS)
    args = p.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if args.case_json:
        res = run_case(comm, args)
        if comm.Get_rank() == 0:
            Path(args.case_json).write_text(json.dumps(res, default=float))
    else:
        res = main(comm, args)
        if comm.Get_rank() == 0 and args.json:
            os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
            with open(args.json, "w") as fh:
                json.dump(res, fh, indent=1, default=float)
