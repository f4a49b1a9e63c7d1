"""Vertex fields at the door: a DistVector, a global array (flat in id order
or 2-D/3-D with its axis order named by ``axes``) checked and cut to this
rank's share; and points padded to three coordinates. Collective only where
a function says so."""

from __future__ import annotations

import numbers

import numpy as np

from dmsolve import DistVector, Layout
from dmsolve.validate import agreed

__all__ = ["check_axes", "check_shape", "as_vertex_vector", "points3"]


def check_shape(shape) -> tuple:
    """``shape`` as a tuple of 2 or 3 integers (their range is the caller's
    to check). Not collective.

    Raises
    ------
    TypeError
        If it is not 2 or 3 integers.
    """
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError("shape must be 2 or 3 integers, got %r" % (shape,)) from None
    if len(shape) not in (2, 3) or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in shape):
        raise TypeError("shape must be 2 or 3 integers, got %r" % (shape,))
    return shape


def points3(c: np.ndarray) -> np.ndarray:
    """Points padded with zero columns (or cut) to three coordinates."""
    if c.shape[1] < 3:
        c = np.column_stack((c, np.zeros((c.shape[0], 3 - c.shape[1]))))
    return np.ascontiguousarray(c[:, :3])


def check_axes(axes, dimension: int) -> str | None:
    """``axes`` as None or a permutation of ``"xy"``/``"xyz"`` naming the
    axes of a 2-D/3-D field array in order. Not collective.

    Raises
    ------
    TypeError
        If ``axes`` is neither None nor a string.
    ValueError
        If it is not such a permutation.
    """
    if axes is None:
        return None
    if not isinstance(axes, str):
        raise TypeError("axes must be None or a string such as 'zyx' or 'xyz', got %s"
                        % type(axes).__name__)
    names = "xyz"[:dimension]
    if len(axes) != dimension or sorted(axes) != sorted(names):
        choices = ("'yx' (values[y, x], numpy image order) or 'xy' (values[x, y])"
                   if dimension == 2 else
                   "'zyx' (values[z, y, x], numpy image order), 'xyz' (values[x, y, z]) or "
                   "another permutation of 'xyz'")
        raise ValueError("axes must name the %d axes of a field on a %dD grid: %s; got %r"
                         % (dimension, dimension, choices, axes))
    return axes


def _in_numpy_order(arr: np.ndarray, zyx: tuple, axes: str | None, name: str) -> np.ndarray:
    """A 2-D/3-D field array as a view in numpy image order ``(z, y, x)``.

    ``zyx`` is the grid's numpy shape (``grid.shape[::-1]``). Without
    ``axes`` only an array of that shape is taken, and only when the
    reversed shape differs from it; see :class:`Grid`. Not collective.
    """
    dim = len(zyx)
    names = "xyz"[:dim]
    xyz = tuple(zyx[::-1])
    image, ij = names[::-1], names
    if arr.ndim != dim:
        raise ValueError("%s has shape %s; a field on a %dD grid of shape %s is flat (%d,) or "
                         "%d-D" % (name, arr.shape, dim, xyz, int(np.prod(xyz)), dim))
    if axes is None:
        if arr.shape == tuple(zyx) and tuple(zyx) == xyz:
            raise ValueError(
                "%s has shape %s, which reads the same in %s and %s order on this grid of "
                "shape %s: say which with axes=%r (values[%s], numpy image order) or "
                "axes=%r (values[%s]), or pass a flat array in vertex id order"
                % (name, arr.shape, "(%s)" % ", ".join(image), "(%s)" % ", ".join(ij), xyz,
                   image, ", ".join(image), ij, ", ".join(ij)))
        if arr.shape == xyz and arr.shape != tuple(zyx):
            raise ValueError(
                "%s has shape %s, the grid's (%s) shape, not its numpy image shape %s: if it "
                "is indexed values[%s], pass axes=%r" % (name, arr.shape, ", ".join(ij),
                                                         tuple(zyx), ", ".join(ij), ij))
        axes = image
    want = tuple(xyz[names.index(a)] for a in axes)
    if arr.shape != want:
        raise ValueError("%s has shape %s; with axes=%r a field on this grid of shape %s has "
                         "shape %s (or is flat, (%d,))"
                         % (name, arr.shape, axes, xyz, want, int(np.prod(xyz))))
    return arr.transpose([axes.index(a) for a in image])


def as_vertex_vector(values, layout: Layout, name: str = "values",
                     grid_shape=None, dtype=np.float64, axes=None) -> DistVector:
    """Check and convert a vertex (or simplex) field to a DistVector on ``layout``.

    ``grid_shape`` is a grid's numpy shape ``(z, y, x)`` (None for a
    complex, whose fields are flat); ``axes`` names the axes of a 2-D/3-D
    array (see :class:`Grid`). Collective on ``layout.comm``; the same
    error on every rank.
    """
    out = None
    with agreed(layout.comm):
        if grid_shape is None:
            if axes is not None:
                raise ValueError("axes describes the axis order of a field on a Grid; a "
                                 "complex's fields are flat, indexed by global id")
        else:
            axes = check_axes(axes, len(grid_shape))
        if isinstance(values, DistVector):
            if values.layout != layout:
                raise ValueError("%s is a DistVector of global size %d on another layout; "
                                 "expected global size %d" % (name, values.global_size,
                                                              layout.global_size))
            if values.dtype.kind not in "fiub":
                raise TypeError("%s must be real numbers, got %s" % (name, values.dtype))
            local = values.local.astype(dtype, copy=False)
        else:
            arr = np.asarray(values)
            if arr.dtype.kind not in "fiub":
                raise TypeError("%s must be real numbers, got dtype %s" % (name, arr.dtype))
            if grid_shape is not None and arr.ndim >= 2:
                img = _in_numpy_order(arr, tuple(grid_shape), axes, name)
                # this rank's planes, without copying the whole array
                plane = int(np.prod(grid_shape[1:]))
                if layout.start % plane == 0 and layout.stop % plane == 0:
                    local = np.array(img[layout.start // plane:layout.stop // plane],
                                     dtype=dtype).reshape(-1)
                else:
                    local = np.array(img.reshape(-1)[layout.start:layout.stop], dtype=dtype)
            else:
                if arr.ndim != 1 or arr.shape[0] != layout.global_size:
                    raise ValueError("%s has shape %s; expected (%d,)%s"
                                     % (name, arr.shape, layout.global_size,
                                        "" if grid_shape is None else
                                        " or a %d-D array" % len(grid_shape)))
                local = np.array(arr[layout.start:layout.stop], dtype=dtype)
        if local.dtype.kind == "f" and not np.all(np.isfinite(local)):
            raise ValueError("%s must be finite (found NaN or inf)" % name)
        out = DistVector(layout, local)
    return out
