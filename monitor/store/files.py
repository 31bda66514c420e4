"""Which files voxmeter may change: recognise a database before anything opens it for writing.

Recognition only reads: the 100-byte SQLite header, then, when the header carries no
application id, the schema through a read-only (``mode=ro``, or ``immutable`` when no
write-ahead log is beside it) connection that creates nothing. A file is ours when its header
says :data:`~monitor.store.schema.APPLICATION_ID`, or when it is a database voxmeter made before
the mark existed (its ``schema_migrations`` table, user_version 0). Anything else — text, random
bytes, another application's SQLite file even with no tables — is refused with one line, its
bytes and mode unchanged. Mode bits are only ever taken away (0644 → 0600), never added: a
database whose owner removed its write bit stays read-only.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from pathlib import Path

from monitor.errors import StoreError
from monitor.store.base import damaged_message
from monitor.store.schema import APPLICATION_ID, MIGRATIONS, MIGRATIONS_COLUMNS

__all__ = [
    "damaged_message",
    "read_only_uri",
    "recognise",
    "refuse_read_only",
    "regular_file",
    "sidecar",
    "tighten_modes",
    "writable",
]

_MAGIC = b"SQLite format 3\x00"


def sidecar(path: Path, suffix: str) -> Path:
    """``voxmeter.db`` → ``voxmeter.db-wal`` (SQLite names its files after the name opened)."""
    return path.with_name(path.name + suffix)


def dangling_link(path: Path) -> StoreError:
    """The one line for a symbolic link whose target does not exist: neither read through nor
    created through (the file would appear somewhere the user did not name)."""
    return StoreError(
        f"{path}: a symbolic link to {os.readlink(path)}, which does not exist; "
        "point the link at a database or give the target's own path"
    )


def regular_file(path: Path) -> os.stat_result | None:
    """The file's status, None when it does not exist; StoreError for a folder, device or pipe
    (SQLite would leave ``<device>-journal`` beside one) and for a dangling symbolic link."""
    try:
        status = path.stat()
    except FileNotFoundError:
        if path.is_symlink():  # creating through it would make a file somewhere else, unasked
            raise dangling_link(path) from None
        return None
    except OSError as error:
        raise StoreError(f"{path}: cannot read: {error.strerror or error}") from error
    if stat.S_ISDIR(status.st_mode):
        raise StoreError(f"{path}: is a directory, not a database file")
    if not stat.S_ISREG(status.st_mode):
        raise StoreError(f"{path}: not a regular file (a device, pipe or socket)")
    return status


def writable(path: Path, status: os.stat_result) -> bool:
    """The owner left the write bit on and this process may write: root's override of a 0444
    mode is not the owner's intent, so the bit is checked as well as access(2)."""
    return bool(status.st_mode & stat.S_IWUSR) and os.access(path, os.W_OK)


def _read_only_file_system(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def refuse_read_only(path: Path, status: os.stat_result) -> None:
    """StoreError for a database this process must not write; never chmod it writable."""
    if writable(path, status):
        return
    mode = f"mode {stat.S_IMODE(status.st_mode):04o}"
    if status.st_mode & stat.S_IWUSR and _read_only_file_system(path):
        raise StoreError(f"{path}: the database is on a read-only file system; nothing was changed")
    if status.st_mode & stat.S_IWUSR:  # the owner may write it, this user may not
        raise StoreError(
            f"{path}: the database is not writable by this user ({mode}, owner uid "
            f"{status.st_uid}); nothing was changed: run as its owner"
        )
    raise StoreError(
        f"{path}: the database is read-only ({mode}); nothing was changed: make it writable "
        "(chmod u+w) to change it"
    )


def _wal_in_use(path: Path) -> bool:
    wal = sidecar(path, "-wal")
    return wal.is_file() and wal.stat().st_size > 0


def read_only_uri(path: Path, *, immutable: bool = False) -> str:
    """An SQLite URI that opens ``path`` without writing it (``immutable``: nor its sidecars,
    nor taking locks — only right when no write-ahead log holds newer pages)."""
    return path.absolute().as_uri() + ("?mode=ro&immutable=1" if immutable else "?mode=ro")


def _foreign(path: Path, why: str) -> StoreError:
    return StoreError(
        f"{path}: an SQLite database, but not a voxmeter one ({why}); nothing changed"
    )


def recognise(path: Path) -> bool:
    """True for a voxmeter database, False for an empty (0-byte) file; StoreError otherwise.

    Reads only: a file that is not ours is left exactly as it was, bytes and mode.
    """
    try:
        if path.stat().st_size == 0 and not _wal_in_use(path):
            return False
        with path.open("rb") as file:
            header = file.read(100)
    except OSError as error:
        raise StoreError(f"{path}: cannot read: {error.strerror or error}") from error
    if len(header) == 100 and header[:16] == _MAGIC:
        application_id = int.from_bytes(header[68:72], "big")
        if application_id == APPLICATION_ID:
            return True
        if application_id != 0:
            raise _foreign(path, f"application id {application_id:#010x}")
    elif not _wal_in_use(path):  # a WAL database's first pages may still be in its log
        raise StoreError(f"{path}: not an SQLite database; nothing changed")
    _recognise_schema(path)
    return True


def _recognise_schema(path: Path) -> None:
    """A database from before the application id: voxmeter's ``schema_migrations`` (the first
    migration's description) and user_version 0; StoreError for anything else."""
    uri = read_only_uri(path, immutable=not _wal_in_use(path))
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as error:
        raise StoreError(f"{path}: cannot open database: {error}") from error
    try:
        if int(conn.execute("PRAGMA application_id").fetchone()[0]) == APPLICATION_ID:
            return  # marked in the log, not yet in the file's header
        user_version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if "schema_migrations" not in tables:
            raise _foreign(path, "no voxmeter schema" if tables else "no tables")
        columns = tuple(r[1] for r in conn.execute("PRAGMA table_info(schema_migrations)"))
        first = conn.execute("SELECT description FROM schema_migrations WHERE version = 1")
        row = first.fetchone()
        ours = user_version == 0 and columns == MIGRATIONS_COLUMNS
        if row is None:  # created, then stopped before the first migration
            ours = ours and tables == {"schema_migrations"}
        else:
            ours = ours and row[0] == MIGRATIONS[0].description
        if not ours:
            raise _foreign(path, "another schema")
    except sqlite3.DatabaseError as error:
        text = str(error)
        if "not a database" in text or "encrypted" in text:
            raise StoreError(f"{path}: not an SQLite database; nothing changed") from error
        if "malformed" in text:
            raise StoreError(damaged_message(path, text)) from error
        raise StoreError(f"{path}: cannot read the schema: {error}") from error
    finally:
        conn.close()


def tighten_modes(path: Path) -> None:
    """Take group and other bits off the database and its sidecars (it holds voice templates):
    0644 → 0600. Never adds a bit; files of another owner are left as they are."""
    for suffix in ("", "-wal", "-shm"):
        side = sidecar(path, suffix)
        with contextlib.suppress(FileNotFoundError, PermissionError):
            mode = stat.S_IMODE(side.stat().st_mode)
            if mode & 0o077:
                os.chmod(side, mode & ~0o077)
