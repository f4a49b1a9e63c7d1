"""A library-private duplicate of each user communicator.

Like PETSc's inner communicator, dmsolve does its point-to-point traffic on a
duplicate of the user's communicator, cached as an MPI attribute, so that its
messages can never match the user's and so that thousands of matrices do not
each consume an MPI context id (MPICH has about two thousand).
"""

from __future__ import annotations

from mpi4py import MPI

from .._errors import close_channel

_KEYVAL = None


def inner_comm(comm: MPI.Comm) -> MPI.Comm:
    """The cached private duplicate of ``comm``.

    Collective on ``comm`` the first time it is called for that communicator
    (one ``Dup``); not collective afterwards.
    """
    global _KEYVAL
    if _KEYVAL is None:
        _KEYVAL = MPI.Comm.Create_keyval()
    inner = comm.Get_attr(_KEYVAL)
    if inner is None:
        inner = comm.Dup()
        inner.Set_attr(_KEYVAL, inner)  # an inner comm is its own inner comm
        comm.Set_attr(_KEYVAL, inner)
    return inner


# The MPI tags of dmsolve's point-to-point messages on the inner
# communicators. Every raw tag used there comes from this table, so that no
# two uses can match each other's messages (the user's own traffic is on
# another communicator altogether):
#
#   tags            name           messages
#   100 - 30099     PATTERN_TAGS   neighbour patterns (NeighborExchange "p2p"),
#                                  one per pattern from next_tag, cycling
#   32000, 32001    NBX_TAGS       BSP's sparse-sync payloads, in even and in
#                                  odd syncs on the communicator
#   32002           GATHER_TAG     the partitioners' tree gather to rank 0
#   32003, 32004    ROUTE_TAGS     the first hop of a routed sparse sync, in
#                                  even and in odd syncs (the second hop
#                                  carries NBX_TAGS)
#
# All are below 32767, the least MPI_TAG_UB the MPI standard allows.
# (BSP's own message tags are not MPI tags: they travel inside its payload;
# BSP.tags hands them out.)

#: Tags of neighbour patterns, handed out by :func:`next_tag`.
PATTERN_TAGS = range(100, 30100)
#: Tags of BSP's NBX payload messages: ``NBX_TAGS[s % 2]`` in the ``s``-th
#: sparse sync on a communicator.
NBX_TAGS = (32000, 32001)
#: Tag of :func:`dmsolve.partition._multilevel.gather_to_root`'s messages.
GATHER_TAG = 32002
#: Tags of the first hop of a routed sparse sync: ``ROUTE_TAGS[s % 2]``.
ROUTE_TAGS = (32003, 32004)

_NEXT: dict[int, int] = {}


def next_tag(comm: MPI.Comm) -> int:
    """A fresh message tag for a pattern on ``comm``'s inner communicator,
    from :data:`PATTERN_TAGS` (cycling once all were handed out).

    Not collective, but must be called in the same order on every rank (it
    is called from collective constructors), so that all ranks agree.
    """
    inner = inner_comm(comm)
    key = inner.handle
    i = _NEXT.get(key, 0)
    _NEXT[key] = (i + 1) % len(PATTERN_TAGS)
    return PATTERN_TAGS[i]


def existing_inner_comm(comm: MPI.Comm) -> MPI.Comm | None:
    """The private duplicate of ``comm`` if :func:`inner_comm` made one,
    else None. Not collective."""
    return None if _KEYVAL is None else comm.Get_attr(_KEYVAL)


def free_inner_comm(comm: MPI.Comm) -> None:
    """Free the private duplicates of ``comm`` (the one made by
    :func:`inner_comm`, and the error channel of :mod:`dmsolve._errors`), if
    any, before ``comm`` itself is freed (whoever frees ``comm`` calls it;
    the attributes have no delete callback). Nothing using them (halo
    plans, supersteps, solves on ``comm``) may be used afterwards.

    Collective on ``comm`` when a duplicate exists (``MPI_Comm_free``);
    every rank of ``comm`` has them or not alike, as they are made
    collectively.
    """
    close_channel(comm)
    if _KEYVAL is None:
        return
    inner = comm.Get_attr(_KEYVAL)
    if inner is None or inner is comm:
        return
    comm.Delete_attr(_KEYVAL)
    inner.Delete_attr(_KEYVAL)
    _NEXT.pop(inner.handle, None)
    inner.Free()
