"""numba kernels of the persistence of 2-D images (row slabs of the cubical
complex, V-construction): the stable order of a slab's pixels by a radix
sort, the elder rule swept over the slab in that order, and the elder rule
over the events the slabs could not decide. Not collective."""

from __future__ import annotations

import numpy as np

from dmsolve.jit import njit

__all__ = ["float_keys", "radix_order", "slab_scan", "slab_labels", "candidate_labels",
           "slab_sweep", "event_elder", "NEIGHBOURS_8"]

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
def _interface(y, a, b, sides):  # pragma: no cover
    """Whether row ``y`` of a slab touches another rank's rows."""
    return (y == a and sides & 1 != 0) or (y == b - 1 and sides & 2 != 0)


@njit(cache=True, nogil=True, inline="always")
def _border(x, y, W, a, b, sides):  # pragma: no cover
    """Whether pixel ``(x, y)`` of a slab lies on the image's border."""
    return x == 0 or x == W - 1 or (y == a and sides & 4 != 0) or (y == b - 1 and sides & 8 != 0)


@njit(cache=True, nogil=True, inline="always")
def _before(V, u, v, reverse):  # pragma: no cover
    """Whether pixel ``u`` comes before pixel ``v`` in the sweep: the order of
    ``(value, position)``, or its reverse."""
    if reverse:
        return V[u] > V[v] or (V[u] == V[v] and u > v)
    return V[u] < V[v] or (V[u] == V[v] and u < v)


@njit(cache=True, nogil=True)
def slab_scan(V, W, a, b, sides, links0, links1, ptr0, ptr1):  # pragma: no cover
    """One pass over the owned rows ``a .. b-1`` of a slab for both sweeps.

    ``V`` holds the slab's rows (``W`` pixels each) and the other ranks'
    rows next to them; ``sides`` says what lies beyond the slab: bit 1 (2)
    another rank's rows above row ``a`` (below row ``b - 1``), bit 4 (8) the
    image's first (last) row is ``a`` (``b - 1``). Only the owned rows are
    read here.

    Each pixel's neighbours among :data:`NEIGHBOURS_8` make a mask of those
    before it in the order of ``(value, position)`` (the lower star on the
    9-point star); ``links0`` / ``links1`` give the number of components of
    its lower link in the sublevel sweep (the axis neighbours joined through
    the squares of the lower star) and of its upper link in the superlevel
    sweep (the dual graph's 8 neighbours). ``ptr0`` points each pixel to its
    lowest axis neighbour, ``ptr1`` to its highest of the 8, or to itself
    when there is none (a terminal); in ``ptr1`` the image's border points
    to the apex (position ``V.size``) instead.

    Returns ``(cand0, term0, cand1, term1)``: for each sweep the pixels where
    components may meet (ascending: a link of two components or more, a
    neighbour on another rank, and in the superlevel sweep the border), and
    the terminals.
    """
    L = V.size // W
    apex = L * W
    ptr1[apex] = apex
    n = (b - a) * W
    cand0 = np.empty(n, np.int64)
    term0 = np.empty(n, np.int64)
    cand1 = np.empty(n, np.int64)
    term1 = np.empty(n, np.int64)
    nc0 = nt0 = nc1 = nt1 = 0
    for y in range(a, b):
        up = y > a
        down = y < b - 1
        iface = _interface(y, a, b, sides)
        edge_row = (y == a and sides & 4 != 0) or (y == b - 1 and sides & 8 != 0)
        for x in range(W):
            v = y * W + x
            f = V[v]
            left = x > 0
            right = x < W - 1
            # neighbours in position order, those before v by value (ties: position)
            lower = 0
            exist = 0
            lo_v = np.inf               # the lowest of the axis neighbours and v
            lo_p = -1
            hi_v = -np.inf              # the highest of the 8 and v
            hi_p = -1
            # in position order: among equal values the lowest is the first
            # (strict <) and the highest the last (>=)
            if up:
                if left:
                    u = v - W - 1
                    g = V[u]
                    exist |= 1
                    lower |= np.int64(g <= f)
                    if g >= hi_v:
                        hi_v = g
                        hi_p = u
                u = v - W
                g = V[u]
                exist |= 2
                lower |= np.int64(g <= f) << 1
                if g < lo_v:
                    lo_v = g
                    lo_p = u
                if g >= hi_v:
                    hi_v = g
                    hi_p = u
                if right:
                    u = v - W + 1
                    g = V[u]
                    exist |= 4
                    lower |= np.int64(g <= f) << 2
                    if g >= hi_v:
                        hi_v = g
                        hi_p = u
            if left:
                u = v - 1
                g = V[u]
                exist |= 8
                lower |= np.int64(g <= f) << 3
                if g < lo_v:
                    lo_v = g
                    lo_p = u
                if g >= hi_v:
                    hi_v = g
                    hi_p = u
            if f < lo_v:
                lo_v = f
                lo_p = v
            if f >= hi_v:
                hi_v = f
                hi_p = v
            if right:
                u = v + 1
                g = V[u]
                exist |= 16
                lower |= np.int64(g < f) << 4
                if g < lo_v:
                    lo_v = g
                    lo_p = u
                if g >= hi_v:
                    hi_v = g
                    hi_p = u
            if down:
                if left:
                    u = v + W - 1
                    g = V[u]
                    exist |= 32
                    lower |= np.int64(g < f) << 5
                    if g >= hi_v:
                        hi_v = g
                        hi_p = u
                u = v + W
                g = V[u]
                exist |= 64
                lower |= np.int64(g < f) << 6
                if g < lo_v:
                    lo_v = g
                    lo_p = u
                if g >= hi_v:
                    hi_v = g
                    hi_p = u
                if right:
                    u = v + W + 1
                    g = V[u]
                    exist |= 128
                    lower |= np.int64(g < f) << 7
                    if g >= hi_v:
                        hi_v = g
                        hi_p = u
            ptr0[v] = lo_p
            if lo_p == v:
                term0[nt0] = v
                nt0 += 1
            border = not left or not right or edge_row
            if border:
                ptr1[v] = apex
            else:
                ptr1[v] = hi_p
                if hi_p == v:
                    term1[nt1] = v
                    nt1 += 1
            if links0[lower] >= 2 or iface:
                cand0[nc0] = v
                nc0 += 1
            if links1[exist & ~lower] >= 2 or iface or border:
                cand1[nc1] = v
                nc1 += 1
    return cand0[:nc0].copy(), term0[:nt0].copy(), cand1[:nc1].copy(), term1[:nt1].copy()


