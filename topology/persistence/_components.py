"""Connected components of a grid or complex, and of its sub- and super-level sets.

Each rank labels the components of its ghosted part with a local union-find
(scipy's ``connected_components``); these pieces, linked through the ghost
layer, are merged across ranks by :func:`dmsolve.bsp.piece_components`
(hooking and pointer jumping), in a number of supersteps that grows like the
logarithm of the number of rank-to-rank hops a component spans.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmsolve import DistVector
from dmsolve.bsp import BSP, piece_components
from dmsolve.validate import agreed, check_bool, check_int, check_real

from ..core import check_domain, ghosted_global_ids

__all__ = ["connected_components", "label_components"]

_INF = np.iinfo(np.int64).max


def connected_components(domain, values=None, threshold=None, *, sublevel: bool = True,
                         max_steps: int | None = None, axes: str | None = None, out=None):
    """Label every vertex with the smallest global vertex id of its component.

    Parameters
    ----------
    domain : Grid or SimplicialComplex
    values : DistVector or global array, optional
        A vertex field; with ``threshold``, only vertices with
        ``values <= threshold`` (``sublevel=True``) or ``values >= threshold``
        (``sublevel=False``) and the edges between them are kept.
    threshold : float, optional
    sublevel : bool
    max_steps : int, optional
        Bound on the supersteps of the merge across ranks (those of
        :func:`dmsolve.bsp.piece_components`; default: unbounded, it always
        ends). Not finishing within it raises ``RuntimeError`` on every rank.
    axes : str, optional
        The axis order of a 2-D/3-D ``values`` array on a Grid, as for
        :func:`critical_points`.
    out : str or os.PathLike, optional
        Only for a Grid in out-of-core mode: write the labels to this raw
        file (int64, little-endian, vertex id order; replaced if it exists)
        instead of returning them in memory.

    Returns
    -------
    DistVector of int64 on ``domain.vertex_layout``: the component label of
    each vertex (its smallest vertex id), -1 for vertices outside the level set.
    With ``out``: a :class:`RawField` of dtype int64 reading that file.

    Raises
    ------
    ValueError
        On every rank, if ``values`` are given without ``threshold`` (or vice
        versa), ``values`` or ``threshold`` are not finite, or ``max_steps``
        is below 1.
    TypeError
        If ``domain`` is not a Grid or SimplicialComplex; on every rank, if
        ``threshold`` is not a real number, ``sublevel`` not a bool or
        ``max_steps`` not an integer.

    Notes
    -----
    Collective on ``domain.comm``. The labels do not depend on the number of
    ranks. Each rank's pieces are the components of its ghosted part (keyed
    by their smallest kept vertex id); one superstep sends each kept ghost
    vertex's piece to the vertex's owner, which links it to its own piece of
    that vertex; then :func:`dmsolve.bsp.piece_components` merges the pieces
    up and down the binary tree of ranks (``method="tree"``): ``2
    ceil(log2 p) + 1`` supersteps whatever the components chain, each rank
    talking to its ghost neighbours and to at most three tree neighbours per
    level (bench/scale.py's slab stack over 64 ranks: 14 supersteps in all,
    where min-label propagation took about 65 and hooking 15, with all ranks
    talking to the root's; see docs/design/components.md). None on one rank.

    On a Grid in out-of-core mode (``Grid(..., virtual=v)``), ``values`` may
    be a :class:`RawField`, read one virtual slab at a time: each slab's
    pieces are labelled by a union-find, summarised by their interface
    vertices, glued up the binary tree of virtual processors and renamed on
    the way down, ``2 ceil(log2(p v)) + 2`` virtual supersteps
    (:func:`topology.outofcore.ooc_components`). The labels equal the in-memory
    ones; without ``out`` they are returned in memory (8 bytes per owned
    vertex), with it they never are.

    References
    ----------
    .. [1] Y. Shiloach and U. Vishkin, "An O(log n) parallel connectivity
       algorithm", J. Algorithms 3(1), 1982.
    .. [2] Y. Zhang, A. Azad and Z. Hu, "FastSV: a distributed-memory
       connected component algorithm with fast convergence", SIAM PP 2020.

    Examples
    --------
    The sublevel set ``{f <= 3}`` of a 5 x 4 image with two basins, of
    minima 1 and 0, which meet at the saddle 3:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> image = np.array([[5, 4, 5, 6, 7],
    ...                   [4, 1, 3, 2, 6],
    ...                   [5, 3, 6, 0, 5],
    ...                   [6, 4, 5, 3, 6]], dtype=float)     # values[y, x]
    >>> grid = topology.Grid((5, 4), comm)
    >>> labels = topology.connected_components(grid, image, 3.0, axes="yx")
    >>> print(labels.gather().reshape(4, 5))
    [[-1 -1 -1 -1 -1]
     [-1  6  6  6 -1]
     [-1  6 -1  6 -1]
     [-1 -1 -1  6 -1]]

    Below the saddle, at 2.5, the two basins are apart:

    >>> labels = topology.connected_components(grid, image, 2.5, axes="yx")
    >>> print(labels.gather().reshape(4, 5))
    [[-1 -1 -1 -1 -1]
     [-1  6 -1  8 -1]
     [-1 -1 -1  8 -1]
     [-1 -1 -1 -1 -1]]

    Without a field, the components of the domain itself:

    >>> print(np.unique(topology.connected_components(grid).gather()))
    [0]
    """
    check_domain(domain)
    comm = domain.comm
    with agreed(comm):
        if (values is None) != (threshold is None):
            raise ValueError("give both values and threshold for a level set, or neither")
        threshold = check_real("threshold", threshold, allow_none=True)
        sublevel = check_bool("sublevel", sublevel)
        max_steps = check_int("max_steps", max_steps, low=1, allow_none=True)
    return domain.kernels.components(values, threshold, sublevel=sublevel, axes=axes, out=out,
                                     max_steps=max_steps)


def label_components(domain, values, threshold, *, sublevel: bool = True, axes=None, out=None,
                     max_steps=None) -> DistVector:
    """:func:`connected_components` of a domain held in memory: a local
    union-find, then the pieces linked across ranks by
    :func:`dmsolve.bsp.piece_components`. Collective on ``domain.comm``."""
    from scipy.sparse.csgraph import connected_components as _cc
    comm = domain.comm
    with agreed(comm):
        if out is not None:
            raise ValueError("out= is for a Grid in out-of-core mode (Grid(..., virtual=v)); "
                             "in memory the labels are returned as a DistVector")
    layout = domain.vertex_layout
    ids = domain.ghosted_ids()          # layout indices: where messages go
    gids = ghosted_global_ids(domain)   # global ids: what labels are made of
    own_pos = domain.owned_positions()
    n_loc = ids.size
    heads, tails = domain.local_edges()
    keep = np.ones(n_loc, dtype=bool)
    if values is not None:
        vec = domain.vertex_values(values, axes=axes)
        inside = vec.local <= threshold if sublevel else vec.local >= threshold
        keep = domain.ghosted(inside.astype(np.int8)).astype(bool)
        e = keep[heads] & keep[tails]
        heads, tails = heads[e], tails[e]
    # local union-find
    g = sp.coo_matrix((np.ones(heads.size, dtype=np.int8), (heads, tails)), shape=(n_loc, n_loc))
    ncomp, comp = _cc(g, directed=False)
    comp_min = np.full(ncomp, _INF, dtype=np.int64)
    np.minimum.at(comp_min, comp, np.where(keep, gids, _INF))
    # the pieces are the local components; a kept ghost vertex links its
    # piece to its owner's piece of the same vertex (one superstep to learn it)
    ghost_mask = np.ones(n_loc, dtype=bool)
    ghost_mask[own_pos] = False
    gp = np.flatnonzero(ghost_mask & keep)
    link_local, link_rank, link_remote = (np.zeros(0, np.int64),) * 3
    ctx = BSP(comm)
    tag = ctx.tags("link")
    if comm.Get_size() > 1:
        rows = np.stack((ids[gp], comp[gp]), axis=1).astype(np.int64)
        ctx.send_rows(layout.owner(ids[gp]), rows, tag.link)
        got, src = ctx.sync("components:links").concat_with_sources(
            tag.link, dtype=np.int64, shape=(2,))
        link_local = comp[own_pos[got[:, 0] - layout.start]].astype(np.int64)
        link_rank, link_remote = src, got[:, 1]
    # a mesh's pieces link compact parts: the rank tree, no fan-in
    out = piece_components(comp_min, link_local, link_rank, link_remote, comm, method="tree",
                           max_supersteps=max_steps, ledger=ctx.ledger).root_key
    out = out[comp[own_pos]]
    out = np.where(out == _INF, -1, out)
    return DistVector(layout, out.astype(np.int64))
