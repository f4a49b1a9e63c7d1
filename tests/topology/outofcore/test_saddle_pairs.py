"""D1 of 3D out-of-core grids from the Morse complex built slab by slab
(topology/outofcore/_saddle_pairs.py): under a memory budget that cuts every
rank's slab into several virtual slabs, the whole diagram (D0, D1, D2) is
the in-memory grid's and gudhi's, nothing missing, on noisy, smooth and
tied fields at any rank count; the Morse complex has the in-memory
gradient's critical cells; the value keys order floats."""

import numpy as np
import pytest
from mpi4py import MPI

import gudhi_ref
import topology as tp
from mpitest import assert_collective, assert_equal_collective
from topology.outofcore import PlaneSource
from topology.outofcore._saddle_pairs import key_values, ooc_morse_paths, value_keys
from topology_cases import bench_field, raw_field

comm = MPI.COMM_WORLD


def budget(shape) -> int:
    """A memory budget that cuts a grid of 24 planes into 8 slabs at 1 rank,
    4 per rank at 2 and 3 at 3 (a turn is sized for 160 bytes a vertex and
    takes half the budget: 3 planes and 2 ghost planes), and from 4 ranks
    on, where a rank has 6 planes or fewer, into slabs of 2 planes."""
    return (1300 if comm.size >= 4 else 1700) * shape[0] * shape[1]


CASES = [((24, 22, 24), "noisy"), ((24, 24, 24), "smooth"), ((23, 21, 24), "ties"),
         ((13, 11, 24), "noisy")]


def _quiet(*args):
    pass


@pytest.mark.parametrize("shape,kind", CASES,
                         ids=["%s-%s" % ("x".join(map(str, s)), k) for s, k in CASES])
def test_diagram_as_in_memory_and_gudhi(shape, kind):
    """Every pair of the out-of-core diagram (D1 included) is the in-memory
    diagram's, with several slabs per rank, and the finite and essential
    classes are gudhi's."""
    f = bench_field(shape, kind)
    go = tp.Grid(shape, comm, memory_budget=budget(shape))
    assert_collective(comm, go.virtual >= 3, "only %d slabs per rank" % go.virtual)
    d_mem = tp.persistence_diagram(tp.Grid(shape, comm), f).gather()
    d_ooc = tp.persistence_diagram(go, f).gather()
    assert_equal_collective(d_ooc.missing, [])
    for k in d_mem.raw_pairs:
        assert_equal_collective(d_ooc.raw_pairs[k], d_mem.raw_pairs[k], err_msg=k)
    assert_collective(comm, np.count_nonzero(d_ooc.raw_pairs["dim"] == 1) > 0, "no D1 pair")
    ref = gudhi_ref.diagram(gudhi_ref.grid_simplices(shape), f)
    for d in range(4):
        assert_equal_collective(d_ooc.finite(d), ref[d][0], err_msg="finite D%d" % d)
        assert_equal_collective(d_ooc.essential(d), ref[d][1], err_msg="essential D%d" % d)


@pytest.mark.parametrize("v", [1, 2, "planes"])
def test_raw_field_any_slab_count(tmp_path, v):
    """From a raw float32 file with ties, at one slab per rank, two, and one
    plane per slab: the in-memory diagram."""
    shape = (10, 9, 12)
    v = shape[-1] // comm.size if v == "planes" else v
    raw, f = raw_field(tmp_path, shape, 5, True)
    d_mem = tp.persistence_diagram(tp.Grid(shape, comm), f).gather()
    d_ooc = tp.persistence_diagram(tp.Grid(shape, comm, virtual=v), raw).gather()
    assert_equal_collective(d_ooc.missing, [])
    for k in d_mem.raw_pairs:
        assert_equal_collective(d_ooc.raw_pairs[k], d_mem.raw_pairs[k], err_msg=k)


def test_critical_cells_as_in_memory():
    """The Morse complex built slab by slab has the critical cells of the
    in-memory discrete gradient, and every critical edge's two path ends
    and every critical triangle's two cofacet ends."""
    shape = (17, 14, 24)
    f = bench_field(shape, "noisy")
    go = tp.Grid(shape, comm, memory_budget=budget(shape))
    assert_collective(comm, go.virtual >= 3, "only %d slabs per rank" % go.virtual)
    crit, d0, d2, d1, mult = ooc_morse_paths(go, PlaneSource(go, f), _quiet)
    assert mult == (1, 14, 36, 24)
    grad = tp.discrete_gradient(tp.Grid(shape, comm), f)
    for d in range(4):
        code, top = crit[d]["code"], crit[d]["top"]
        key = crit[d]["key"]
        ids = np.sort(key[:, 1::2], axis=1)
        got = np.concatenate(comm.allgather(ids))
        got = got[np.lexsort(got.T[::-1])]
        assert_equal_collective(got, grad.critical_cells(d), err_msg="dimension %d" % d)
        assert_equal_collective(top, key[:, 1])
        assert_equal_collective(code // mult[d], top)
        assert_equal_collective(key_values(key[:, 0]), f[top])
    n1 = comm.allreduce(crit[1]["code"].size)
    n2 = comm.allreduce(crit[2]["code"].size)
    assert_equal_collective(comm.allreduce(d0[0].size), 2 * n1)
    assert_equal_collective(comm.allreduce(d2[0].size), 2 * n2)
    assert_collective(comm, comm.allreduce(d1[0].size) >= n2, "too few D1 path ends")


def test_value_keys_order_floats():
    """Value keys sort as the floats do (negatives, zeros of both signs,
    infinities) and give the floats back. Not collective."""
    x = np.array([-np.inf, -3.5, -1e-300, -0.0, 0.0, 1e-300, 2.0, 7.25e10, np.inf])
    k = value_keys(x)
    assert np.all(np.diff(k[[0, 1, 2, 3, 5, 6, 7, 8]]) > 0)
    assert k[3] == k[4]
    assert np.array_equal(key_values(k), x + 0.0)
    rng = np.random.default_rng(3)
    y = rng.standard_normal(1000) * 10.0 ** rng.integers(-5, 5, 1000)
    assert np.array_equal(np.argsort(value_keys(y), kind="stable"), np.argsort(y, kind="stable"))
