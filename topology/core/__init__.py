"""What every stage of topology knows of a domain: the :class:`Domain`
protocol and its checks, the geometry of grids (stencils, cells,
coordinates), vertex fields at the door, raw fields on disk, distributed key
tables, sorted rows of vertex ids, and the VTK XML writer.

Nothing here knows a kind of domain or an analysis; every other folder
builds on it."""

from ._fields import as_vertex_vector, check_axes, check_shape, points3
from ._keytable import KeyTable, fetch_rows
from ._protocol import (Domain, check_domain, check_fits, ghosted_global_ids, owned_global_ids,
                        physical_memory)
from ._rawfield import RawField
from ._rows import find_rows, lookup, row_keys, search_rows, unique_rows
from ._stencils import (component_table, cube_cells, cubical_structure, freudenthal_cells,
                        grid_cells, grid_coordinates, link_structure)
from ._vtkxml import (RESERVED, check_pvtu_path, piece_paths, vtk_type, write_index,
                      write_parallel, write_piece)

__all__ = ["Domain", "check_domain", "check_fits", "physical_memory", "owned_global_ids",
           "ghosted_global_ids", "as_vertex_vector", "check_axes", "check_shape", "points3",
           "RawField",
           "KeyTable", "fetch_rows", "row_keys", "unique_rows", "search_rows", "find_rows",
           "lookup", "freudenthal_cells", "link_structure", "cubical_structure",
           "component_table", "grid_cells", "cube_cells", "grid_coordinates", "RESERVED",
           "check_pvtu_path", "piece_paths", "vtk_type", "write_index", "write_parallel",
           "write_piece"]
