"""Simplicial filters: polynomials of the lower and upper Hodge Laplacians,
their design on a frequency response, and spectral bounds by Lanczos.

A k-simplicial signal ``x`` (a k-cochain) is filtered by
``H = sum_i a_i L_down^i + sum_j b_j L_up^j`` with ``L_down = B_k^T B_k`` and
``L_up = B_{k+1} B_{k+1}^T`` (Yang, Isufi, Schaub and Leus 2022). On an
eigenvector of ``L_down`` with eigenvalue ``lam > 0`` (a gradient flow, for
k = 1) the response is ``p(lam) + q(0)``; on an eigenvector of ``L_up`` with
``mu > 0`` (a curl flow) it is ``p(0) + q(mu)``; on a harmonic one,
``p(0) + q(0)``, where ``p`` and ``q`` are the two polynomials.
"""

from __future__ import annotations

import numbers

import numpy as np
from mpi4py import MPI

from dmsolve import DistCSR, DistVector
from dmsolve.krylov import ConvergenceError
from dmsolve.validate import agreed, check_choice, check_int, check_real

from ..domains import check_complex as _door
from ._hodge import _laplacian

__all__ = ["SimplicialFilter", "design_filter", "chebyshev_filter", "component_filter",
           "spectral_bounds", "laplacian_parts"]

BASES = ("monomial", "chebyshev")
COMPONENTS = ("gradient", "curl", "harmonic")


# -- operators ------------------------------------------------------------------------------
def laplacian_parts(cx, k: int) -> tuple[DistCSR, DistCSR]:
    """``(L_down, L_up)`` of the k-cochains: ``B_k^T B_k`` and ``B_{k+1} B_{k+1}^T``.

    Either is the zero matrix where it does not exist (``L_down`` for k = 0,
    ``L_up`` for k at the complex's dimension). Collective on ``cx.comm``
    (two BSP supersteps of assembly the first time). The complex remembers
    the two matrices, as the filters, :func:`spectral_bounds` and the flow
    estimators share them, and this returns copies of them.

    Raises
    ------
    TypeError
        If ``cx`` is not a SimplicialComplex.
    ValueError
        On every rank, if ``k`` is not an integer in ``[0, cx.dimension]``.
    """
    check_complex(cx)
    with agreed(cx.comm):
        k = check_k(cx, k)
    return tuple(L.copy() for L in _parts(cx, k))


def _parts(cx, k: int) -> tuple[DistCSR, DistCSR]:
    """The complex's ``(L_down, L_up)``, assembled once (not to be modified)."""
    key = ("parts", k)
    if key not in cx._operators:
        cx._operators[key] = (_laplacian(cx, k, "down"), _laplacian(cx, k, "up"))
    return cx._operators[key]


def _bounds(cx, k: int, steps: int = 30) -> tuple[float, float]:
    """:func:`spectral_bounds` without the checks, computed once per ``(k, steps)``."""
    key = ("bounds", k, steps)
    if key not in cx._operators:
        cx._operators[key] = tuple(_bound(L, steps) for L in _parts(cx, k))
    return cx._operators[key]


def spectral_bounds(cx, k: int = 1, *, steps: int = 30) -> tuple[float, float]:
    """Upper bounds ``(lam_down, lam_up)`` on the spectra of ``L_down`` and ``L_up``.

    Each is the Gershgorin bound (the largest absolute row sum, a guaranteed
    bound) unless ``steps`` Lanczos steps have converged: when the residual
    norm ``|beta_m y_m|`` of the largest Ritz value ``theta`` is at most 1%
    of it, the bound is the smaller of the two and ``theta + |beta_m y_m|``
    (an eigenvalue lies within the residual norm of ``theta``, and the
    largest Ritz value converges to the largest eigenvalue first), raised by
    1%. A Chebyshev filter on an interval that misses part of the spectrum
    grows there like ``T_n`` outside ``[-1, 1]``, so an unconverged
    estimate is not used. No eigendecomposition is formed. A part that is
    zero gets 0.

    Collective on ``cx.comm``: ``2 * steps`` matvecs and ``4 * steps``
    reductions at most, the first time for a given ``(k, steps)``; the
    complex remembers the bounds (and the Laplacian parts).

    Raises
    ------
    TypeError, ValueError
        On every rank, as :func:`laplacian_parts`, and if ``steps`` is not a
        positive integer.
    """
    check_complex(cx)
    with agreed(cx.comm):
        k = check_k(cx, k)
        steps = check_int("steps", steps, low=1)
    return _bounds(cx, k, steps)


