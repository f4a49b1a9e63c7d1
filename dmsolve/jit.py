"""numba kernels made on their first call: importing the packages loads no
numba (about 55 MiB and 0.1 s), a process loads it when it first runs a kernel.

The packages' kernels are declared with this module's :func:`njit` instead of
numba's, with the same options (``@njit(cache=True, nogil=True)``). The
decorator returns a :class:`Kernel`: the Python function and its options.
Its first call imports numba, makes the numba dispatcher
(``numba.njit(**options)(func)``, so numba's on-disk cache, ``NUMBA_CACHE_DIR``
and ``NUMBA_BOUNDSCHECK`` apply as to any numba function) and calls it. A
call from a module that imported the kernel by its name leaves the dispatcher
under that name, so that module's later calls go straight to numba (as do
those of the kernel's own module, below). Any other attribute
(``signatures``, ``targetoptions``, ``stats``, ...) is the dispatcher's.

numba compiles a kernel that calls other kernels by reading the globals of
its module, and it can compile only numba objects. So when a kernel is made,
every lazy entry of its module's globals is replaced by the real object: other
kernels by their dispatchers (made in turn, not compiled) and the numba names
a module takes with :func:`numba_attribute` (``types``, ``typed.List``, an
intrinsic) by themselves. A kernel reached another way (a module's attribute)
is typed by numba through its ``_numba_type_``, the dispatcher's.

The one place where the packages import numba is :func:`load`; code that
must act when numba arrives (the compile-time stopwatch of ``dmsolve``)
registers with :func:`when_loaded`.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import time
import types

__all__ = ["njit", "Kernel", "numba_attribute", "load", "load_seconds", "loaded",
           "when_loaded", "is_kernel"]

_lock = threading.RLock()
_hooks: list = []
_load_seconds = 0.0


def load() -> types.ModuleType:
    """numba, imported on the first call, with the :func:`when_loaded`
    hooks run once. Not collective."""
    global _load_seconds
    with _lock:
        fresh = "numba" not in sys.modules
        t0 = time.perf_counter()
        import numba
        if fresh:
            _load_seconds = time.perf_counter() - t0
        _run_hooks()
        return numba


def load_seconds() -> float:
    """Seconds :func:`load` spent importing numba in this process (0 if
    numba was imported by someone else, or not yet). Not collective."""
    return _load_seconds


def when_loaded(hook) -> None:
    """Call ``hook()`` once numba is imported: now if it is, else when
    :func:`load` imports it (or :func:`loaded` finds it imported by someone
    else). Not collective."""
    with _lock:
        _hooks.append(hook)
        if "numba" in sys.modules:
            _run_hooks()


def loaded() -> bool:
    """Whether numba has been imported in this process (by a kernel or by
    anyone); the :func:`when_loaded` hooks have run if so. Not collective."""
    if "numba" not in sys.modules:
        return False
    with _lock:
        _run_hooks()
    return True


def _run_hooks() -> None:
    while _hooks:
        _hooks.pop(0)()


def njit(*args, **options):
    """numba's ``njit`` made on the first call: ``@njit(cache=True, ...)``
    (or bare ``@njit``) turns a function into a :class:`Kernel` with these
    options. Not collective."""
    if args and callable(args[0]) and len(args) == 1 and not options:
        return Kernel(args[0], {})
    if args:
        raise TypeError("njit takes its options by keyword (no signatures)")
    return functools.partial(Kernel, options=options)


class Kernel:
    """A numba kernel made on its first call (see the module's docstring).

    Parameters
    ----------
    py_func : function
        The Python function, as numba's dispatchers name it.
    options : dict
        The keyword arguments of ``numba.njit``.

    Not collective.
    """

    def __init__(self, py_func, options: dict):
        functools.update_wrapper(self, py_func)
        self.py_func = py_func
        self.options = dict(options)
        self._dispatcher = None

    @property
    def dispatcher(self):
        """The numba dispatcher (made, not compiled, on first use). Not collective."""
        d = self._dispatcher
        return d if d is not None else self._make()

    def _make(self):
        with _lock:
            if self._dispatcher is None:
                numba = load()
                self._dispatcher = numba.njit(**self.options)(self.py_func)
                _resolve_globals(self.py_func.__globals__)
            return self._dispatcher

    def __call__(self, *args, **kwargs):
        d = self._dispatcher
        if d is None:
            d = self._make()
        # a module that imported the kernel by its name calls the dispatcher
        # itself from now on, as its own module does (no wrapper per call)
        namespace = sys._getframe(1).f_globals
        if namespace.get(self.__name__) is self:
            namespace[self.__name__] = d
        return d(*args, **kwargs)

    def __getattr__(self, name):
        # only names the instance lacks reach here: the dispatcher's
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __get__(self, obj, objtype=None):
        # bound as a method, as numba's dispatchers and plain functions are
        return self if obj is None else types.MethodType(self, obj)

    @property
    def _numba_type_(self):
        return self.dispatcher._numba_type_

    def __repr__(self) -> str:
        state = "made" if self._dispatcher is not None else "not made yet"
        return "<numba kernel %s.%s (%s)>" % (self.__module__, self.__qualname__, state)


class numba_attribute:  # noqa: N801 - named as the function it stands for
    """A name of numba (``numba_attribute("numba.typed", "List")``) imported
    on first use: an attribute read or a call goes to the real object, and
    a kernel of the module that holds it sees the real object. Not collective."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name
        self._value = None

    def resolve(self):
        """The real object (importing numba). Not collective."""
        if self._value is None:
            load()
            self._value = getattr(importlib.import_module(self.module), self.name)
        return self._value

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return "<%s.%s, imported on first use>" % (self.module, self.name)


def _resolve_globals(namespace: dict) -> None:
    """Replace every lazy kernel and numba name in ``namespace`` (a module's
    globals) by the real object, so that numba can compile the kernels
    that read it. Not collective."""
    for name, value in list(namespace.items()):
        if isinstance(value, Kernel):
            namespace[name] = value.dispatcher
        elif isinstance(value, numba_attribute):
            namespace[name] = value.resolve()


def is_kernel(obj) -> bool:
    """Whether ``obj`` is a numba kernel: a :class:`Kernel` or a numba
    dispatcher (without importing numba if it is not loaded). Not collective."""
    if isinstance(obj, Kernel):
        return True
    if "numba" not in sys.modules:
        return False
    from numba.core.registry import CPUDispatcher
    return isinstance(obj, CPUDispatcher)
