"""Preconditioners for dmsolve, built by name through a registry:
``preconditioners.make("jacobi", A)``."""

from ._jacobi import Identity, Jacobi
from ._registry import available, make, register

__all__ = ["make", "register", "available", "Jacobi", "Identity"]
