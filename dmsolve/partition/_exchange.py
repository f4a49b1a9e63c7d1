"""Data movement for partitioning: send array elements to given ranks, and
fetch entries of a distributed array by global index (one BSP superstep each way).
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .._layout import Layout
from ..bsp import BSP

__all__ = ["exchange", "fetch"]


def exchange(comm: MPI.Comm, dests, *arrays: np.ndarray) -> list[np.ndarray]:
    """Send element ``i`` of every array to rank ``dests[i]``; one superstep.

    An all-to-all of rows: ``arrays`` all have ``len(dests)`` rows (of any
    trailing shape and dtype) and each row goes to its destination rank.
    Collective on ``comm``: every rank calls it with the same number of
    arrays, of the same dtypes and trailing shapes.

    Parameters
    ----------
    comm : MPI.Comm
    dests : array_like of int, shape (k,)
        Destination rank of each row, in ``[0, comm.size)``.
    *arrays : ndarray, shape (k, ...)

    Returns
    -------
    list of ndarray
        The rows received for each array, concatenated in source rank order
        and, within a source, in send order.
    """
    ctx = BSP(comm)
    dests = np.asarray(dests, dtype=np.int64)
    tags = ctx.tags(*["array%d" % i for i in range(len(arrays))])
    for tag, a in zip(tags, arrays):
        ctx.send_rows(dests, np.ascontiguousarray(a), tag=tag)
    inbox = ctx.sync("partition.exchange")
    return [inbox.concat(tag, dtype=a.dtype, shape=a.shape[1:])
            for tag, a in zip(tags, arrays)]


def _exchange_with_sources(comm: MPI.Comm, dests: np.ndarray, values: np.ndarray):
    # As exchange() for one array, also returning the source rank of each row.
    ctx = BSP(comm)
    tag = ctx.tags("rows")
    ctx.send_rows(np.asarray(dests, dtype=np.int64), np.ascontiguousarray(values), tag=tag.rows)
    inbox = ctx.sync("partition.fetch")
    return inbox.concat_with_sources(tag.rows, dtype=values.dtype)


def fetch(layout: Layout, local_values: np.ndarray, indices) -> np.ndarray:
    """``values[indices]`` of a distributed array (``local_values`` on ``layout``).

    Two supersteps: requests to the owners, answers back. Collective on
    ``layout.comm``; each rank asks for its own ``indices`` (any number,
    repeats allowed).

    Parameters
    ----------
    layout : Layout
        The distribution of ``values``.
    local_values : ndarray, shape (layout.local_size,)
        This rank's entries.
    indices : array_like of int
        Global indices in ``[0, layout.global_size)``.

    Returns
    -------
    ndarray
        The entries at ``indices``, in the order asked.
    """
    comm = layout.comm
    indices = np.asarray(indices, dtype=np.int64)
    owners = layout.owner(indices) if indices.size else np.zeros(0, dtype=np.int64)
    order = np.argsort(owners, kind="stable")
    req_idx, req_src = _exchange_with_sources(comm, owners[order], indices[order])
    answers = local_values[req_idx - layout.start]
    got = exchange(comm, req_src, answers)[0]
    out = np.empty(indices.size, dtype=local_values.dtype)
    out[order] = got  # answers come back grouped by owner in request order
    return out
