"""One SQLite file behind the whole product: opening it for reading or writing.

Why SQLite: the daemon runs on small devices, keeps its state across restarts and must never lose
an alert; one file in WAL mode (readers never block the writer), mode 0600 (it holds voice
templates), foreign keys on, a bounded busy timeout. The schema and its migrations are in
schema.py; which files may be opened for writing at all is decided first, in files.py (a file
that is not ours is never changed); a database opened for writing passes ``quick_check``.

The :class:`Store` composes the areas of the schema (templates and identities, ledger, outbox);
each area lives in its own module as a mixin over :class:`~monitor.store.base.Database`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from monitor.errors import StoreError
from monitor.store.base import (
    Database,
    current_version,
    damaged_message,
    is_locked,
    locked_message,
)
from monitor.store.calibrations import CalibrationsMixin
from monitor.store.files import (
    read_only_uri,
    recognise,
    refuse_read_only,
    regular_file,
    sidecar,
    tighten_modes,
    writable,
)
from monitor.store.ledger import LedgerMixin
from monitor.store.outbox import OutboxMixin
from monitor.store.rooms import RoomsMixin
from monitor.store.schema import MIGRATIONS, SCHEMA_VERSION, Migration, initialise, migrate
from monitor.store.templates import TemplatesMixin

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Database",
    "Migration",
    "Store",
    "connect",
    "migrate",
    "open_store",
]

_T = TypeVar("_T")

DEFAULT_BUSY_TIMEOUT_SECONDS = 5.0


def _create_private_file(path: Path) -> None:
    """Create an empty file with mode 0600 *before* SQLite opens it, so it is never readable."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)  # the umask may have cleared bits; make the mode exact


def _make_folder(folder: Path) -> None:
    """The database's folder, made (mode 0700, parents too) if missing: a first run with
    ``daemon.db = "~/.local/share/voxmeter/voxmeter.db"`` needs nothing made by hand."""
    if folder.is_dir():
        return
    if folder.is_symlink() or folder.exists():
        raise StoreError(f"{folder}: not a directory, cannot hold the database")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)


def _opening_error(path: Path, error: sqlite3.Error, busy_timeout_seconds: float) -> StoreError:
    """One line for a failure while opening: locked, not SQLite, damaged, read-only folder."""
    text = str(error)
    if is_locked(error):
        return StoreError(locked_message(path, busy_timeout_seconds))
    if "not a database" in text or "encrypted" in text:
        return StoreError(f"{path}: not an SQLite database ({error})")
    if "malformed" in text:
        return StoreError(damaged_message(path, text))
    name = str(getattr(error, "sqlite_errorname", ""))
    if name.startswith(("SQLITE_FULL", "SQLITE_IOERR")) and _disk_full(path):
        return StoreError(
            f"{path}: cannot open database: the disk holding it is full; nothing was changed: "
            "free some space, then try again"
        )
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        return StoreError(
            f"{path}: cannot open database ({error}): the file or its folder is read-only, "
            "and SQLite's WAL needs to write both"
        )
    return StoreError(f"{path}: cannot open database: {error}")


def _disk_full(path: Path) -> bool:
    """Less than one 16 KiB page free where the database lives (SQLite's errors say only
    "disk I/O error" when its shared-memory file cannot grow)."""
    try:
        status = os.statvfs(path.absolute().parent)
    except OSError:
        return False
    return status.f_bavail * status.f_frsize < 16384


def _remove_new_sidecars(path: Path, existed: set[str]) -> None:
    """After a failed open, remove the ``-wal``/``-shm`` SQLite just made (an empty log only):
    a refused start leaves the folder as it found it."""
    wal, shm = sidecar(path, "-wal"), sidecar(path, "-shm")
    if "-wal" in existed or (wal.exists() and wal.stat().st_size > 0):
        return
    for suffix, side in (("-wal", wal), ("-shm", shm)):
        if suffix not in existed:
            with contextlib.suppress(FileNotFoundError):
                side.unlink()


def _sidecars(path: Path) -> set[str]:
    return {suffix for suffix in ("-wal", "-shm") if sidecar(path, suffix).exists()}


def quick_check(conn: sqlite3.Connection, path: Path) -> None:
    """StoreError naming the file and the way out when SQLite's quick_check finds damage: a
    damaged database is never written (a write could spread the damage)."""
    problems = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise StoreError(damaged_message(path, "; ".join(problems)))


def _new_file(path: Path, create: bool) -> bool:
    """True when ``path`` is a new database to create (made now, or an existing empty file);
    False for a recognised voxmeter database; StoreError for anything else (nothing changed)."""
    status = regular_file(path)
    if status is None:
        if not create:
            raise StoreError(f"{path}: no such database (create it with `voxmeter enroll`)")
        try:
            _make_folder(path.parent)
            _create_private_file(path)
            return True
        except FileExistsError:  # another process made it meanwhile: look once more, no loop
            status = regular_file(path)
            if status is None:
                raise StoreError(f"{path}: cannot create database: it came and went") from None
        except OSError as error:
            raise StoreError(f"{path}: cannot create database: {error.strerror}") from error
    new = not recognise(path)
    if new and not create:  # reading must not write a schema into it
        raise StoreError(
            f"{path}: empty file, not a voxmeter database (create one with `voxmeter enroll`)"
        )
    refuse_read_only(path, status)
    if status.st_nlink > 1:
        raise StoreError(
            f"{path}: the database file has {status.st_nlink} hard links; SQLite keeps its "
            "write-ahead log beside the name it was opened by, so writing through two names "
            "damages it: remove the other links (a symlink is safe)"
        )
    return new


