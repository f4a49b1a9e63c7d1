"""examples/bsp_components.py runs at any rank count and agrees with scipy,
on both exchanges of BSP.sync (forced through DMSOLVE_BSP_EXCHANGE)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI
from scipy.sparse.csgraph import connected_components

from mpitest import (assert_collective, assert_equal_collective, assert_raises_collective,
                     load_example, same_on_all_ranks)

pytestmark = pytest.mark.timeout(120)

COMM = MPI.COMM_WORLD


@pytest.fixture(autouse=True, params=["dense", "sparse"])
def exchange(request, monkeypatch):
    """The exchange every BSP the example builds uses (read at construction)."""
    monkeypatch.setenv("DMSOLVE_BSP_EXCHANGE", request.param)
    return request.param


def scipy_labels(n, edges):
    """Smallest vertex id of each vertex's component, from scipy csgraph."""
    g = sp.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    ncomp, comp = connected_components(g.tocsr(), directed=False)
    smallest = np.full(ncomp, n, dtype=np.int64)
    np.minimum.at(smallest, comp, np.arange(n))
    return ncomp, smallest[comp]


def check_against_scipy(result, n):
    edges = np.concatenate(COMM.allgather(result["edges"])).reshape(-1, 2)
    labels = np.concatenate(COMM.allgather(result["labels"]))
    ncomp, want = scipy_labels(n, edges)
    assert_equal_collective(labels, want)
    assert_collective(COMM, result["components"] == ncomp,
                      "%d components, scipy finds %d" % (result["components"], ncomp))
    assert same_on_all_ranks(COMM, (result["components"], result["supersteps"]))
    return labels


RANDOM_CASES = {
    "n101-k4": (101, 4, 1),
    "n13-k13-singletons": (13, 13, 0),
    "n3-k2-empty-ranks": (3, 2, 2),           # at 4 ranks one rank owns no vertex
    "n5000-k7-trees": (5000, 7, 0),           # crosses BLOCK boundaries
}


@pytest.mark.parametrize("case", sorted(RANDOM_CASES))
def test_random_graph_components(case):
    """bsp_components finds scipy's components of random graphs."""
    n, k, extra = RANDOM_CASES[case]
    example = load_example("bsp_components")
    args = ["-n", str(n), "-k", str(k), "--extra", str(extra), "--seed", "3", "--quiet"]
    result = example.main(COMM, args)
    labels = check_against_scipy(result, n)
    assert_equal_collective(labels, np.arange(n) % k)       # the known components
    assert_collective(COMM, result["checked"] is True and result["known"] is True,
                      "example's own checks: %r %r" % (result["checked"], result["known"]))
    # the graph and the answer do not depend on the number of ranks
    serial = example.main(MPI.COMM_SELF, args)
    assert_equal_collective(serial["labels"], labels)
    assert_equal_collective(np.sort(serial["edges"], axis=0),
                            np.sort(np.concatenate(COMM.allgather(result["edges"])), axis=0))


def test_edge_list_file(shared_tmp_path):
    """bsp_components reads an edge-list file."""
    path = shared_tmp_path / "graph.txt"
    if COMM.rank == 0:
        path.write_text("# a comment\n0 1\n1 2\n5 6\n9 9\n3 8\n8 2\n12 11\n")
    COMM.Barrier()
    example = load_example("bsp_components")
    result = example.main(COMM, ["--edges", str(path), "-n", "15", "--quiet"])
    labels = check_against_scipy(result, 15)
    # {0,1,2,3,8}, {5,6}, {11,12}; 4, 7, 9, 10, 13, 14 alone
    assert_equal_collective(labels, [0, 0, 0, 0, 4, 5, 5, 7, 0, 9, 10, 11, 11, 13, 14])
    assert_collective(COMM, result["checked"] is True and result["known"] is None,
                      "checked %r" % result["checked"])


def test_edge_list_with_negative_id_raises_on_every_rank(shared_tmp_path):
    """An edge list with a negative id raises on every rank."""
    path = shared_tmp_path / "bad.txt"
    if COMM.rank == 0:
        path.write_text("0 1\n" * 5 + "2 -3\n")
    COMM.Barrier()
    example = load_example("bsp_components")
    assert_raises_collective(COMM, ValueError, example.main, COMM,
                             ["--edges", str(path), "--quiet"], match="non-negative")
