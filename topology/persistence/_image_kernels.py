"""numba kernels of the persistence of 2-D images (row slabs of the cubical
complex, V-construction): the stable order of a slab's pixels by a radix
sort, the elder rule swept over the slab in that order, and the elder rule
over the events the slabs could not decide. Not collective."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["float_keys", "radix_order", "slab_pointers", "slab_sweep", "event_elder",
           "NEIGHBOURS_8"]

#: (dx, dy) of the 8 neighbours of a pixel, in the order of
#: :func:`topology.cubical_structure` (2, dual=True); bit ``j`` of a mask is
#: neighbour ``j``
NEIGHBOURS_8 = np.array([[-1, -1], [0, -1], [1, -1], [-1, 0], [1, 0], [-1, 1], [0, 1], [1, 1]],
                        np.int64)

_DIGIT = 11                     # radix bits per pass: a 2048-bin count stays in L1


@njit(cache=True, nogil=True)
def float_keys(values):  # pragma: no cover
    """Unsigned 64-bit keys in the order of the float64 ``values`` (``-0.0``
    equal to ``0.0``): the sign bit set on the others, every bit flipped on
    negative numbers."""
    bits = (values + 0.0).view(np.uint64)
    top = np.uint64(1) << np.uint64(63)
    out = np.empty(bits.size, np.uint64)
    for i in range(bits.size):
        u = bits[i]
        out[i] = ~u if u & top else u | top
    return out


@njit(cache=True, nogil=True)
def radix_order(keys, idx):  # pragma: no cover
    """The stable ascending order of ``keys`` (uint64): positions, equal keys
    by position, written over ``idx`` (``keys.size`` integers, of the type
    the positions are to have) or a copy. Least significant digit first;
    the digits every key shares are skipped, so an 8-bit image takes one
    pass."""
    n = keys.size
    for i in range(n):
        idx[i] = i
    if n < 2:
        return idx
    vary = np.uint64(0)
    k0 = keys[0]
    for i in range(n):
        vary |= keys[i] ^ k0
    mask = np.uint64((1 << _DIGIT) - 1)
    k = keys.copy()
    k2 = np.empty(n, np.uint64)
    i2 = np.empty_like(idx)
    count = np.empty(1 << _DIGIT, np.int64)
    shift = 0
    while shift < 64:
        s = np.uint64(shift)
        if (vary >> s) & mask:
            count[:] = 0
            for i in range(n):
                count[(k[i] >> s) & mask] += 1
            total = 0
            for b in range(count.size):
                c = count[b]
                count[b] = total
                total += c
            for i in range(n):
                b = (k[i] >> s) & mask
                j = count[b]
                count[b] = j + 1
                k2[j] = k[i]
                i2[j] = idx[i]
            k, k2 = k2, k
            idx, i2 = i2, idx
        shift += _DIGIT
    return idx


@njit(cache=True, nogil=True, inline="always")
def _find(parent, r):  # pragma: no cover
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


@njit(cache=True, nogil=True)
def _grown(a, n):  # pragma: no cover
    b = np.empty(2 * a.size + 16, a.dtype)
    b[:n] = a[:n]
    return b


@njit(cache=True, nogil=True, inline="always")
def _older(V, r, u, apex, reverse):  # pragma: no cover
    """Whether root ``r`` was born before root ``u`` in the sweep (a root is
    its component's first pixel; the apex is older than every pixel)."""
    if r == apex:
        return True
    if u == apex:
        return False
    if reverse:
        return V[r] > V[u] or (V[r] == V[u] and r > u)
    return V[r] < V[u] or (V[r] == V[u] and r < u)


@njit(cache=True, nogil=True, inline="always")
def _before(V, u, v, reverse):  # pragma: no cover
    """Whether pixel ``u`` comes before pixel ``v`` in the sweep: the order of
    ``(value, position)``, or its reverse."""
    if reverse:
        return V[u] > V[v] or (V[u] == V[v] and u > v)
    return V[u] < V[v] or (V[u] == V[v] and u < v)


@njit(cache=True, nogil=True, inline="always")
def _interface(y, a, b, sides):  # pragma: no cover
    """Whether row ``y`` of a slab touches another rank's rows."""
    return (y == a and sides & 1 != 0) or (y == b - 1 and sides & 2 != 0)


@njit(cache=True, nogil=True, inline="always")
def _border(x, y, W, a, b, sides):  # pragma: no cover
    """Whether pixel ``(x, y)`` of a slab lies on the image's border."""
    return x == 0 or x == W - 1 or (y == a and sides & 4 != 0) or (y == b - 1 and sides & 8 != 0)


@njit(cache=True, nogil=True)
def slab_pointers(V, W, a, b, reverse, nodes, links, sides, ptr):  # pragma: no cover
    """The first pass of :func:`slab_sweep`: each owned pixel's pointer to its
    steepest neighbour before it (itself if none: a terminal), its lower
    link's components, and the pointers followed to their terminals.

    Neighbours are those of :data:`NEIGHBOURS_8` in the owned rows; the
    graph's are ``nodes`` (a mask over them), and ``links`` gives the
    number of components of the link of each mask of neighbours before the
    pixel. ``sides`` says what lies beyond the slab: bit 1 (2) another
    rank's rows above row ``a`` (below row ``b - 1``), bit 4 (8) the image's
    first (last) row is ``a`` (``b - 1``). With ``reverse``, the image's
    border pixels point to the apex (position ``V.size``).

    Returns ``(candidates, terminals)``: the pixels where components may
    meet (ascending): those whose link has two components or more, those
    next to another rank's rows, and with ``reverse`` the border; and the
    terminals.
    """
    L = V.size // W
    apex = L * W
    ptr[apex] = apex
    n = (b - a) * W
    cand = np.empty(n, np.int64)
    term = np.empty(n, np.int64)
    nc = 0
    nt = 0
    for v in range(a * W, b * W):
        x = v % W
        y = v // W
        mask = 0
        best = -1
        for j in range(8):
            xx = x + NEIGHBOURS_8[j, 0]
            yy = y + NEIGHBOURS_8[j, 1]
            if xx < 0 or xx >= W or yy < a or yy >= b:
                continue
            u = yy * W + xx
            if _before(V, u, v, reverse):
                mask |= 1 << j
                if (nodes >> j) & 1 and (best < 0 or _before(V, u, best, reverse)):
                    best = u
        border = reverse and _border(x, y, W, a, b, sides)
        if border:
            ptr[v] = apex
        elif best < 0:
            ptr[v] = v
            term[nt] = v
            nt += 1
        else:
            ptr[v] = best
        if links[mask] >= 2 or border or _interface(y, a, b, sides):
            cand[nc] = v
            nc += 1
    # every pointer straight to its terminal
    for v in range(a * W, b * W):
        r = v
        while ptr[r] != r:
            r = ptr[r]
        u = v
        while ptr[u] != r:
            nxt = ptr[u]
            ptr[u] = r
            u = nxt
    return cand[:nc].copy(), term[:nt].copy()


@njit(cache=True, nogil=True)
def slab_sweep(V, W, a, b, cand, order, term, ptr, reverse, nodes, sides):  # pragma: no cover
    """The elder rule swept over the owned rows ``a .. b-1`` of a slab.

    ``V`` holds the slab's rows (``W`` pixels each) and the other ranks'
    rows next to them (``sides`` as for :func:`slab_pointers`); ``ptr``,
    ``term`` and the candidates ``cand`` are :func:`slab_pointers`'s, the
    candidates visited in the order ``order`` of their ``(value,
    position)`` forwards (sublevel sets, D0) or with ``reverse`` backwards
    (superlevel sets, D1; the border joined to the apex, a vertex older
    than every other). ``nodes`` masks the graph's neighbours among
    :data:`NEIGHBOURS_8`. Pixels that are not candidates join the component
    of their pointer and merge nothing.

    A component is *open* once it holds a pixel with a neighbour on another
    rank. At a merge, every sealed (not open) component younger than the
    oldest one there dies: its pair is decided here. The rest (the oldest
    and the open ones), and every pixel with a neighbour on another rank,
    make an *event*: the pixel, the components' roots and the other ranks'
    neighbours met before it, for :func:`event_elder` to decide.

    Returns ``(born, died, sealed, events, ptr, parts)``: the decided pairs
    (slab positions: the dying root, the pixel), the roots of the components
    no event reached (their classes never die), and the events (pixel,
    participants ``parts[ptr[i]:ptr[i+1]]``; ``-1`` the apex).
    """
    L = V.size // W
    apex = L * W
    opened = np.zeros(apex + 1, np.bool_)
    n = order.size
    # a component dies once, and every one began at a terminal
    born = np.empty(term.size, np.int64)
    died = np.empty(term.size, np.int64)
    nd = 0
    ev = np.empty(4 * W + 16, np.int64)
    evp = np.zeros(ev.size + 1, np.int64)
    parts = np.empty(4 * ev.size, np.int64)
    ne = 0
    npart = 0
    roots = np.empty(10, np.int64)
    remote = np.empty(8, np.int64)
    for k in range(n):
        v = cand[order[n - 1 - k if reverse else k]]
        x = v % W
        y = v // W
        nr = 0
        nrem = 0
        iface = _interface(y, a, b, sides)
        for j in range(8):
            if not (nodes >> j) & 1:
                continue
            xx = x + NEIGHBOURS_8[j, 0]
            yy = y + NEIGHBOURS_8[j, 1]
            if xx < 0 or xx >= W or yy < 0 or yy >= L:
                continue
            u = yy * W + xx
            if not _before(V, u, v, reverse):
                continue
            if yy < a or yy >= b:
                remote[nrem] = u        # another rank's pixel
                nrem += 1
                continue
            r = _find(ptr, u)
            new = True
            for i in range(nr):
                if roots[i] == r:
                    new = False
                    break
            if new:
                roots[nr] = r
                nr += 1
        if reverse and _border(x, y, W, a, b, sides):
            r = _find(ptr, apex)
            new = True
            for i in range(nr):
                if roots[i] == r:
                    new = False
                    break
            if new:
                roots[nr] = r
                nr += 1
        # the oldest root here survives the merge
        old = -1
        for i in range(nr):
            if old < 0 or _older(V, roots[i], old, apex, reverse):
                old = roots[i]
        if old < 0:
            old = v                     # a terminal: ptr[v] == v already
            opened[v] = iface
        emit = iface
        keep = 0
        for i in range(nr):
            r = roots[i]
            if r == old:
                continue
            ptr[r] = old
            if opened[r]:
                roots[keep] = r         # undecided: an event
                keep += 1
                emit = True
            else:
                born[nd] = r
                died[nd] = v
                nd += 1
        if emit:
            opened[old] = True
            if ne + 1 >= ev.size:
                ev = _grown(ev, ne)
                evp = _grown(evp, ne + 1)
            while npart + keep + nrem + 1 > parts.size:
                parts = _grown(parts, npart)
            ev[ne] = v
            if old != v:
                parts[npart] = -1 if old == apex else old
                npart += 1
            for i in range(keep):
                parts[npart] = roots[i]
                npart += 1
            for i in range(nrem):
                parts[npart] = remote[i]
                npart += 1
            ne += 1
            evp[ne] = npart
    # the roots no event reached: whole components of their own
    ns = 0
    sealed = np.empty(term.size, np.int64)
    for t in term:
        if ptr[t] == t and not opened[t]:
            sealed[ns] = t
            ns += 1
    return born[:nd].copy(), died[:nd].copy(), sealed[:ns].copy(), ev[:ne].copy(), \
        evp[:ne + 1].copy(), parts[:npart].copy()


@njit(cache=True, nogil=True)
def event_elder(ev, ptr, parts, age):  # pragma: no cover
    """The elder rule over the events of every slab, in the sweep's order.

    Nodes are ``0 .. age.size - 1`` (``age``: their places in the sweep's
    order, the apex's ``-1``); event ``i`` joins node ``ev[i]`` to the
    components of nodes ``parts[ptr[i]:ptr[i+1]]``, and every component but
    the oldest dies there. Returns ``(born, died, roots)``: the pairs (the
    dying component's oldest node, the event's node) and the oldest node of
    each final component."""
    m = age.size
    parent = np.full(m, -1, np.int64)
    born = np.empty(ptr[-1] + 1, np.int64)
    died = np.empty(ptr[-1] + 1, np.int64)
    nd = 0
    roots = np.empty(16, np.int64)
    for i in range(ev.size):
        v = ev[i]
        nr = 0
        for j in range(ptr[i], ptr[i + 1]):
            u = parts[j]
            if parent[u] < 0:
                parent[u] = u           # a root first met here: a component of its own
            r = _find(parent, u)
            new = True
            for t in range(nr):
                if roots[t] == r:
                    new = False
                    break
            if new:
                if nr == roots.size:
                    roots = _grown(roots, nr)
                roots[nr] = r
                nr += 1
        if nr == 0:
            if parent[v] < 0:
                parent[v] = v
            continue
        old = roots[0]
        for t in range(1, nr):
            if age[roots[t]] < age[old]:
                old = roots[t]
        for t in range(nr):
            r = roots[t]
            if r != old:
                parent[r] = old
                born[nd] = r
                died[nd] = v
                nd += 1
        if parent[v] < 0:
            parent[v] = old
        else:
            rv = _find(parent, v)
            if rv != old:
                # v met as a root of its own before: it joins here (never the oldest)
                parent[rv] = old
    nroot = 0
    out = np.empty(m, np.int64)
    for u in range(m):
        if parent[u] == u:
            out[nroot] = u
            nroot += 1
    return born[:nd].copy(), died[:nd].copy(), out[:nroot].copy()
