"""Compiled vector updates of the CG family, fused into one pass over the vectors.

Compiled by numba on their first call (not on import) and cached on disk
next to this module.

A CG iteration updates ``x`` and ``r`` and then reads ``r`` again for its
norm; pipelined CG updates eight vectors and then reads three pairs of them
for its inner products. Done with BLAS ``axpy``/``dot`` and numpy, each
operation is a pass over memory; these kernels make one pass (as PETSc's
``VecAXPBYPCZ``, ``VecMAXPY`` and the fused loops of ``KSPPIPECG`` do),
returning the inner products of the updated vectors with them. They compute
in the vectors' dtype (float64 or complex128; ``conj`` on the first factor
of each inner product, as ``np.vdot``).

Sums over the entries use :data:`LANES` partial sums (two in
:func:`pipecg_update`, whose eight updates per entry give the additions
other work to wait on), each taking every ``LANES``-th entry, added in a
fixed order at the end: the order does not depend on the data, so a sum is
the same on every run, and the independent chains keep the additions from
waiting on each other (one chain over a million entries costs more than the
memory traffic).

Not collective; nothing is allocated per call.
"""

from __future__ import annotations

from ..jit import njit

__all__ = ["LANES", "cg_update", "xpay", "dot2", "pipecg_update", "pipecg_dots", "axpy_plain",
           "cg_update_lanes", "dot2_lanes", "pipecg_update_lanes", "pipecg_dots_lanes"]

#: Independent partial sums per inner product.
LANES = 4


@njit(cache=True, nogil=True, boundscheck=False)
def cg_update(alpha, p, q, x, r):  # pragma: no cover
    """``x += alpha p; r -= alpha q``; returns ``r^H r`` (real) of the new ``r``."""
    n = r.shape[0]
    s0 = s1 = s2 = s3 = 0.0
    i = 0
    while i + 4 <= n:
        x[i] += alpha * p[i]
        x[i + 1] += alpha * p[i + 1]
        x[i + 2] += alpha * p[i + 2]
        x[i + 3] += alpha * p[i + 3]
        r0 = r[i] - alpha * q[i]
        r1 = r[i + 1] - alpha * q[i + 1]
        r2 = r[i + 2] - alpha * q[i + 2]
        r3 = r[i + 3] - alpha * q[i + 3]
        r[i], r[i + 1], r[i + 2], r[i + 3] = r0, r1, r2, r3
        s0 += (r0.conjugate() * r0).real
        s1 += (r1.conjugate() * r1).real
        s2 += (r2.conjugate() * r2).real
        s3 += (r3.conjugate() * r3).real
        i += 4
    while i < n:
        x[i] += alpha * p[i]
        ri = r[i] - alpha * q[i]
        r[i] = ri
        s0 += (ri.conjugate() * ri).real
        i += 1
    return (s0 + s1) + (s2 + s3)


@njit(cache=True, nogil=True, boundscheck=False)
def xpay(beta, z, p):  # pragma: no cover
    """``p = z + beta p`` in one pass."""
    for i in range(p.shape[0]):
        p[i] = z[i] + beta * p[i]


@njit(cache=True, nogil=True, boundscheck=False)
def dot2(a, b, c, d, out):  # pragma: no cover
    """``out[0] = a^H b``, ``out[1] = c^H d`` in one pass (some of the four
    may be the same array)."""
    n = a.shape[0]
    zero = out[0] * 0
    s0 = s1 = s2 = s3 = zero
    t0 = t1 = t2 = t3 = zero
    i = 0
    while i + 4 <= n:
        s0 += a[i].conjugate() * b[i]
        s1 += a[i + 1].conjugate() * b[i + 1]
        s2 += a[i + 2].conjugate() * b[i + 2]
        s3 += a[i + 3].conjugate() * b[i + 3]
        t0 += c[i].conjugate() * d[i]
        t1 += c[i + 1].conjugate() * d[i + 1]
        t2 += c[i + 2].conjugate() * d[i + 2]
        t3 += c[i + 3].conjugate() * d[i + 3]
        i += 4
    while i < n:
        s0 += a[i].conjugate() * b[i]
        t0 += c[i].conjugate() * d[i]
        i += 1
    out[0] = (s0 + s1) + (s2 + s3)
    out[1] = (t0 + t1) + (t2 + t3)


@njit(inline="always", boundscheck=False)
def _pipe_entry(i, alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r):  # pragma: no cover
    # one entry of pipecg_update: its updates, and the terms of its sums
    zi = n_[i] + beta * z[i]
    qi = m[i] + beta * q[i]
    si = w[i] + beta * s[i]
    pi = u[i] + beta * p[i]
    z[i] = zi
    q[i] = qi
    s[i] = si
    p[i] = pi
    x[i] += alpha * pi
    ri = r[i] - alpha * si
    ui = u[i] - alpha * qi
    wi = w[i] - alpha * zi
    r[i] = ri
    u[i] = ui
    w[i] = wi
    return _pipe_terms(ri, ui, wi, norm)


@njit(inline="always")
def _pipe_terms(ri, ui, wi, norm):  # pragma: no cover
    # one entry's terms of pipelined CG's three inner products
    if norm == 0:
        ei = ri.conjugate() * ri
    elif norm == 1:
        ei = ui.conjugate() * ui
    else:
        ei = ri.conjugate() * ui
    return ri.conjugate() * ui, ui.conjugate() * wi, ei


