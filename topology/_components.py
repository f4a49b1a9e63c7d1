"""Connected components of a grid or complex, and of its sub- and super-level sets.

Each rank labels the components of its ghosted piece with a local union-find
(scipy's ``connected_components``), then the ranks merge labels across the
ghost layer in BSP supersteps until no label changes (min-label propagation
between components rather than vertices, so the number of supersteps is
bounded by the number of rank-to-rank hops a component spans, not its size).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components as _cc

from dmsolve import DistVector
from dmsolve.bsp import BSP
from dmsolve.validate import agreed, check_bool, check_int, check_real

from ._domain import check_domain, ghosted_global_ids

__all__ = ["connected_components"]

_INF = np.iinfo(np.int64).max
_TAG_TO_OWNER, _TAG_IDS, _TAG_LABELS = 1, 2, 3


def connected_components(domain, values=None, threshold=None, *, sublevel: bool = True,
                         max_steps: int | None = None, axes: str | None = None) -> DistVector:
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
        Bound on the merging supersteps (default: unbounded; it always halts).
        Reaching it raises ``RuntimeError`` on every rank.
    axes : str, optional
        The axis order of a 2-D/3-D ``values`` array on a Grid, as for
        :func:`critical_points`.

    Returns
    -------
    DistVector of int64 on ``domain.vertex_layout``: the component label of
    each vertex (its smallest vertex id), -1 for vertices outside the level set.

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
    ranks.

    References
    ----------
    .. [1] G. Malewicz et al., "Pregel: a system for large-scale graph
       processing", SIGMOD 2010 (vertex-centric min-label propagation).
    """
    check_domain(domain)
    comm = domain.comm
    with agreed(comm):
        if (values is None) != (threshold is None):
            raise ValueError("give both values and threshold for a level set, or neither")
        threshold = check_real("threshold", threshold, allow_none=True)
        sublevel = check_bool("sublevel", sublevel)
        max_steps = check_int("max_steps", max_steps, low=1, allow_none=True)
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
    label = np.where(keep, gids, _INF)
    comp_min = np.full(ncomp, _INF, dtype=np.int64)
    np.minimum.at(comp_min, comp, label)
    label = comp_min[comp]
    # who shares what: ghosts are owned elsewhere; owned vertices ghosted by
    # the send side of the domain's halo plan
    halo = domain.halo
    ghost_mask = np.ones(n_loc, dtype=bool)
    ghost_mask[own_pos] = False
    ghost_pos = np.flatnonzero(ghost_mask)
    splits = np.cumsum(halo.send_counts)[:-1] if halo.send_counts.size else []
    shared = list(zip(halo.send_ranks.tolist(), np.split(own_pos[halo.send_index], splits)
                      if halo.send_counts.size else []))
    state = {"sent": np.full(n_loc, _INF, dtype=np.int64), "label": label}

    def compute(ctx, inbox):
        lab = state["label"]
        keys, mins = inbox.reduced(_TAG_TO_OWNER, "min", dtype=np.int64)
        if keys.size:
            pos = own_pos[keys - layout.start]
            np.minimum.at(lab, pos, mins)
        gid = inbox.concat(_TAG_IDS, dtype=np.int64)
        if gid.size:
            np.minimum.at(lab, np.searchsorted(ids, gid), inbox.concat(_TAG_LABELS, dtype=np.int64))
        cmin = np.full(ncomp, _INF, dtype=np.int64)
        np.minimum.at(cmin, comp, lab)
        lab[:] = cmin[comp]
        sent = state["sent"]
        # tell the others only what changed since they last heard
        gp = ghost_pos[lab[ghost_pos] < sent[ghost_pos]]
        if gp.size:
            ctx.send_keyed(_TAG_TO_OWNER, ids[gp], lab[gp], layout, op="min")
        for rank, pos in shared:
            p = pos[lab[pos] < sent[pos]]
            if p.size:
                ctx.send(rank, ids[p], tag=_TAG_IDS)
                ctx.send(rank, lab[p], tag=_TAG_LABELS)
        sent[:] = np.minimum(sent, lab)
        # re-sent owned entries are re-marked: a rank may ghost them later
        # only through the same plan, so one send per improvement suffices

    BSP(comm).run(compute, label="components", max_steps=max_steps)
    out = state["label"][own_pos]
    out = np.where(out == _INF, -1, out)
    return DistVector(layout, out.astype(np.int64))
