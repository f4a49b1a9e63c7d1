"""The local sorting primitives of dmsolve.bsp (``sorted_unique``,
``stable_argsort``, ``search_sorted``, ``isin_sorted``) give numpy's answers
exactly, on both their fast paths and their general ones."""

import numpy as np
import pytest
from mpi4py import MPI

from dmsolve.bsp import isin_sorted, search_sorted, sorted_unique, stable_argsort
from mpitest import Checks

pytestmark = pytest.mark.timeout(60)
COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("kind", ["int64", "int32", "uint8", "bool", "float", "empty", "one",
                                  "2-D"])
def test_sorted_unique_is_np_unique(kind):
    """sorted_unique gives np.unique's answer (sorted distinct values, flat,
    same dtype) by one sort for integers and booleans, and hands other dtypes
    to np.unique."""
    rng = np.random.default_rng(5)
    a = {"int64": rng.integers(-10**12, 10**12, 5000).repeat(2),
         "int32": rng.integers(-50, 50, 3000).astype(np.int32),
         "uint8": rng.integers(0, 255, 3000).astype(np.uint8),
         "bool": rng.random(100) < 0.5, "float": rng.random(300).round(2),
         "empty": np.zeros(0, np.int64), "one": np.array([7]),
         "2-D": rng.integers(0, 30, (40, 3))}[kind]
    got, want = sorted_unique(a), np.unique(a)
    with Checks(COMM) as checks:
        checks.add(got.dtype == want.dtype and np.array_equal(got, want), kind, got[:5])


