"""Sphinx configuration of dmsolve's documentation (``make docs``).

The API reference (``api/``) is written from the modules' ``__all__`` and the
examples' pages (``examples/``) from running them at 2 ranks, at every build,
before Sphinx reads anything: neither is kept in git.
"""

import os
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "_ext"))

import apipages  # noqa: E402
import examplepages  # noqa: E402

# `make docs` runs for minutes: one line per stage (sphinx-build -q keeps its
# own quiet), the examples' runs here and Sphinx's stages in dmsolve_docs
_t0 = time.perf_counter()
apipages.write_pages(HERE / "api")
print("docs: API reference written from the modules' __all__ (%.0f s)"
      % (time.perf_counter() - _t0), flush=True)
if os.environ.get("DMSOLVE_DOCS_EXAMPLES", "1") != "0":
    examplepages.write_pages(report=lambda line: print(line, flush=True))

project = "dmsolve"
author = "the dmsolve developers"
copyright = "2026, the dmsolve developers"
release = version = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "dmsolve_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "examples/_run", "api/generated/*.md"]

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"          # the numpydoc Parameters sections say the types
autodoc_member_order = "bysource"

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = "dmsolve"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path = ["_static"]
html_css_files = ["dmsolve.css"]       # wide tables scroll, long cells wrap
templates_path = ["_templates"]