def _bound(L: DistCSR, steps: int) -> float:
    """An upper bound on the largest eigenvalue of a symmetric PSD DistCSR."""
    import scipy.linalg as sla
    comm = L.comm
    gersh = L.row_sums(absolute=True).local
    gersh = comm.allreduce(float(gersh.max()) if gersh.size else 0.0, op=MPI.MAX)
    if gersh == 0.0:
        return 0.0
    lay = L.row_layout
    # a start vector that depends on the global index only
    i = np.arange(lay.start, lay.stop, dtype=np.float64)
    v = DistVector(lay, 1.0 + 0.5 * np.sin(1.7 * i + 0.3) + 0.25 * np.cos(0.37 * i))
    v.scale(1.0 / v.norm())
    v_old, w = v.zeros_like(), v.zeros_like()
    alphas, betas = [], []
    beta = 0.0
    for _ in range(min(steps, lay.global_size)):
        L.matvec(v, out=w)
        alpha = w.dot(v)
        w.axpy(-alpha, v).axpy(-beta, v_old)
        beta = w.norm()
        alphas.append(alpha)
        betas.append(beta)
        if beta <= 1e-12 * max(abs(alpha), 1.0):
            break
        v_old.set(v)
        v.set(w).scale(1.0 / beta)
    theta, y = sla.eigh_tridiagonal(np.array(alphas), np.array(betas[:-1]))
    # The top Ritz value is within |beta_m y_m| of an eigenvalue; once that
    # is small it is the top eigenvalue in practice (a start vector with no
    # component along the top eigenvector is the exception). Until then only
    # the Gershgorin bound is safe.
    resid = abs(betas[-1] * y[-1, -1])
    if resid > 1e-2 * theta[-1]:
        return 1.01 * gersh
    return 1.01 * min(gersh, float(theta[-1] + resid))


