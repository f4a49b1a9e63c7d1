"""Distributed topology for dmsolve."""
