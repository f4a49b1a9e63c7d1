"""A library-private duplicate of each user communicator.

Like PETSc's inner communicator, dmsolve does its point-to-point traffic on a
duplicate of the user's communicator, cached as an MPI attribute, so that its
messages can never match the user's and so that thousands of matrices do not
each consume an MPI context id (MPICH has about two thousand).
"""

from __future__ import annotations

from mpi4py import MPI

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


_TAGS: dict[int, int] = {}


def next_tag(comm: MPI.Comm) -> int:
    """A fresh message tag for a pattern on ``comm``'s inner communicator.

    Not collective, but must be called in the same order on every rank (it
    is called from collective constructors), so that all ranks agree.
    """
    inner = inner_comm(comm)
    key = inner.handle
    tag = _TAGS.get(key, 100)
    _TAGS[key] = 100 + (tag - 99) % 30000  # stays below the guaranteed MPI_TAG_UB
    return tag


def free_inner_comm(comm: MPI.Comm) -> None:
    """Free the private duplicate of ``comm`` made by :func:`inner_comm`, if
    any, before ``comm`` itself is freed (whoever frees ``comm`` calls it;
    the attribute has no delete callback). Nothing using it (halo plans,
    supersteps on ``comm``) may be used afterwards.

    Collective on ``comm`` when a duplicate exists (``MPI_Comm_free``);
    every rank of ``comm`` has one or none alike, as :func:`inner_comm` is
    collective.
    """
    if _KEYVAL is None:
        return
    inner = comm.Get_attr(_KEYVAL)
    if inner is None or inner is comm:
        return
    comm.Delete_attr(_KEYVAL)
    inner.Delete_attr(_KEYVAL)
    _TAGS.pop(inner.handle, None)
    inner.Free()