# -- the filter -----------------------------------------------------------------------------
class SimplicialFilter:
    """``H = sum_i lower[i] L_down^i + sum_j upper[j] L_up^j``, applied by matvecs.

    Parameters
    ----------
    cx : SimplicialComplex
    k : int
        The simplex dimension of the signals (1 for edge flows).
    lower, upper : sequence of float
        Coefficients of the polynomials ``p`` of ``L_down`` and ``q`` of
        ``L_up``, constant term first. Both constant terms multiply the
        identity (their sum is the identity's coefficient). Either may be
        empty; not both.
    basis : {"monomial", "chebyshev"}
        ``p(lam) = sum_i lower[i] lam^i``, or ``sum_i lower[i] T_i(2 lam / a - 1)``
        with ``a = spectrum[0]`` (``spectrum[1]`` for ``q``): Chebyshev
        polynomials on ``[0, a]``, applied by their three-term recurrence,
        which stays well conditioned at high orders.
    spectrum : (float, float), optional
        The intervals ``[0, a]`` of the Chebyshev basis (upper bounds on the
        spectra of ``L_down`` and ``L_up``); default :func:`spectral_bounds`.
        Ignored for the monomial basis.

    Attributes
    ----------
    lower, upper : ndarray
    orders : (int, int)
        The degrees of ``p`` and ``q`` (-1 for an empty one).
    L_down, L_up : DistCSR
        The complex's Laplacian parts, shared with every filter and flow
        estimator on it: read them, do not modify them (
        :func:`laplacian_parts` gives copies).

    Notes
    -----
    Collective on ``cx.comm`` to construct (assembles the two Laplacians,
    once per complex).
    :meth:`apply` costs ``orders[0] + orders[1]`` matvecs and one reduction
    (a flag: the signal is finite); with ``out`` given it allocates nothing
    (the work vectors are made once, on the first call).

    Raises
    ------
    TypeError
        If ``cx`` is not a SimplicialComplex; on every rank, if a coefficient
        is not a real number.
    ValueError
        On every rank, for ``k`` out of range, coefficients that are not
        finite or not 1-D, both lists empty, an unknown basis or a spectrum
        that is not two non-negative numbers.

    References
    ----------
    .. [1] M. Yang, E. Isufi, M. T. Schaub and G. Leus, "Simplicial
       convolutional filters", IEEE TSP 70, 2022.
    .. [2] S. Barbarossa and S. Sardellitti, "Topological signal processing
       over simplicial complexes", IEEE TSP 68, 2020.
    """

    def __init__(self, cx, k: int = 1, lower=(), upper=(), *, basis: str = "monomial",
                 spectrum=None):
        check_complex(cx)
        with agreed(cx.comm):
            k = check_k(cx, k)
            lower = _coefficients("lower", lower)
            upper = _coefficients("upper", upper)
            if lower.size == 0 and upper.size == 0:
                raise ValueError("a filter needs at least one coefficient (lower or upper)")
            basis = check_choice("basis", basis, BASES)
            if spectrum is not None:
                spectrum = _check_spectrum(spectrum)
        self.cx, self.k, self.basis = cx, k, basis
        self.lower, self.upper = lower, upper
        self.L_down, self.L_up = _parts(cx, k)
        if basis == "chebyshev" and spectrum is None:
            spectrum = _bounds(cx, k)
        self.spectrum = spectrum
        self._work = None

    @property
    def orders(self) -> tuple[int, int]:
        """Degrees of ``p`` and ``q``. Not collective."""
        return self.lower.size - 1, self.upper.size - 1

    def __repr__(self) -> str:
        return "SimplicialFilter(k=%d, basis=%r, orders=%s)" % (self.k, self.basis, self.orders)

    # -- applying ---------------------------------------------------------------------------
    def apply(self, signal, out: DistVector | None = None) -> DistVector:
        """``H @ signal``: a DistVector on ``cx.simplex_layout(k)``.

        ``signal`` is a DistVector on that layout or a global array in
        ``cx.simplices(k)`` order. Collective on ``cx.comm`` (the matvecs
        and one reduction of a flag, that the signal is finite); allocates
        nothing when ``signal`` and ``out`` are DistVectors, after the first
        call.

        Raises
        ------
        ValueError, TypeError
            On every rank, for a signal of the wrong length or layout, not
            real or not finite, or an ``out`` on another layout.
        """
        lay = self.cx.simplex_layout(self.k)
        x = signal
        if not (isinstance(signal, DistVector) and signal.layout == lay
                and signal.dtype == np.float64):
            x = self.cx.cochain(signal, self.k, "signal")
        else:
            _check_finite(self.cx.comm, x, "signal")
        with agreed(self.cx.comm):
            if out is not None and not (isinstance(out, DistVector) and out.layout == lay
                                        and out.dtype == np.float64):
                raise ValueError("out must be a float64 DistVector on cx.simplex_layout(%d)"
                                 % self.k)
        if self._work is None:
            self._work = [x.zeros_like() for _ in range(4)]
        y = out if out is not None else x.zeros_like()
        y.fill(0.0)
        for coeffs, L, a in ((self.lower, self.L_down, self._interval(0)),
                             (self.upper, self.L_up, self._interval(1))):
            if coeffs.size:
                self._polynomial(coeffs, L, a, x, y)
        return y

    def _interval(self, part: int) -> float:
        return self.spectrum[part] if self.basis == "chebyshev" else 0.0

    def _polynomial(self, c, L, a, x, y) -> None:
        """``y += p(L) x`` with the work vectors; no allocation."""
        t, u, v, s = self._work
        if self.basis == "monomial" or c.size == 1 or a == 0.0:
            if self.basis == "chebyshev":       # a == 0: L is zero, T_i(-1) = (-1)^i
                c = np.array([np.sum(c * (-1.0) ** np.arange(c.size))])
            # Horner: p(L) x = c0 x + L (c1 x + L (c2 x + ...))
            u.set(x).scale(c[-1])
            for ci in c[-2::-1]:
                L.matvec(u, out=t)
                u.set(t).axpy(ci, x)
            y.axpy(1.0, u)
            return
        # Chebyshev on [0, a]: T_0 = x, T_1 = A x, T_{i+1} = 2 A T_i - T_{i-1},
        # with A = (2/a) L - I
        prev, cur = u, v
        prev.set(x)
        y.axpy(c[0], prev)
        L.matvec(x, out=cur)
        cur.scale(2.0 / a).axpy(-1.0, x)
        y.axpy(c[1], cur)
        for ci in c[2:]:
            L.matvec(cur, out=t)
            t.scale(4.0 / a).axpy(-2.0, cur).axpy(-1.0, prev)
            prev, cur, t = cur, t, prev
            y.axpy(ci, cur)
        # keep the rotated buffers for the next call
        self._work = [t, prev, cur, s]

    # -- the response -----------------------------------------------------------------------
    def response(self, lam, part: str = "down") -> np.ndarray:
        """The frequency response at eigenvalues ``lam`` of ``L_down`` (``part="down"``:
        ``p(lam) + q(0)``, the gradient frequencies for k = 1) or of ``L_up``
        (``"up"``: ``p(0) + q(lam)``, the curl frequencies). Not collective."""
        part = check_choice("part", part, ("down", "up"))
        lam = np.asarray(lam, dtype=np.float64)
        p = self._evaluate(self.lower, 0, lam if part == "down" else np.zeros_like(lam))
        q = self._evaluate(self.upper, 1, lam if part == "up" else np.zeros_like(lam))
        return p + q

    @property
    def harmonic_response(self) -> float:
        """``p(0) + q(0)``: the response on harmonic signals. Not collective."""
        z = np.zeros(1)
        return float(self._evaluate(self.lower, 0, z)[0] + self._evaluate(self.upper, 1, z)[0])

    def _evaluate(self, c, part, lam):
        if c.size == 0:
            return np.zeros_like(lam)
        if self.basis == "monomial":
            return np.polynomial.polynomial.polyval(lam, c)
        a = self.spectrum[part]
        t = 2.0 * lam / a - 1.0 if a > 0 else -np.ones_like(lam)
        return np.polynomial.chebyshev.chebval(t, c)


