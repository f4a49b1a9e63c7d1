"""The null-space projector of a Krylov solve (PETSc's ``MatNullSpace``): the
given basis orthonormalised and tested once, then removed from vectors."""

from __future__ import annotations

import math

import numpy as np

from .._vector import DistVector
from ._linalg import index_vectors

__all__ = ["NullSpace", "NULLSPACE_RTOL"]

#: A null-space vector ``q`` (orthonormalised) is accepted when
#: ``||A q|| <= NULLSPACE_RTOL * ||A v|| / ||v||`` for a fixed vector ``v`` of
#: the global index (PETSc's ``MatNullSpaceTest`` uses ``100 sqrt(eps)``).
NULLSPACE_RTOL = 100 * math.sqrt(np.finfo(float).eps)


class NullSpace:
    """An orthonormal basis ``Q`` (rows, local part) of the null space of
    ``A``; :meth:`project` applies ``I - Q^H Q``.

    Built by :meth:`build`. Not collective to construct.
    """

    def __init__(self, Q: np.ndarray, red, gemv_sub):
        self.Q = Q
        self._red = red
        self._gemv_sub = gemv_sub
        #: the coefficients ``Q v`` of the last projected ``v``
        self.c = np.zeros(Q.shape[0], dtype=Q.dtype)

    @property
    def dim(self) -> int:
        """The dimension of the null space. Not collective."""
        return self.Q.shape[0]

    @classmethod
    def build(cls, vecs: list[DistVector], system) -> "NullSpace":
        """Orthonormalise ``vecs`` (classical Gram-Schmidt, twice) and test
        that ``A`` maps them to zero (:data:`NULLSPACE_RTOL`).

        Collective: ``2k + 1`` small reductions and ``k + 1`` products for
        ``k`` vectors. Raises ValueError on every rank (the verdicts use
        reduced numbers only).
        """
        red, s = system.red, system
        k = len(vecs)
        if red.send.size < k + 2:
            red.reserve(k + 1)
        Q = np.zeros((k, s.layout.local_size), dtype=s.dtype)
        for i, v in enumerate(vecs):
            q = Q[i]
            np.copyto(q, v.local)
            red.put(0, q, q)
            norm0 = math.sqrt(red.reduce(1)[0].real)
            for _ in range(2):          # classical Gram-Schmidt, twice
                if i:
                    red.put_rows(0, Q[:i], q)
                    recv = red.reduce(i)
                    s.gemv_sub(Q[:i], recv[:i].astype(s.dtype), q)
            red.put(0, q, q)
            norm = math.sqrt(red.reduce(1)[0].real)
            if not norm > 1e-10 * norm0:
                # the norms are reduced values, the same on every rank
                raise ValueError("nullspace vectors are zero or linearly dependent "
                                 "(vector %d)" % i)
            q /= norm
        ns = cls(Q, red, s.gemv_sub)
        ns._test(system)
        return ns

    def _test(self, s) -> None:
        # PETSc's MatNullSpaceTest: ||A q|| of each orthonormal q, relative to
        # ||A v|| / ||v|| for a fixed v of the global index (a scale of A that
        # does not depend on the rank count). k + 1 products, one reduction.
        Q, red = self.Q, self._red
        k = Q.shape[0]
        v, _ = index_vectors(s.layout, s.dtype)
        av = s.vector()
        s.matvec(v, av)
        red.put(0, av.local, av.local)
        red.put(1, v.local, v.local)
        for i in range(k):
            s.matvec(DistVector(s.layout, Q[i]), av)
            red.put(2 + i, av.local, av.local)
        out = red.reduce(k + 2).real
        scale = math.sqrt(out[0] / out[1]) if out[1] > 0 else 0.0
        for i in range(k):
            aq = math.sqrt(out[2 + i])
            ratio = aq / scale if scale > 0 else (0.0 if aq == 0 else math.inf)
            if not ratio <= NULLSPACE_RTOL:
                # reduced values: the same verdict on every rank
                raise ValueError(
                    "%s: nullspace vector %d is not in the null space of A: ||A q|| / "
                    "(||A v|| / ||v||) = %.3e for q the orthonormalised vector and v a "
                    "fixed vector, above %.1e" % (s.method, i, ratio, NULLSPACE_RTOL))

    def project(self, v: DistVector) -> None:
        """Remove the null-space components of ``v`` in place (the
        coefficients stay in :attr:`c`).

        Collective: one reduction of ``k`` numbers.
        """
        Q, red = self.Q, self._red
        k = Q.shape[0]
        red.put_rows(0, Q, v.local)
        self.c[:] = red.reduce(k)[:k]
        self._gemv_sub(Q, self.c, v.local)
