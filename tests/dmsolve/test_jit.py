"""dmsolve.jit: kernels made on their first call. A kernel gives the Python
function's results, keeps the attributes numba's dispatchers have, compiles
in nopython mode when it calls other lazy kernels (through its module's
globals or a module attribute) and numba names taken with numba_attribute;
numba is not imported before the first call, and then the compile-time clock
counts the compilation and numba's import, NUMBA_BOUNDSCHECK applies and
the on-disk cache serves a second process."""

import subprocess
import sys
import textwrap
import types

import numpy as np
from mpi4py import MPI

from dmsolve.jit import Kernel, is_kernel, njit
from mpitest import Checks, assert_collective, child_env, on_rank0

COMM = MPI.COMM_WORLD

# two modules of kernels: ``b`` calls ``a``'s kernels through a module attribute,
# ``a``'s kernels call each other through the globals, one inlined
SOURCE_A = '''
import numpy as np
from dmsolve.jit import njit, numba_attribute

types = numba_attribute("numba", "types")
List = numba_attribute("numba.typed", "List")

@njit(cache=False, inline="always")
def twice(x):
    return 2.0 * x

@njit(cache=False)
def doubled_sum(a):
    """Twice the sum of ``a``."""
    s = 0.0
    for v in a:
        s += twice(v)
    return s

@njit(cache=False)
def counted(n):
    out = List.empty_list(types.int64)
    for i in range(n):
        out.append(i)
    return len(out)
'''

SOURCE_B = '''
from dmsolve.jit import njit
import {a} as a

@njit(cache=False)
def through_module(x):
    return a.doubled_sum(x) + a.twice(1.0)
'''

# plain Python that calls a kernel by the name it imported
SOURCE_C = '''
from {a} import counted

def count_by_name(n):
    return counted(n)
'''


def _modules(tag: str):
    """Fresh modules built from SOURCE_A, SOURCE_B and SOURCE_C (names
    unique per test)."""
    made = []
    a = "_jit_case_a_" + tag
    for name, source in ((a, SOURCE_A), ("_jit_case_b_" + tag, SOURCE_B.format(a=a)),
                         ("_jit_case_c_" + tag, SOURCE_C.format(a=a))):
        module = types.ModuleType(name)
        sys.modules[name] = module
        exec(compile(textwrap.dedent(source), "<%s>" % name, "exec"), vars(module))
        made.append(module)
    return made


def test_a_kernel_is_made_on_its_first_call():
    """Until its first call a kernel is the Python function and its options;
    the call makes the dispatcher, whose attributes it then answers."""
    def add(x, y):
        """x plus y."""
        return x + y

    k = njit(cache=False, nogil=True)(add)
    made_before = "not made yet" in repr(k)
    result = k(2.0, 3.5)
    with Checks(COMM) as checks:
        checks.add(isinstance(k, Kernel) and is_kernel(k), "a Kernel")
        checks.add(made_before and "not made yet" not in repr(k), "made by the first call", repr(k))
        checks.add(k.py_func is add and k.__name__ == "add" and k.__doc__ == "x plus y.",
                   "the function's name, docstring and py_func")
        checks.add(result == 5.5, "the function's result", result)
        checks.add(k.targetoptions.get("nogil") is True and len(k.signatures) == 1,
                   "numba's options and signatures", (k.targetoptions, k.signatures))
        checks.add(is_kernel(k.dispatcher) and not is_kernel(add), "is_kernel of the dispatcher")


