"""dmsolve's version (pyproject.toml declares the same; a test checks)."""

__version__ = "0.1.0"
