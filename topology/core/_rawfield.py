"""A vertex field in a raw binary file, read a slab of planes at a time."""

from __future__ import annotations

import numbers
import os

import numpy as np

from ._fields import check_shape

__all__ = ["RawField"]


class RawField:
    """A scalar field stored as raw binary values, one per grid vertex.

    The values are in vertex id order, ``x`` fastest: the C-order ravel of
    the numpy image array ``values[z, y, x]`` (``array.tofile(path)``), the
    layout of ParaView's and TTK's raw image readers. Nothing is read until
    an analysis asks for planes, and then only those planes
    (:meth:`read_planes`): the file is never read whole.

    Parameters
    ----------
    path : str or os.PathLike
    shape : tuple of int
        The grid's shape ``(nx, ny)`` or ``(nx, ny, nz)``, as for
        :class:`topology.Grid`.
    dtype : numpy dtype, default ``"float32"``
        A real dtype; give the byte order in it if it is not the machine's
        (``">f4"`` for big-endian float32).
    offset : int, default 0
        Bytes to skip at the start of the file (a header).

    Notes
    -----
    Not collective: constructing it only checks the arguments (alike on
    every rank). Every analysis that takes a field takes a RawField where
    the grid is the field's, and checks the file collectively before reading
    it (missing, unreadable, or not exactly ``offset + prod(shape) *
    itemsize`` bytes long: the same ``ValueError`` on every rank). A value
    that is not finite is an error when its plane is read.
    """

    def __init__(self, path, shape, dtype="float32", *, offset: int = 0):
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
            raise TypeError("path must be a non-empty path, got %r" % (path,))
        shape = check_shape(shape)
        if min(shape) < 1:
            raise ValueError("shape must be positive, got %r" % (shape,))
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError("dtype %r is not a numpy dtype" % (dtype,)) from None
        if dtype.kind not in "fiu":
            raise TypeError("dtype must be a real number type, got %s" % dtype)
        if isinstance(offset, bool) or not isinstance(offset, numbers.Integral) or offset < 0:
            raise ValueError("offset must be a non-negative integer, got %r" % (offset,))
        self.path = os.fspath(path)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.offset = int(offset)
        self.plane_size = int(np.prod(self.shape[:-1]))

    @property
    def nbytes(self) -> int:
        """The file's expected length in bytes, header included."""
        return self.offset + int(np.prod(self.shape)) * self.dtype.itemsize

    def __repr__(self) -> str:
        return "RawField(%r, shape=%s, dtype=%s)" % (self.path, self.shape, self.dtype)

    def check(self, shape) -> None:
        """Raise ``ValueError`` unless the file holds this field, of a grid
        of ``shape``. Not collective: call it in
        :func:`dmsolve.validate.agreed`, so that every rank raises alike."""
        if tuple(shape) != self.shape:
            raise ValueError("%r is a field of shape %s, not of this grid's shape %s"
                             % (self, self.shape, tuple(shape)))
        try:
            size = os.stat(self.path).st_size
        except OSError as e:
            raise ValueError("cannot read the raw field %s: %s" % (self.path, e.strerror)) \
                from None
        if not os.access(self.path, os.R_OK):
            raise ValueError("cannot read the raw field %s: permission denied" % self.path)
        if size != self.nbytes:
            raise ValueError(
                "the raw field %s has %d bytes; a %s field of shape %s%s has %d" % (
                    self.path, size, self.dtype, self.shape,
                    " after a %d-byte header" % self.offset if self.offset else "",
                    self.nbytes) + (" (the file is short)" if size < self.nbytes else ""))

    def read_planes(self, start: int, stop: int) -> np.ndarray:
        """The values of planes ``start .. stop-1`` along the last axis, flat
        in id order, as float64. Not collective.

        Raises
        ------
        ValueError
            If the file ends early or a value is not finite.
        """
        count = (stop - start) * self.plane_size
        with open(self.path, "rb") as f:
            f.seek(self.offset + start * self.plane_size * self.dtype.itemsize)
            raw = np.fromfile(f, dtype=self.dtype, count=count)
        if raw.size != count:
            raise ValueError("the raw field %s ended early: planes %d..%d need %d values, "
                             "read %d" % (self.path, start, stop - 1, count, raw.size))
        out = raw.astype(np.float64)
        if not np.all(np.isfinite(out)):
            raise ValueError("the raw field %s must be finite (found NaN or inf in planes "
                             "%d..%d)" % (self.path, start, stop - 1))
        return out