def test_kernels_calling_kernels_compile_in_nopython_mode():
    """A kernel calling lazy kernels (by name, inlined, through a module
    attribute) and numba names compiles in nopython mode, gives the
    Python results, and its module's globals then hold the dispatchers, as
    do those of a module that called a kernel by its imported name."""
    a, b, c = _modules("nopython")
    x = np.arange(7.0)
    got = b.through_module(x)
    lazy_before = isinstance(c.counted, Kernel)
    n = c.count_by_name(5)
    with Checks(COMM) as checks:
        checks.add(got == 2.0 * x.sum() + 2.0, "kernels calling kernels", got)
        checks.add(n == 5, "a typed List of numba types in a kernel", n)
        checks.add(len(b.through_module.nopython_signatures) == 1, "compiled in nopython mode")
        checks.add(not isinstance(a.doubled_sum, Kernel) and is_kernel(a.doubled_sum),
                   "the globals hold dispatchers", type(a.doubled_sum))
        checks.add(a.types.__name__ == "numba.core.types" and hasattr(a.List, "empty_list"),
                   "and numba's own names", (a.types, a.List))
        checks.add(lazy_before and is_kernel(c.counted) and not isinstance(c.counted, Kernel),
                   "a module that called a kernel by its imported name holds the dispatcher",
                   type(c.counted))


def test_a_bare_njit_and_a_method():
    """``@njit`` without options makes a kernel too, and a kernel stored on a
    class binds as a method, as numba's dispatchers do."""
    @njit
    def scaled(x, y):
        return 3.0 * x + y

    class Holder:
        method = scaled

    holder = Holder()
    bound = holder.method
    with Checks(COMM) as checks:
        checks.add(isinstance(scaled, Kernel) and scaled.options == {}, "a kernel, no options")
        checks.add(scaled(2.0, 1.0) == 7.0, "called", scaled(2.0, 1.0))
        checks.add(Holder.method is scaled, "unbound on the class")
        checks.add(bound.__func__ is scaled and bound.__self__ is holder, "bound on an instance")


def _child(code: str, env_extra: dict | None = None):
    """Run ``python -c code`` in a fresh process on rank 0; ``(returncode,
    output)`` on every rank."""
    def run():
        env = child_env()
        env.update(env_extra or {})
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=300, env=env)
        return proc.returncode, proc.stdout + proc.stderr
    return on_rank0(COMM, run)


KERNEL_FILE = '''
from dmsolve.jit import njit

@njit(cache=True)
def head(a, i):
    return a[i]
'''


def test_numba_loads_on_the_first_call_and_the_clock_counts_it(tmp_path):
    """In a fresh process a module of kernels imports no numba; the first
    call loads it and the compile-time clock counts the compilation and the
    import; a second process loads the kernel from numba's on-disk cache."""
    path = on_rank0(COMM, lambda: _write(tmp_path, "kernels_on_disk.py", KERNEL_FILE))
    code = '''
        import sys
        import numpy as np
        sys.path.insert(0, %r)
        import kernels_on_disk
        from dmsolve import jit
        from dmsolve._compile import Stopwatch
        loaded = "numba" in sys.modules
        watch = Stopwatch()
        value = kernels_on_disk.head(np.arange(4.0), 2)
        work, compiling = watch.split()
        print("loaded-before", loaded, "value", value, "compiled", compiling > jit.load_seconds(),
              "after", "numba" in sys.modules, "import counted",
              compiling >= jit.load_seconds() > 0)
    ''' % path
    first = _child(code)
    second = _child(code)
    assert_collective(COMM, first[0] == 0 and "loaded-before False value 2.0 compiled True "
                      "after True import counted True" in first[1], first[1])
    assert_collective(COMM, second[0] == 0 and "value 2.0 compiled False" in second[1]
                      and "import counted True" in second[1],
                      "the second process compiled again: %s" % second[1])


def _write(directory, name: str, text: str) -> str:
    (directory / name).write_text(text)
    return str(directory)


def test_numba_boundscheck_applies_to_lazy_kernels(tmp_path):
    """Under NUMBA_BOUNDSCHECK=1 (and its own NUMBA_CACHE_DIR) a lazy kernel
    checks its indices: reading past the end raises IndexError."""
    path = on_rank0(COMM, lambda: _write(tmp_path, "kernels_checked.py", KERNEL_FILE))
    code, out = _child('''
        import sys
        import numpy as np
        sys.path.insert(0, %r)
        import kernels_checked
        try:
            kernels_checked.head(np.arange(4.0), 10)
            print("no check")
        except IndexError:
            print("IndexError raised")
    ''' % path, {"NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "cache")})
    assert_collective(COMM, code == 0 and "IndexError raised" in out, out)