# -- design ---------------------------------------------------------------------------------
def design_filter(cx, k: int = 1, lower=None, upper=None, *, order=4, harmonic=None,
                  basis: str = "chebyshev", samples: int = 100, frequencies=None,
                  spectrum=None) -> SimplicialFilter:
    """A :class:`SimplicialFilter` fitted by least squares to a frequency response.

    The equations, one per sample frequency, are ``p(lam) + q(0) = lower(lam)``
    at the down frequencies, ``p(0) + q(mu) = upper(mu)`` at the up
    frequencies, and ``p(0) + q(0) = harmonic`` when ``harmonic`` is given.
    ``q``'s constant term is zero (``p``'s is the shared identity term).
    The frequencies are ``samples`` Chebyshev points inside ``(0, a)`` of
    each part, ``a`` from :func:`spectral_bounds`: only the spectral range
    is estimated, never an eigendecomposition (a grid-based design). With
    ``frequencies`` the caller chooses them (the eigenvalues, say, when they
    are known: the eigenvalue-based design of [1]_).

    Parameters
    ----------
    cx : SimplicialComplex
    k : int
    lower, upper : callable or float, optional
        Desired responses on the down (gradient) and up (curl) frequencies,
        callables on numpy arrays or constants. At least one.
    order : int or (int, int)
        Degrees of ``p`` and ``q``; an int applies to each part given (an
        absent part has degree 0, or -1 for ``q``).
    harmonic : float, optional
        The desired response on harmonic signals.
    basis : {"chebyshev", "monomial"}
        The basis the coefficients are in (see :class:`SimplicialFilter`);
        the fit is the same polynomial in exact arithmetic, and Chebyshev is
        better conditioned.
    samples : int
        Sample frequencies per part.
    frequencies : (array or None, array or None), optional
        The down and up sample frequencies instead of the grids.
    spectrum : (float, float), optional
        Bounds on the two spectra (default :func:`spectral_bounds`).

    Returns
    -------
    SimplicialFilter

    Raises
    ------
    TypeError, ValueError
        On every rank: ``cx`` or ``k`` as for :class:`SimplicialFilter`, an
        order below 0 or not an integer, neither ``lower`` nor ``upper``, a
        response that is not a callable or a real number or gives values
        that are not finite, fewer than one sample, non-finite frequencies.

    Notes
    -----
    Collective on ``cx.comm``: the Laplacians' assembly and, without
    ``spectrum``, the Lanczos bounds.

    References
    ----------
    .. [1] M. Yang, E. Isufi, M. T. Schaub and G. Leus, "Simplicial
       convolutional filters", IEEE TSP 70, 2022 (Sections V-A, V-B).
    """
    check_complex(cx)
    with agreed(cx.comm):
        k = check_k(cx, k)
        if lower is None and upper is None:
            raise ValueError("give a desired response: lower, upper or both")
        orders = _orders(order, lower is not None, upper is not None)
        harmonic = check_real("harmonic", harmonic, allow_none=True)
        basis = check_choice("basis", basis, BASES)
        samples = check_int("samples", samples, low=1)
        if spectrum is not None:
            spectrum = _check_spectrum(spectrum)
        freqs = _frequencies(frequencies)
    if spectrum is None:
        spectrum = _bounds(cx, k)
    with agreed(cx.comm):
        lam = freqs[0] if freqs[0] is not None else _grid(spectrum[0], samples)
        mu = freqs[1] if freqs[1] is not None else _grid(spectrum[1], samples)
        rows, rhs = [], []
        tmp = SimplicialFilter.__new__(SimplicialFilter)
        tmp.basis, tmp.spectrum = basis, spectrum
        na, nb = orders[0] + 1, max(orders[1], 0)

        def basis_rows(x, part, n, first):
            cols = []
            for i in range(first, first + n):
                e = np.zeros(i + 1)
                e[i] = 1.0
                cols.append(tmp._evaluate(e, part, x))
            return np.array(cols).reshape(n, x.size).T

        def equations(x, target, name, down):
            t = _response_values(name, target, x)
            zero = np.zeros_like(x)
            a = basis_rows(x if down else zero, 0, na, 0)
            b = basis_rows(zero if down else x, 1, nb, 1)
            rows.append(np.hstack((a, b)))
            rhs.append(t)

        if lower is not None:
            equations(lam, lower, "lower", True)
        if upper is not None:
            equations(mu, upper, "upper", False)
        if harmonic is not None:
            z = np.zeros(1)
            w = np.sqrt(max(lam.size if lower is not None else 0,
                            mu.size if upper is not None else 0, 1))
            rows.append(w * np.hstack((basis_rows(z, 0, na, 0), basis_rows(z, 1, nb, 1))))
            rhs.append(np.array([w * harmonic]))
        coef = np.linalg.lstsq(np.vstack(rows), np.concatenate(rhs), rcond=None)[0]
    lower_c = coef[:na]
    upper_c = np.concatenate(([0.0], coef[na:])) if orders[1] >= 1 else np.zeros(0)
    return SimplicialFilter(cx, k, lower_c, upper_c, basis=basis, spectrum=spectrum)


