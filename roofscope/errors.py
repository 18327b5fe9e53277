"""Typed errors: every user mistake becomes a one-line message and an exit code."""
from __future__ import annotations


class RoofscopeError(Exception):
    """A user-facing error: printed as one line, no traceback."""

    exit_code = 2


class TraceError(RoofscopeError):
    """The input is not a trace any reader can read."""


class DeviceError(RoofscopeError):
    """The device is unknown or its ceilings cannot be determined."""


class OutputExistsError(RoofscopeError):
    """An output file exists and --force was not given."""