@njit(cache=True, nogil=True)
def slab_labels(ptr, start, stop, term, first):  # pragma: no cover
    """Each pointer of positions ``start .. stop-1`` followed to its terminal
    and replaced by ``-1 - label``, the label of terminal ``term[i]`` being
    ``first + i`` (``term`` in the sweep's order, so a smaller label is an
    older component)."""
    for i in range(term.size):
        ptr[term[i]] = -1 - (first + i)
    for v in range(start, stop):
        r = v
        while ptr[r] >= 0:
            r = ptr[r]
        lab = ptr[r]
        u = v
        while ptr[u] >= 0:
            nxt = ptr[u]
            ptr[u] = lab
            u = nxt


@njit(cache=True, nogil=True)
def candidate_labels(V, W, a, b, cand, order, ptr, reverse, nodes, sides, width):
    # pragma: no cover
    """The candidates in the sweep's order and, for each, the distinct labels
    (:func:`slab_labels`) of the graph's neighbours (``nodes``, a mask over
    :data:`NEIGHBOURS_8`) in the owned rows before it in the sweep, and with
    ``reverse`` the apex's (label 0) on the image's border: rows of
    ``width``, padded with -1. ``order`` is the candidates' order by
    ``(value, position)``; the sweep takes it backwards with ``reverse``.
    Reads the pixels in position order and writes each row where the sweep
    will read it, so that the sweep reads its input in order."""
    n = cand.size
    at = np.empty(n, np.int64)
    for k in range(n):
        at[order[k]] = n - 1 - k if reverse else k
    out = np.full((n, width), -1, np.int32)
    pix = np.empty(n, np.int64)
    for i in range(n):
        v = cand[i]
        row = at[i]
        pix[row] = v
        x = v % W
        y = v // W
        m = 0
        for j in range(8):
            if not (nodes >> j) & 1:
                continue
            xx = x + NEIGHBOURS_8[j, 0]
            yy = y + NEIGHBOURS_8[j, 1]
            if xx < 0 or xx >= W or yy < a or yy >= b:
                continue
            u = yy * W + xx
            if not _before(V, u, v, reverse):
                continue
            lab = -1 - ptr[u]
            new = True
            for t in range(m):
                if out[row, t] == lab:
                    new = False
                    break
            if new:
                out[row, m] = lab
                m += 1
        if reverse and _border(x, y, W, a, b, sides):
            out[row, m] = 0
    return pix, out