def chebyshev_filter(cx, k: int = 1, lower=None, upper=None, *, order=16,
                     spectrum=None) -> SimplicialFilter:
    """A Chebyshev-basis :class:`SimplicialFilter` that interpolates a response.

    ``p`` interpolates ``lower`` at the ``order + 1`` Chebyshev points of the
    second kind on ``[0, a_down]`` (both ends included, as chebfun's
    ``chebfun(f, [0, a], n)``), and ``q`` interpolates ``upper(mu) -
    upper(0)`` on ``[0, a_up]``, so that ``q(0) = 0``: the down response is
    ``lower(lam)``, the harmonic response ``lower(0)`` and the up response
    ``upper(mu) - upper(0) + lower(0)`` (``upper(mu)`` when the two agree at
    0, as for a smooth low-pass or an extraction filter). An absent part is
    the zero polynomial. Chebyshev interpolation of a smooth response
    converges geometrically with the order [1]_.

    Parameters
    ----------
    cx, k
        As :class:`SimplicialFilter`.
    lower, upper : callable or float, optional
        At least one.
    order : int or (int, int)
        Degrees of ``p`` and ``q``.
    spectrum : (float, float), optional
        Default :func:`spectral_bounds`.

    Returns
    -------
    SimplicialFilter

    Raises
    ------
    TypeError, ValueError
        As :func:`design_filter`.

    Notes
    -----
    Collective on ``cx.comm``, as :func:`design_filter`.

    References
    ----------
    .. [1] L. N. Trefethen, *Approximation Theory and Approximation
       Practice*, SIAM 2013 (Chebyshev interpolants).
    .. [2] D. I. Shuman, P. Vandergheynst and P. Frossard, "Chebyshev
       polynomial approximation for distributed signal processing", DCOSS 2011.
    """
    check_complex(cx)
    with agreed(cx.comm):
        k = check_k(cx, k)
        if lower is None and upper is None:
            raise ValueError("give a desired response: lower, upper or both")
        orders = _orders(order, lower is not None, upper is not None)
        if spectrum is not None:
            spectrum = _check_spectrum(spectrum)
    if spectrum is None:
        spectrum = _bounds(cx, k)
    with agreed(cx.comm):
        lower_c = (_interpolate(lower, "lower", spectrum[0], orders[0]) if lower is not None
                   else np.zeros(1))
        upper_c = np.zeros(0)
        if upper is not None and orders[1] >= 0:
            u0 = _response_values("upper", upper, np.zeros(1))[0]
            upper_c = _interpolate(
                lambda mu: _response_values("upper", upper, mu) - u0, "upper",
                spectrum[1], orders[1])
    return SimplicialFilter(cx, k, lower_c, upper_c, basis="chebyshev", spectrum=spectrum)


