"""A stopwatch that leaves numba's compilation out: set-up and solve
timings measure the work, not the first run's just-in-time compilation.

Numba announces every compilation (not a load from its on-disk cache) as a
``"numba:compile"`` event (:mod:`numba.core.event`); one listener adds up
their durations for this process. numba is not imported with dmsolve
(:mod:`dmsolve.jit`): a kernel's first call imports it, and that import is
left out with the compilations; the listener is registered then or, if the
caller imported numba itself, when a stopwatch is made or read.
"""

from __future__ import annotations

import time

from . import jit

__all__ = ["Stopwatch", "compile_seconds"]


class _CompileClock:
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


def _listen() -> None:
    """Register the clock with numba's events (numba wants a subclass of
    its ``Listener``, so the class is made now that numba is here)."""
    event = jit.load().core.event

    class Listener(event.Listener):
        def on_start(self, ev):
            _clock.on_start(ev)

        def on_end(self, ev):
            _clock.on_end(ev)

    event.register("numba:compile", Listener())


jit.when_loaded(_listen)


def compile_seconds() -> float:
    """Seconds numba has spent compiling in this process since dmsolve was
    imported (since numba was, if that was later), and importing itself
    at a kernel's first call. Not collective."""
    jit.loaded()                # registers the clock if the caller imported numba
    return _clock.total + jit.load_seconds()


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
