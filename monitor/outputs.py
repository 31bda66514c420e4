"""Checks on where a command will write, made before any long work starts.

A calibration or an audit runs for minutes; finding only at the end that ``--out`` names a
folder, an existing file or a read-only place loses that work. These checks name the option and
the path in one line (:class:`~monitor.errors.InputError`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from monitor.errors import InputError


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (what a later mkdir -p would start from)."""
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _check_creatable(path: Path, option: str) -> None:
    """The folders up to ``path`` can be created and written: the nearest existing one is a
    writable folder."""
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise InputError(str(path), f"{option}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(str(path), f"{option}: cannot write in {base} (permission denied)")


def _check_regular(target: Path, option: str) -> None:
    """An existing ``target`` is a regular file: the atomic rename would otherwise replace a
    device (as root, ``--out /dev/full`` became a JSON file) or a pipe."""
    if target.exists() and not target.is_file():
        raise InputError(str(target), f"{option}: not a regular file (a device, pipe or socket)")


def check_output_file(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` can be written as a file: not a folder, its folder writable (or creatable)."""
    target = Path(path)
    if target.is_dir():
        raise InputError(
            str(target), f"{option}: is a folder; give a file name, e.g. {target / 'out.json'}"
        )
    _check_regular(target, option)
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(str(target), f"{option}: file is not writable")
    _check_creatable(target, option)
    return target


def check_output_folder(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` is (or can become) a writable folder; an existing file there is refused."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise InputError(str(target), f"{option}: exists and is a file, not a folder")
    if target.is_dir():
        if not os.access(target, os.W_OK | os.X_OK):
            raise InputError(str(target), f"{option}: folder is not writable")
    else:
        _check_creatable(target / "x", option)
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a failure leaves the
    old file as it was; an OSError becomes an InputError naming the path."""
    target = Path(path)
    _check_regular(target, "output")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as error:
        raise InputError(str(target), f"cannot write: {error.strerror or error}") from error
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)  # a report, not a secret (mkstemp makes it 0600)
        os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(str(target), f"cannot write: {error.strerror or error}") from error