def connect(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
) -> tuple[Path, sqlite3.Connection]:
    """Open a database for writing: recognise it first (files.py), create it (mode 0600) if
    allowed, refuse a damaged one, then switch it to WAL and take group/other bits off.

    A new file is marked as ours and gets ``schema_migrations`` (schema.initialise) before
    anything else is written. :func:`open_store` migrates; tests use this to build old versions.
    """
    path = Path(path)
    new = _new_file(path, create)
    existed = _sidecars(path)
    try:
        conn = sqlite3.connect(
            path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as error:
        raise StoreError(f"{path}: cannot open database: {error}") from error
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        if new:
            # Before the first table: 16 KiB pages keep a 256-d template (2 KiB) in one leaf
            # and read 10⁵ templates about three times faster than the 4 KiB default.
            conn.execute("PRAGMA page_size = 16384")
            initialise(conn)
        else:
            quick_check(conn, path)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{path}: cannot switch the database to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; safe in WAL
    except sqlite3.Error as error:
        conn.close()
        _remove_new_sidecars(path, existed)
        raise _opening_error(path, error, busy_timeout_seconds) from error
    except BaseException:
        conn.close()
        _remove_new_sidecars(path, existed)
        raise
    tighten_modes(path)  # an existing 0644 database is made private too
    return path, conn


def connect_read_only(
    path: str | os.PathLike[str],
    *,
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
) -> tuple[Path, sqlite3.Connection]:
    """Open a recognised database for reading only: no schema, no WAL switch, no check.

    A writable database gets an ordinary connection with ``query_only`` on (so, as the last one
    to close, it tidies the ``-wal``/``-shm`` files away); a read-only one a ``mode=ro``
    connection, ``immutable`` when no write-ahead log is beside it (then nothing is created).
    """
    path = Path(path)
    status = regular_file(path)
    if status is None:
        raise StoreError(f"{path}: no such database (create it with `voxmeter enroll`)")
    if not recognise(path):
        raise StoreError(
            f"{path}: empty file, not a voxmeter database (create one with `voxmeter enroll`)"
        )
    log = sidecar(path, "-wal")
    existed = _sidecars(path)
    if writable(path, status):
        tighten_modes(path)
        target, uri = str(path), False
    else:
        in_use = log.is_file() and log.stat().st_size > 0
        target, uri = read_only_uri(path, immutable=not in_use), True
    try:
        conn = sqlite3.connect(
            target,
            uri=uri,
            timeout=busy_timeout_seconds,
            isolation_level=None,
            check_same_thread=False,
        )
    except sqlite3.Error as error:
        raise _opening_error(path, error, busy_timeout_seconds) from error
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as error:
        conn.close()
        _remove_new_sidecars(path, existed)
        raise _opening_error(path, error, busy_timeout_seconds) from error
    return path, conn


def _check_version(conn: sqlite3.Connection, path: Path) -> int:
    version = current_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: database schema version {version} is newer than this voxmeter supports "
            f"(version {SCHEMA_VERSION}); upgrade voxmeter"
        )
    return version


def default_db_path() -> Path:
    """``$VOXMETER_DB`` or ``./voxmeter.db``."""
    return Path(os.environ.get("VOXMETER_DB") or "voxmeter.db")


def open_store(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    read_only: bool = False,
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
) -> Store:
    """Open the database at ``path`` (created with mode 0600 when ``create``) and migrate it.

    ``read_only`` (for commands that only read: ``db list``, ``status``, the metrics) opens it
    without writing; an old schema is then migrated only if the file is writable.

    Raises :class:`StoreError` for a missing file (``create=False``), a file that is not a
    voxmeter database (left unchanged), a read-only file opened for writing, a damaged database,
    a schema newer than :data:`SCHEMA_VERSION`, or a lock held longer than
    ``busy_timeout_seconds`` by another process.
    """
    if read_only:
        path, conn = connect_read_only(path, busy_timeout_seconds=busy_timeout_seconds)
        version = _closing_on_error(conn, path, busy_timeout_seconds, _check_version)
        if version == SCHEMA_VERSION:
            return Store(path, conn, busy_timeout_seconds)
        conn.close()
        status = path.stat()
        if not writable(path, status):
            raise StoreError(
                f"{path}: schema version {version} must be upgraded to {SCHEMA_VERSION} "
                f"before this voxmeter can read it, but the database is read-only "
                f"(mode {stat.S_IMODE(status.st_mode):04o}); nothing was changed"
            )
        create = False  # migrate it below, as a write would
    path, conn = connect(path, create=create, busy_timeout_seconds=busy_timeout_seconds)
    _closing_on_error(conn, path, busy_timeout_seconds, _check_version)
    _closing_on_error(conn, path, busy_timeout_seconds, migrate)
    return Store(path, conn, busy_timeout_seconds)


def _closing_on_error(
    conn: sqlite3.Connection,
    path: Path,
    busy_timeout_seconds: float,
    step: Callable[[sqlite3.Connection, Path], _T],
) -> _T:
    """``step(conn, path)``; on any failure the connection is closed (no handle left on a file
    we refuse) and a SQLite error becomes one :class:`StoreError` line."""
    try:
        return step(conn, path)
    except sqlite3.Error as error:
        conn.close()
        raise _opening_error(path, error, busy_timeout_seconds) from error
    except BaseException:
        conn.close()
        raise


class Store(TemplatesMixin, CalibrationsMixin, LedgerMixin, OutboxMixin, RoomsMixin, Database):
    """The voxmeter database: identities, templates, local profiles (templates.py), calibrations
    (calibrations.py), evidence ledger (ledger.py), budget state and alert outbox (outbox.py),
    sources' rooms (rooms.py)."""