def _sort_cases(rng):
    """Arrays above the size where the fast paths start, each with a trap."""
    n = 20000
    return {
        "int-ties": rng.integers(0, 50, n),                   # packed, many ties
        "int-wide": rng.integers(-2 ** 62, 2 ** 62, n),       # too wide to pack
        "int-wide-ties": rng.integers(-2 ** 62, 2 ** 62, 50).repeat(n // 50),
        "uint64-huge": rng.integers(0, 2 ** 64 - 1, n, dtype=np.uint64),
        "int32": rng.integers(-1000, 1000, n).astype(np.int32),
        "int16": rng.integers(-5, 5, n).astype(np.int16),     # numpy's radix sort
        "bool": rng.random(n) < 0.3,
        "float": rng.random(n),
        "float-ties": rng.random(n).round(2),
        "float-signed-zero": np.tile([0.0, -0.0, 1.0, -1.0], n // 4),
        "float-nan-inf": np.where(rng.random(n) < 0.1, np.nan,
                                  np.where(rng.random(n) < 0.1, -np.inf, rng.random(n) - 0.5)),
        "float32": rng.random(n).astype(np.float32).round(3),
        "small": rng.integers(0, 3, 100),
        "empty": np.zeros(0, np.int64),
    }


@pytest.mark.parametrize("case", ["int-ties", "int-wide", "int-wide-ties", "uint64-huge",
                                  "int32", "int16", "bool", "float", "float-ties",
                                  "float-signed-zero", "float-nan-inf", "float32", "small",
                                  "empty"])
def test_stable_argsort_is_numpys(case):
    """stable_argsort gives np.argsort(kind="stable")'s indices exactly: ties
    in index order, -0.0 equal to 0.0, NaNs last."""
    a = _sort_cases(np.random.default_rng(17))[case]
    got, want = stable_argsort(a), np.argsort(a, kind="stable")
    with Checks(COMM) as checks:
        checks.add(got.dtype == want.dtype and np.array_equal(got, want), case,
                   np.flatnonzero(got != want)[:5])


@pytest.mark.parametrize("case", ["int-ties", "int-wide", "uint64-huge", "int32", "small",
                                  "empty"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_and_isin_sorted_are_numpys(case, side):
    """search_sorted gives np.searchsorted's answer for unsorted queries into a
    sorted haystack (both sides, queries between, below and above its keys);
    isin_sorted gives np.isin's."""
    rng = np.random.default_rng(23)
    q = _sort_cases(rng)[case]
    hay = np.sort(np.concatenate((q[::3], q[:0])))[: max(q.size // 2, 0)]
    hay = np.sort(np.concatenate((hay, hay[:100])))                  # repeated keys
    got, want = search_sorted(hay, q, side), np.searchsorted(hay, q, side)
    member = isin_sorted(q, sorted_unique(hay))
    with Checks(COMM) as checks:
        checks.add(np.array_equal(got, want), "search_sorted " + case,
                   np.flatnonzero(got != want)[:5])
        checks.add(np.array_equal(member, np.isin(q, hay)), "isin_sorted " + case)


@pytest.mark.parametrize("hay_size", [1000, 30000, 200000])
@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_merge_and_binary_paths(hay_size, side):
    """search_sorted answers like np.searchsorted whether it merges the sorted
    queries with the haystack (a haystack up to 8x the queries) or searches
    them one by one (a larger one), for queries below, inside and above it."""
    rng = np.random.default_rng(29)
    hay = np.sort(rng.integers(0, 10 ** 6, hay_size))
    hay[hay_size // 2:hay_size // 2 + 50] = hay[hay_size // 2]          # a run of equal keys
    q = np.concatenate((rng.integers(-100, 10 ** 6 + 100, 6000), hay[::97][:500]))
    got, want = search_sorted(hay, q, side), np.searchsorted(hay, q, side)
    with Checks(COMM) as checks:
        checks.add(np.array_equal(got, want), "search_sorted", np.flatnonzero(got != want)[:5])


def _mixed_cases(rng) -> dict:
    """``(haystack, queries)`` of mixed integer dtypes, with at least 4096 queries
    in a narrow range (the sizes and spans of the packed fast path), their values
    at the edges of the types: numpy compares them in ``np.result_type`` of the
    two (float64 for int64 with uint64)."""
    n = 6000
    wide = np.sort(rng.integers(-2 ** 40, 2 ** 40, n))
    near53 = np.sort(2 ** 53 + rng.integers(-50, 50, n))            # float64 ties them
    high = np.sort(rng.integers(0, 10 ** 6, n).astype(np.uint64) + np.uint64(2 ** 63))
    return {
        "uint64-2**63-into-int64": (wide, np.full(n, 2 ** 63, np.uint64)),
        "uint64-above-2**63-into-int64": (wide, np.uint64(2 ** 63) + np.arange(n, dtype=np.uint64)),
        "uint64-top-into-int64": (wide, np.uint64(2 ** 64 - 1) - np.arange(n, dtype=np.uint64)),
        "uint64-near-2**53-into-int64": (near53, (2 ** 53 + rng.integers(-60, 60, n))
                                         .astype(np.uint64)),
        "int64-near-2**53-into-uint64": (near53.astype(np.uint64), 2 ** 53 + rng.integers(-60, 60, n)),
        "uint64-high-into-uint64": (high, np.uint64(2 ** 63) + rng.integers(0, 10 ** 6, n)
                                    .astype(np.uint64)),
        "int64-negative-into-uint64": (high, rng.integers(-10 ** 6, 10 ** 6, n)),
        "int8-into-uint64": (np.sort(rng.integers(0, 100, n).astype(np.uint64)),
                             rng.integers(-100, 100, n).astype(np.int8)),
        "uint32-into-int64": (wide % 2 ** 33, rng.integers(0, 2 ** 32, n).astype(np.uint32)),
        "int64-into-int32": (np.sort(rng.integers(-2 ** 31, 2 ** 31, n)).astype(np.int32),
                             rng.integers(-2 ** 32, 2 ** 32, n)),
        "int64-into-uint8": (np.sort(rng.integers(0, 256, n)).astype(np.uint8),
                             rng.integers(-300, 300, n)),
    }


@pytest.mark.parametrize("case", list(_mixed_cases(np.random.default_rng(0))))
@pytest.mark.parametrize("side", ["left", "right"])
def test_search_sorted_mixed_dtypes_are_numpys(case, side):
    """search_sorted gives np.searchsorted's answer, and raises nothing numpy does
    not, for a haystack and queries of different integer dtypes: uint64 queries
    of 2**63 and more into an int64 haystack, int64 into uint64, narrow and
    wide types."""
    hay, q = _mixed_cases(np.random.default_rng(31))[case]
    hay = np.sort(hay)
    want = np.searchsorted(hay, q, side)
    with Checks(COMM) as checks:
        try:
            got = search_sorted(hay, q, side)
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            checks.add(False, case, "%s: %s" % (type(e).__name__, e))
        else:
            checks.add(np.array_equal(got, want), case, np.flatnonzero(got != want)[:5])