def component_filter(cx, component: str, *, cutoff: float, order: int = 32,
                     steepness: float | None = None, spectrum=None) -> SimplicialFilter:
    """A Chebyshev filter that extracts the gradient, curl or harmonic part of an edge flow.

    The ideal responses are steps at 0 (for the gradient part: 1 on the down
    frequencies ``lam > 0``, 0 on the up and harmonic ones). They are
    smoothed by the logistic ``s(lam) = 1 / (1 + exp(-steepness (lam -
    cutoff)))`` (as pytspl's Chebyshev design), then interpolated by
    :func:`chebyshev_filter`: gradient ``lower = s``; curl ``upper = s``
    (``lower = 0``); harmonic ``lower = upper = 1 - s``. The error on a
    frequency ``lam`` is about ``|s(lam) - step(lam)|`` plus the
    interpolation error: small when no eigenvalue lies near or below
    ``cutoff``. Compare :func:`hodge_decomposition`, which is exact.

    Parameters
    ----------
    cx : SimplicialComplex
    component : {"gradient", "curl", "harmonic"}
    cutoff : float
        Where the smoothed step rises: below the smallest nonzero
        eigenvalue of the part, for an accurate extraction.
    order : int
    steepness : float, optional
        Default ``10 / cutoff`` (the step is within ``5e-5`` of 0 at 0 and of
        1 at ``2 cutoff``).
    spectrum : (float, float), optional

    Raises
    ------
    TypeError, ValueError
        On every rank, for an unknown component, a cutoff or steepness that
        is not a positive number, or an order below 0.

    Notes
    -----
    Collective on ``cx.comm``, as :func:`chebyshev_filter`; k = 1.

    Examples
    --------
    A triangulated 3 x 3 square with the middle square left open (the
    smallest nonzero eigenvalue of its ``L_1`` is 0.59), and the harmonic
    part of a flow turning around the hole, by a filter of order 32 and by
    :func:`hodge_decomposition`:

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> import topology
    >>> comm = MPI.COMM_WORLD
    >>> v = np.arange(16).reshape(4, 4)                   # vertex (x, y) is 4 y + x
    >>> a, b, c, d = v[:-1, :-1].ravel(), v[:-1, 1:].ravel(), v[1:, :-1].ravel(), v[1:, 1:].ravel()
    >>> keep = np.arange(9) != 4                          # the middle square left open
    >>> triangles = np.vstack([np.c_[a, b, d][keep], np.c_[a, c, d][keep]])
    >>> cx = topology.SimplicialComplex([triangles[comm.rank::comm.size]], comm)
    >>> edges = cx.simplices(1)                           # sorted rows (a, b), a < b
    >>> x, y = v.ravel() % 4, v.ravel() // 4
    >>> angle = np.arctan2(y - 1.5, x - 1.5)              # about the hole's centre
    >>> turn = np.angle(np.exp(1j * (angle[edges[:, 1]] - angle[edges[:, 0]])))
    >>> H = topology.component_filter(cx, "harmonic", cutoff=0.3, order=32)
    >>> print(H)
    SimplicialFilter(k=1, basis='chebyshev', orders=(32, 32))
    >>> h = H.apply(turn).gather()
    >>> exact = topology.hodge_decomposition(cx, turn).harmonic.gather()
    >>> print(f"{np.linalg.norm(h - exact) / np.linalg.norm(exact):.1e}")
    2.4e-04
    """
    check_complex(cx)
    with agreed(cx.comm):
        component = check_choice("component", component, COMPONENTS)
        cutoff = check_real("cutoff", cutoff, low=0.0, low_open=True)
        steepness = check_real("steepness", steepness, low=0.0, low_open=True,
                               allow_none=True)
        order = check_int("order", order, low=0)
    s = steepness if steepness is not None else 10.0 / cutoff

    def step(lam):
        return 0.5 * (1.0 + np.tanh(0.5 * s * (np.asarray(lam) - cutoff)))

    def rest(lam):
        return 1.0 - step(lam)

    if component == "gradient":
        return chebyshev_filter(cx, 1, lower=step, order=(order, -1), spectrum=spectrum)
    if component == "curl":
        return chebyshev_filter(cx, 1, lower=0.0, upper=step, order=(0, order),
                                spectrum=spectrum)
    return chebyshev_filter(cx, 1, lower=rest, upper=rest, order=(order, order),
                            spectrum=spectrum)