@njit(cache=True, nogil=True, boundscheck=False)
def pipecg_dots(norm, w, u, r, out):  # pragma: no cover
    """The inner products :func:`pipecg_update` leaves in ``out``, of the
    vectors as they are: the same terms summed in the same order, so that an
    iteration that starts from them (the first, one after a restart or a
    resumed checkpoint) computes what the fused pass would have."""
    N = r.shape[0]
    zero = out[0] * 0
    g0 = g1 = d0 = d1 = e0 = e1 = zero
    i = 0
    while i + 2 <= N:
        a, b, c = _pipe_terms(r[i], u[i], w[i], norm)
        g0 += a
        d0 += b
        e0 += c
        a, b, c = _pipe_terms(r[i + 1], u[i + 1], w[i + 1], norm)
        g1 += a
        d1 += b
        e1 += c
        i += 2
    if i < N:
        a, b, c = _pipe_terms(r[i], u[i], w[i], norm)
        g0 += a
        d0 += b
        e0 += c
    out[0] = g0 + g1
    out[1] = d0 + d1
    out[2] = e0 + e1


@njit(cache=True, nogil=True, boundscheck=False)
def pipecg_update(alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r, out):  # pragma: no cover
    """One pass of the pipelined CG recurrences (Ghysels & Vanroose 2014,
    Alg. 3) and the next iteration's inner products::

        z = n + beta z;  q = m + beta q;  s = w + beta s;  p = u + beta p
        x += alpha p;    r -= alpha s;    u -= alpha q;    w -= alpha z

    then ``out[0] = r^H u``, ``out[1] = u^H w`` and ``out[2]`` the norm's
    inner product of the new vectors: ``r^H r`` (``norm`` 0), ``u^H u`` (1)
    or ``r^H u`` (2). Two partial sums each (the eight updates give the
    additions enough other work to wait on)."""
    N = r.shape[0]
    zero = out[0] * 0
    g0 = g1 = d0 = d1 = e0 = e1 = zero
    i = 0
    while i + 2 <= N:
        a, b, c = _pipe_entry(i, alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r)
        g0 += a
        d0 += b
        e0 += c
        a, b, c = _pipe_entry(i + 1, alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r)
        g1 += a
        d1 += b
        e1 += c
        i += 2
    if i < N:
        a, b, c = _pipe_entry(i, alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r)
        g0 += a
        d0 += b
        e0 += c
    out[0] = g0 + g1
    out[1] = d0 + d1
    out[2] = e0 + e1


@njit(cache=True, nogil=True, boundscheck=False)
def axpy_plain(alpha, x, y):  # pragma: no cover
    """``y += alpha * x``, the product rounded before the sum as numpy rounds
    ``y + alpha * x`` (BLAS ``axpy`` may fuse them, in some entries and not
    others): an entry's result does not depend on its position, which
    reproducible mode needs."""
    for i in range(y.shape[0]):
        y[i] += alpha * x[i]


# -- by lanes, for threads: each lane is one call of the kernel above on the
# lane's slice, so a lane's sum does not depend on which thread took it; the
# caller adds the lane sums in lane order (dmsolve._blocks.lane_total)
@njit(cache=True, nogil=True, boundscheck=False)
def cg_update_lanes(alpha, p, q, x, r, bounds, l0, l1, partial):  # pragma: no cover
    """:func:`cg_update` on lanes ``l0 .. l1 - 1`` (``bounds[l] ..
    bounds[l + 1]``), lane ``l``'s ``r^H r`` into ``partial[l]``."""
    for lane in range(l0, l1):
        lo, hi = bounds[lane], bounds[lane + 1]
        partial[lane] = cg_update(alpha, p[lo:hi], q[lo:hi], x[lo:hi], r[lo:hi])


@njit(cache=True, nogil=True, boundscheck=False)
def dot2_lanes(a, b, c, d, bounds, l0, l1, partial):  # pragma: no cover
    """:func:`dot2` on lanes ``l0 .. l1 - 1``, lane ``l``'s pair into ``partial[l]``."""
    for lane in range(l0, l1):
        lo, hi = bounds[lane], bounds[lane + 1]
        dot2(a[lo:hi], b[lo:hi], c[lo:hi], d[lo:hi], partial[lane])


@njit(cache=True, nogil=True, boundscheck=False)
def pipecg_update_lanes(alpha, beta, norm, n_, m, w, u, z, q, s, p, x, r, bounds, l0, l1,
                        partial):  # pragma: no cover
    """:func:`pipecg_update` on lanes ``l0 .. l1 - 1``, lane ``l``'s three
    inner products into ``partial[l]``."""
    for lane in range(l0, l1):
        lo, hi = bounds[lane], bounds[lane + 1]
        pipecg_update(alpha, beta, norm, n_[lo:hi], m[lo:hi], w[lo:hi], u[lo:hi], z[lo:hi],
                      q[lo:hi], s[lo:hi], p[lo:hi], x[lo:hi], r[lo:hi], partial[lane])


@njit(cache=True, nogil=True, boundscheck=False)
def pipecg_dots_lanes(norm, w, u, r, bounds, l0, l1, partial):  # pragma: no cover
    """:func:`pipecg_dots` on lanes ``l0 .. l1 - 1``: the sums
    :func:`pipecg_update_lanes` leaves, lane by lane."""
    for lane in range(l0, l1):
        lo, hi = bounds[lane], bounds[lane + 1]
        pipecg_dots(norm, w[lo:hi], u[lo:hi], r[lo:hi], partial[lane])
