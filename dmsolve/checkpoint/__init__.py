"""Checkpoint/restart of Krylov solves, resumable on any number of ranks.
The format and atomic I/O are in ``_format``, the policy in ``_policy``; see docs/checkpoint.md."""

from ._format import FORMAT, MANIFEST, VERSION, CheckpointError, load, read_manifest
from ._policy import Checkpointer, ResumeState, describe_pc, from_options

__all__ = ["Checkpointer", "CheckpointError", "ResumeState", "read_manifest", "load",
           "describe_pc", "from_options", "FORMAT", "VERSION", "MANIFEST"]