# -- helpers --------------------------------------------------------------------------------
class IterationError(ConvergenceError):
    """A :class:`dmsolve.krylov.ConvergenceError` of an iteration that is not a
    Krylov solve (ADMM, LOBPCG): the message says what stopped; ``info`` is
    the method's report (or None). Not collective."""

    def __init__(self, message: str, info=None):
        self.info = info
        RuntimeError.__init__(self, message)


def check_complex(cx) -> None:
    """Raise ``TypeError`` unless ``cx`` is a SimplicialComplex. Not collective."""
    _door(cx, "signals live on its simplices")


def check_k(cx, k) -> int:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) \
            or not 0 <= k <= cx.dimension:
        raise ValueError("k must be an integer in [0, %d] (the complex's dimension), got %r"
                         % (cx.dimension, k))
    return int(k)


def _check_finite(comm, x: DistVector, name: str) -> None:
    # min and max propagate NaN and show an inf, and allocate nothing (an
    # isfinite mask would be a temporary the size of the vector per call)
    loc = x.local
    bad = loc.size > 0 and not (np.isfinite(loc.min()) and np.isfinite(loc.max()))
    if comm.allreduce(bad, op=MPI.LOR):
        with agreed(comm):
            raise ValueError("%s must be finite (found NaN or inf)" % name)


