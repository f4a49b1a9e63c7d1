"""Preconditioners for dmsolve."""
