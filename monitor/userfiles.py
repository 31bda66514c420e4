"""Files a user names on the command line (``--scores``, ``--key``, ``--matrix``, ``--truth``,
``--config``, ``--calibration`` ...): checked once, before anything reads them.

``open()`` on a FIFO without a writer waits for ever, ``/dev/zero`` never ends and a directory is
not a file, so a path must name a regular file. The check is a ``stat`` (which never blocks);
:func:`read_bytes` also opens without blocking and checks the open file itself, so a path
swapped between the two is caught. Sizes are bounded where a whole file is read at once (a
config), and text is read line by line with a bound on the line (:func:`bounded_lines`), so no
input can take more memory than its limit.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from monitor.errors import InputError

MAX_CONFIG_BYTES = 1 << 20
"""A config.toml is a few kilobytes; anything over 1 MiB is not one."""
MAX_JSON_BYTES = 1 << 24
"""A calibration JSON is a few kilobytes per feature; 16 MiB is far more than any holds."""
MAX_LINE_BYTES = 1 << 16
"""A line of a score or key file (two names and a number) is under 100 bytes; 64 KiB is none."""

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _kind_problem(mode: int) -> str | None:
    """Why a file of this ``st_mode`` cannot be read as a user's file, or None."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    return f"not a regular file: {_KINDS.get(stat.S_IFMT(mode), 'a special file')}"


def _stat_problem(error: OSError) -> str:
    if isinstance(error, FileNotFoundError | NotADirectoryError):
        return "no such file"
    return f"cannot read: {error.strerror or error}"


def regular_file(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> Path:
    """``path`` as a Path once it names a regular file (of at most ``max_bytes``); otherwise
    InputError naming it: missing, a directory, a FIFO, a device or a socket, too large."""
    try:
        info = os.stat(path)
    except OSError as error:
        raise InputError(str(path), _stat_problem(error)) from None
    problem = _kind_problem(info.st_mode)
    if problem is not None:
        raise InputError(str(path), problem)
    if max_bytes is not None and info.st_size > max_bytes:
        raise InputError(str(path), _too_large(info.st_size, max_bytes))
    return Path(path)


def _too_large(size: int, limit: int) -> str:
    return f"too large: {size:,} bytes where at most {limit:,} are read"


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The whole of a regular file of at most ``max_bytes``, opened without blocking (a FIFO is
    refused, not waited on) and checked as opened; a file that grows past the limit while it is
    read is refused too."""
    regular_file(path, max_bytes=max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError:
        raise InputError(str(path), "is a directory, not a file") from None
    except OSError as error:
        raise InputError(str(path), _stat_problem(error)) from None
    info = os.fstat(fd)
    problem = _kind_problem(info.st_mode)
    if problem is not None:
        os.close(fd)
        raise InputError(str(path), problem)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as error:
            raise InputError(str(path), f"cannot read: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise InputError(str(path), _too_large(max(len(data), info.st_size), max_bytes))
    return data


def bounded_lines(
    path: Path, *, encoding: str = "utf-8-sig", max_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, str]]:
    """(line number from 1, text) of a text file, never holding more than one line of at most
    ``max_bytes`` (counted in characters, which is at most the bytes); a longer line is an
    InputError naming the file and the line. Bad text raises UnicodeDecodeError (the caller
    names it)."""
    with open(regular_file(path), encoding=encoding, newline=None) as handle:
        number = 0
        while text := handle.readline(max_bytes + 1):
            number += 1
            if len(text) > max_bytes and not text.endswith("\n"):
                raise InputError(
                    str(path), f"line longer than {max_bytes:,} characters", line=number
                )
            yield number, text