def _coefficients(name: str, c) -> np.ndarray:
    arr = np.asarray(c)
    if arr.dtype.kind not in "fiu" and arr.size:
        raise TypeError("%s must be real coefficients, got dtype %s" % (name, arr.dtype))
    arr = arr.astype(np.float64)
    if arr.ndim != 1:
        raise ValueError("%s must be a 1-D sequence of coefficients, got shape %s"
                         % (name, arr.shape))
    if not np.all(np.isfinite(arr)):
        raise ValueError("%s coefficients must be finite" % name)
    return arr


def _check_spectrum(spectrum) -> tuple[float, float]:
    try:
        a, b = spectrum
    except (TypeError, ValueError):
        raise ValueError("spectrum must be two numbers (lam_down, lam_up), got %r"
                         % (spectrum,)) from None
    return (check_real("spectrum[0]", a, low=0.0), check_real("spectrum[1]", b, low=0.0))


def _orders(order, has_lower: bool, has_upper: bool) -> tuple[int, int]:
    if isinstance(order, tuple):
        if len(order) != 2:
            raise ValueError("order must be an int or a pair (lower, upper), got %r" % (order,))
        lo = check_int("order[0]", order[0], low=0)
        hi = check_int("order[1]", order[1], low=-1)
        return lo, hi
    order = check_int("order", order, low=0)
    return (order if has_lower else 0), (order if has_upper else -1)


def _frequencies(freqs):
    if freqs is None:
        return None, None
    try:
        lam, mu = freqs
    except (TypeError, ValueError):
        raise ValueError("frequencies must be a pair (down, up) of arrays or None") from None
    out = []
    for name, f in (("frequencies[0]", lam), ("frequencies[1]", mu)):
        if f is None:
            out.append(None)
            continue
        a = np.asarray(f, dtype=np.float64).ravel()
        if a.size == 0 or not np.all(np.isfinite(a)):
            raise ValueError("%s must be a non-empty array of finite numbers" % name)
        out.append(a)
    return tuple(out)


def _grid(a: float, n: int) -> np.ndarray:
    """``n`` Chebyshev points of the first kind inside ``(0, a)``."""
    return 0.5 * a * (1.0 + np.cos(np.pi * (2 * np.arange(n) + 1) / (2 * n)))[::-1]


def _response_values(name: str, target, x: np.ndarray) -> np.ndarray:
    if isinstance(target, numbers.Real) and not isinstance(target, bool):
        v = np.full(x.shape, float(target))
    elif callable(target):
        v = np.asarray(target(x), dtype=np.float64)
        if v.shape != x.shape:
            v = np.broadcast_to(v, x.shape).astype(np.float64)
    else:
        raise TypeError("%s must be a callable response or a real number, got %s"
                        % (name, type(target).__name__))
    if not np.all(np.isfinite(v)):
        raise ValueError("%s gives values that are not finite" % name)
    return v


def _interpolate(target, name: str, a: float, n: int) -> np.ndarray:
    """Chebyshev coefficients of the interpolant of ``target`` at the ``n + 1``
    second-kind points on ``[0, a]``."""
    if n == 0:
        return _response_values(name, target, np.array([0.5 * a]))
    j = np.arange(n + 1)
    x = np.cos(np.pi * j / n)                     # 1 .. -1
    v = _response_values(name, target, 0.5 * a * (1.0 + x))
    w = np.ones(n + 1)
    w[0] = w[-1] = 0.5
    c = (2.0 / n) * (np.cos(np.pi * np.outer(j, j) / n) @ (w * v))
    c[0] *= 0.5
    c[-1] *= 0.5
    return c