@njit(cache=True, nogil=True)
def slab_sweep(V, W, a, b, pix, labels, ptr, tpix, reverse, nodes, sides):  # pragma: no cover
    """The elder rule at the candidates of a slab, in the sweep's order.

    ``pix`` are the candidates of :func:`slab_scan` in the sweep's order of
    ``(value, position)``: forwards (sublevel sets, D0) or with ``reverse``
    backwards (superlevel sets, D1, the border joined to the apex: label 0,
    older than every other); ``labels`` their neighbours' labels (both
    from :func:`candidate_labels`), ``ptr`` the labels of
    every pixel (:func:`slab_labels`) and ``tpix`` the terminal pixel of
    each label (-1 for the apex). A pixel that is not a candidate joins its
    pointer's component and merges nothing.

    A component is *open* once it holds a pixel with a neighbour on another
    rank. At a merge, every sealed (not open) component younger than the
    oldest one there dies: its pair is decided here. The rest (the oldest
    and the open ones), and every pixel with a neighbour on another rank,
    make an *event*: the pixel, the components' terminals and the other
    ranks' neighbours met before it (positions in ``V``; -1 the apex), for
    :func:`event_elder` to decide.

    Returns ``(born, died, sealed, events, ptr, parts)``: the decided pairs
    (the dying component's terminal, the pixel), the terminals of the
    components no event reached (their classes never die), and the events
    (pixel, participants ``parts[ptr[i]:ptr[i+1]]``).
    """
    L = V.size // W
    m = tpix.size
    parent = np.arange(m).astype(labels.dtype)
    opened = np.zeros(m, np.bool_)
    if reverse:
        opened[0] = True                # the apex is every rank's
    n = pix.size
    born = np.empty(m, np.int64)
    died = np.empty(m, np.int64)
    nd = 0
    ev = np.empty(4 * W + 16, np.int64)
    evp = np.zeros(ev.size + 1, np.int64)
    parts = np.empty(4 * ev.size, np.int64)
    ne = 0
    npart = 0
    roots = np.empty(labels.shape[1], np.int64)
    remote = np.empty(6, np.int64)     # a slab of one row has two faces
    width = labels.shape[1]
    for i in range(n):
        v = pix[i]
        y = v // W
        nr = 0
        for t in range(width):
            lab = labels[i, t]
            if lab < 0:
                break
            r = _find(parent, lab)
            new = True
            for q in range(nr):
                if roots[q] == r:
                    new = False
                    break
            if new:
                roots[nr] = r
                nr += 1
        iface = _interface(y, a, b, sides)
        nrem = 0
        if iface:
            # the other rank's neighbours met before v
            x = v % W
            for j in range(8):
                if not (nodes >> j) & 1:
                    continue
                xx = x + NEIGHBOURS_8[j, 0]
                yy = y + NEIGHBOURS_8[j, 1]
                if xx < 0 or xx >= W or yy < 0 or yy >= L or (a <= yy < b):
                    continue
                u = yy * W + xx
                if _before(V, u, v, reverse):
                    remote[nrem] = u
                    nrem += 1
        # the oldest component here (the smallest label) survives the merge
        old = -1
        for q in range(nr):
            if old < 0 or roots[q] < old:
                old = roots[q]
        if old < 0:
            old = -1 - ptr[v]           # a terminal: a component of its own
            opened[old] = iface
        emit = iface
        keep = 0
        for q in range(nr):
            r = roots[q]
            if r == old:
                continue
            parent[r] = old
            if opened[r]:
                roots[keep] = r         # undecided: an event
                keep += 1
                emit = True
            else:
                born[nd] = tpix[r]
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
            if tpix[old] != v:
                parts[npart] = tpix[old]
                npart += 1
            for q in range(keep):
                parts[npart] = tpix[roots[q]]
                npart += 1
            for q in range(nrem):
                parts[npart] = remote[q]
                npart += 1
            ne += 1
            evp[ne] = npart
    # the components no event reached: whole components of their own
    ns = 0
    sealed = np.empty(m, np.int64)
    for r in range(m):
        if parent[r] == r and not opened[r]:
            sealed[ns] = tpix[r]
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
