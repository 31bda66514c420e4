"""The few exceptions voxmeter raises on purpose.

Every user-facing failure is one of these; the CLI prints its message on one line and exits with
its ``exit_code``. Library code raises them (or ``ValueError`` from pure math) and never returns
``None`` in place of an error.
"""

from __future__ import annotations


class VoxmeterError(Exception):
    """Base class: a problem the user can act on. ``str(error)`` is the whole message."""

    exit_code = 2


class InputError(VoxmeterError):
    """Bad input data: names the file (and line or key) and the problem."""

    def __init__(self, source: str, problem: str, *, line: int | None = None) -> None:
        self.source = source
        self.problem = problem
        self.line = line
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {problem}")


class ConfigError(VoxmeterError):
    """A configuration key with a wrong type or value, or an unknown key."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"config key {key!r}: {problem}")


class AudioDeviceError(VoxmeterError):
    """A microphone that is missing or failed; the daemon retries these with backoff."""


class StoreError(VoxmeterError):
    """The database cannot be used: locked, from a newer schema, unreadable."""
