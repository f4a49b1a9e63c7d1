"""Mesh and image I/O for topology: meshio for triangle/tetrahedron meshes and
VTU output (array names as TTK writes them), a ``.pvtu`` with one ``.vtu``
piece per rank for data too large for one rank, numpy ``.npy`` for images.

Every failure is agreed on: a file that cannot be read or written raises
``OSError`` naming it, malformed content ``ValueError``, on every rank."""

from ._files import CRITICAL_TYPE, read_image, read_mesh, write_pvtu, write_vtu

__all__ = ["read_mesh", "read_image", "write_vtu", "write_pvtu", "CRITICAL_TYPE"]
