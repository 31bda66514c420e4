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


# ---- Unix socket paths (relay.socket) -----------------------------------------------------

MAX_SOCKET_PATH_BYTES = 107
"""Longest Unix socket path: Linux's ``sun_path`` holds 108 bytes, the last one the NUL."""


def socket_path_problem(value: str) -> str | None:
    """Why ``value`` cannot name a Unix socket, from the text alone (empty: none set)."""
    if not value:
        return None
    size = len(os.fsencode(value))
    if not value.startswith("/"):
        return f"{value!r}: must be an absolute path"
    if size > MAX_SOCKET_PATH_BYTES:
        return f"{value!r}: {size} bytes, over the {MAX_SOCKET_PATH_BYTES} of a Unix socket path"
    return None


def _folder_problem(folder: Path) -> str | None:
    """Why ``folder`` (or the nearest part of it that exists) cannot hold a socket."""
    existing = folder
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent  # (lexists: False where an ancestor cannot be entered)
    if not os.path.isdir(existing):
        return f"{existing} is not a folder"
    if not os.access(existing, os.X_OK):
        return f"the folder {existing} cannot be entered (permission denied)"
    return None


def socket_problem(path: Path, *, listening: bool) -> str | None:
    """Why a socket at ``path`` cannot be used, found without touching anything: the text
    (:func:`socket_path_problem`), a parent that is a file or cannot be entered, and, for the
    side that listens (it replaces a stale socket file), a file that is not a socket or another
    user's socket in a sticky folder (``/tmp``), which it could not remove and must not."""
    problem = socket_path_problem(str(path)) or _folder_problem(path.parent)
    if problem is not None or not listening:
        return problem
    try:
        mode = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be examined ({os.strerror(error.errno or 0)})"
    if not stat.S_ISSOCK(mode.st_mode):
        return "exists and is not a socket"
    folder = path.parent.stat()
    mine = mode.st_uid == os.geteuid() or folder.st_uid == os.geteuid()
    if folder.st_mode & stat.S_ISVTX and not mine and os.geteuid() != 0:
        return (
            f"a socket of another user (uid {mode.st_uid}) in the sticky folder {path.parent}: "
            "left as it is; remove it or choose another path"
        )
    return None


def not_utf8(text: str) -> str | None:
    """Why a name taken from the command line or a directory listing is not UTF-8 (Python
    carries such a byte as a lone surrogate, ``\\udcXX``), naming the byte: config.toml, JSON,
    the log and soundfile take UTF-8 only. None when it is UTF-8."""
    for position, char in enumerate(text):
        if "\udc80" <= char <= "\udcff":
            byte = ord(char) - 0xDC00
            return f"not UTF-8 (byte 0x{byte:02X} at character {position}); rename it"
    return None
