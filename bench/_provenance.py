"""Where a benchmark's figures come from: the commit measured and the machine.

Every script that writes results into docs/ records both at the top of what
it writes, so that a figure can be read against the code and CPU behind it.
"""

from __future__ import annotations

import os
import platform
import subprocess

#: The folders whose uncommitted changes make a measurement "dirty": the code
#: measured and the scripts measuring it (docs/ only receives the results).
MEASURED = ("dmsolve", "preconditioners", "topology", "bench")


def _git(where: str, *args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", where, *args], capture_output=True, text=True)
    except OSError:
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def code(where: str) -> dict:
    """The commit of the checkout at ``where`` and whether the code measured
    differs from it. Not collective.

    ``commit`` is ``git describe --always`` (a short hash when there is no
    tag), ``None`` outside a git checkout; ``dirty`` says whether any of
    :data:`MEASURED` has uncommitted changes.
    """
    commit = _git(where, "describe", "--always", "--abbrev=7") or None
    dirty = bool(_git(where, "status", "--porcelain", "--", *MEASURED)) if commit else None
    return {"commit": commit, "dirty": dirty}


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _lscpu("Model name") or platform.processor() or None


def _lscpu(field: str) -> str | None:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def _l3_size() -> str | None:
    # sysfs names each cache level of cpu0; lscpu is the fallback
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(base)):
            with open(os.path.join(base, index, "level")) as f:
                if f.read().strip() != "3":
                    continue
            with open(os.path.join(base, index, "size")) as f:
                size = f.read().strip()
            if size.endswith("K") and int(size[:-1]) % 1024 == 0:
                return "%d MiB" % (int(size[:-1]) // 1024)
            return size.replace("K", " KiB")
    except (OSError, ValueError):
        pass
    l3 = _lscpu("L3 cache")
    return l3.split(" (")[0] if l3 else None


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            return round(int(f.readline().split()[1]) / 2 ** 20)
    except (OSError, ValueError, IndexError):
        return None


def machine() -> dict:
    """The CPU model, cores, L3 size, memory and software versions of this
    machine. Not collective (no MPI call but the library's version string)."""
    import mpi4py
    import numpy
    import scipy
    from mpi4py import MPI
    return {"cpu": _cpu_model(), "cores": os.cpu_count(), "l3": _l3_size(),
            "memory_gib": _memory_gib(), "python": platform.python_version(),
            "numpy": numpy.__version__, "scipy": scipy.__version__,
            "mpi4py": mpi4py.__version__,
            "mpi": " ".join(MPI.Get_library_version().splitlines()[0].split())}


def code_text(info: dict | None) -> str:
    """``commit 1a2b3c4`` (with ``, plus uncommitted changes`` when dirty)."""
    if not info or not info.get("commit"):
        return "commit not recorded"
    return "commit %s%s" % (info["commit"],
                            ", plus uncommitted changes" if info.get("dirty") else "")


def machine_text(info: dict | None) -> str:
    """One line: CPU, cores, L3, memory; then the software versions."""
    if not info:
        return "machine not recorded"
    hw = [info.get("cpu") or "CPU not recorded",
          "%s cores" % info["cores"] if info.get("cores") else None,
          "L3 %s" % info["l3"] if info.get("l3") else "L3 not recorded",
          "%s GiB RAM" % info["memory_gib"] if info.get("memory_gib") else None]
    sw = ["%s %s" % (name, info[key]) for name, key in
          (("Python", "python"), ("numpy", "numpy"), ("scipy", "scipy"),
           ("mpi4py", "mpi4py")) if info.get(key)]
    if info.get("mpi"):
        sw.append(info["mpi"])
    return ", ".join(x for x in hw if x) + ("; " + ", ".join(sw) if sw else "")


def header(columns: dict[str, dict], machine_info: dict, date: str) -> list[str]:
    """Markdown bullets for the top of a results page: the date, the code of
    each column measured (name -> :func:`code`) and the machine."""
    lines = ["- Date: %s." % date]
    if len(columns) == 1:
        lines.append("- Code measured: %s." % code_text(next(iter(columns.values()))))
    else:
        lines += ["- Code measured, %s: %s." % (name, code_text(info))
                  for name, info in columns.items()]
    lines.append("- Machine: %s." % machine_text(machine_info))
    return lines
