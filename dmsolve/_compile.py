"""A stopwatch that leaves numba's compilation out: set-up and solve
timings measure the work, not the first run's just-in-time compilation.

Numba announces every compilation (not a load from its on-disk cache) as a
``"numba:compile"`` event (:mod:`numba.core.event`); one listener, installed
when this module is imported, adds up their durations for this process.
"""

from __future__ import annotations

import time

from numba.core import event

__all__ = ["Stopwatch", "compile_seconds"]


class _CompileClock(event.Listener):
    """Seconds spent in numba compilations. Compilations nest (a jitted
    function compiles its callees): only the outermost one is timed."""

    def __init__(self):
        self.total = 0.0
        self._depth = 0
        self._t0 = 0.0

    def on_start(self, ev):
        if self._depth == 0:
            self._t0 = time.perf_counter()
        self._depth += 1

    def on_end(self, ev):
        self._depth -= 1
        if self._depth == 0:
            self.total += time.perf_counter() - self._t0


_clock = _CompileClock()
event.register("numba:compile", _clock)


def compile_seconds() -> float:
    """Seconds numba has spent compiling in this process since dmsolve was
    imported. Not collective."""
    return _clock.total


class Stopwatch:
    """Wall-clock time split into numba compilation and the rest.

    ::

        watch = Stopwatch()
        ...                           # work that may compile kernels
        work, compiling = watch.split()

    Not collective: each rank times itself.
    """

    def __init__(self):
        self._c0 = compile_seconds()
        self._t0 = time.perf_counter()

    def split(self) -> tuple[float, float]:
        """``(seconds without compilation, seconds compiling)`` since the
        stopwatch was made. Not collective."""
        t = time.perf_counter() - self._t0
        c = compile_seconds() - self._c0
        c = min(max(c, 0.0), t)
        return t - c, c

    def seconds(self) -> float:
        """Seconds since the stopwatch was made, compilation left out. Not collective."""
        return self.split()[0]
