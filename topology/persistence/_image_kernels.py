"""numba kernels of the persistence of 2-D images (row slabs of the cubical
complex, V-construction): the stable order of a slab's pixels by a radix
sort, the elder rule swept over the slab in that order, and the elder rule
over the events the slabs could not decide. Not collective."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["float_keys", "radix_order", "slab_sweep", "event_elder", "NEIGHBOURS_4",
           "NEIGHBOURS_8"]

#: (dx, dy) of the 4 neighbours along the axes (the complex's edges: D0)
NEIGHBOURS_4 = np.array([[-1, 0], [1, 0], [0, -1], [0, 1]], np.int64)
#: (dx, dy) of the 8 neighbours sharing a square (the dual graph: D1)
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
def radix_order(keys):  # pragma: no cover
    """The stable ascending order of ``keys`` (uint64): positions, equal keys
    by position. Least significant digit first; the digits every key shares
    are skipped, so an 8-bit image takes one pass."""
    n = keys.size
    idx = np.arange(n, dtype=np.int64)
    if n < 2:
        return idx
    vary = np.uint64(0)
    k0 = keys[0]
    for i in range(n):
        vary |= keys[i] ^ k0
    mask = np.uint64((1 << _DIGIT) - 1)
    k = keys.copy()
    k2 = np.empty(n, np.uint64)
    i2 = np.empty(n, np.int64)
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


@njit(cache=True, nogil=True)
def slab_sweep(V, W, a, b, order, reverse, nbrs, remote_lo, remote_hi, edge_lo, edge_hi):
    # pragma: no cover
    """The elder rule swept over the owned rows ``a .. b-1`` of a slab.

    ``V`` holds the slab's rows (``W`` pixels each) with a ghost row above
    ``a`` if ``remote_lo`` and below ``b - 1`` if ``remote_hi`` (rows of other
    ranks); ``order`` is the owned pixels' order by ``(value, position)``
    (positions from row ``a``), swept forwards (sublevel sets, D0) or with
    ``reverse`` backwards (superlevel sets, D1). ``nbrs`` are the graph's
    neighbour offsets. With ``edge_lo``/``edge_hi`` (the first/last rows of
    the image) and ``reverse``, the columns and the image's first and last
    rows are joined to the apex, a vertex older than every other.

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
    N = L * W
    apex = N
    parent = np.full(N + 1, -1, np.int64)
    age = np.empty(N + 1, np.int64)
    opened = np.zeros(N + 1, np.bool_)
    parent[apex] = apex
    age[apex] = -1
    n = order.size
    born = np.empty(n, np.int64)
    died = np.empty(n, np.int64)
    nd = 0
    ev = np.empty(4 * W + 16, np.int64)
    ptr = np.zeros(ev.size + 1, np.int64)
    parts = np.empty(4 * ev.size, np.int64)
    ne = 0
    npart = 0
    roots = np.empty(nbrs.shape[0] + 1, np.int64)
    remote = np.empty(nbrs.shape[0], np.int64)
    base = a * W
    for k in range(n):
        v = base + order[n - 1 - k if reverse else k]
        x = v % W
        y = v // W
        nr = 0
        nrem = 0
        iface = (y == a and remote_lo) or (y == b - 1 and remote_hi)
        for j in range(nbrs.shape[0]):
            xx = x + nbrs[j, 0]
            yy = y + nbrs[j, 1]
            if xx < 0 or xx >= W or yy < 0 or yy >= L:
                continue
            u = yy * W + xx
            if yy < a or yy >= b:
                # another rank's pixel: met before v in the sweep's order?
                if reverse:
                    before = V[u] > V[v] or (V[u] == V[v] and u > v)
                else:
                    before = V[u] < V[v] or (V[u] == V[v] and u < v)
                if before:
                    remote[nrem] = u
                    nrem += 1
                continue
            if parent[u] < 0:
                continue
            r = _find(parent, u)
            new = True
            for i in range(nr):
                if roots[i] == r:
                    new = False
                    break
            if new:
                roots[nr] = r
                nr += 1
        if reverse and (x == 0 or x == W - 1 or (y == a and edge_lo) or (y == b - 1 and edge_hi)):
            r = _find(parent, apex)
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
            if old < 0 or age[roots[i]] < age[old]:
                old = roots[i]
        if old < 0:
            parent[v] = v
            age[v] = k
            opened[v] = iface
            old = v
        else:
            parent[v] = old
        emit = iface
        keep = 0
        for i in range(nr):
            r = roots[i]
            if r == old:
                continue
            parent[r] = old
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
                ptr = _grown(ptr, ne + 1)
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
            ptr[ne] = npart
    # the roots no event reached: whole components of their own
    ns = 0
    sealed = np.empty(n, np.int64)
    for i in range(n):
        v = base + order[i]
        if parent[v] == v and not opened[v]:
            sealed[ns] = v
            ns += 1
    return born[:nd].copy(), died[:nd].copy(), sealed[:ns].copy(), ev[:ne].copy(), \
        ptr[:ne + 1].copy(), parts[:npart].copy()


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
