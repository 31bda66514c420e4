"""One SQLite file behind the whole product: connection, schema versions, migrations.

Why SQLite: the daemon runs on small devices, keeps its state across restarts and must never lose
an alert; one file in WAL mode (readers never block the writer), mode 0600 (it holds voice
templates), foreign keys on, a bounded busy timeout. Each migration runs in its own transaction,
so a crash mid-upgrade leaves the previous version intact.

The :class:`Store` composes the areas of the schema (templates and identities, ledger, outbox);
each area lives in its own module as a mixin over :class:`~monitor.store.base.Database`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import StoreError
from monitor.store.base import (
    Database,
    current_version,
    is_locked,
    locked_message,
    utc_now,
)
from monitor.store.ledger import LedgerMixin
from monitor.store.outbox import OutboxMixin
from monitor.store.templates import TemplatesMixin

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Database", "Migration", "Store", "open_store"]

DEFAULT_BUSY_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``apply`` is a list of SQL statements or a function."""

    version: int
    description: str
    apply: Sequence[str] | Callable[[sqlite3.Connection], None]


_V1_TEMPLATES = (
    """CREATE TABLE identities (
        id       INTEGER PRIMARY KEY,
        alias    TEXT NOT NULL UNIQUE CHECK (length(alias) > 0),
        metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
        created  TEXT NOT NULL
    )""",
    """CREATE TABLE templates (
        identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
        feature     TEXT NOT NULL,
        dimension   INTEGER NOT NULL CHECK (dimension > 0),
        seconds     REAL NOT NULL CHECK (seconds >= 0),
        vector      BLOB NOT NULL CHECK (length(vector) = 8 * dimension),
        updated     TEXT NOT NULL,
        PRIMARY KEY (identity_id, feature)
    )""",
    # template_batch reads one feature in identity order without sorting blobs.
    "CREATE INDEX templates_by_feature ON templates(feature, identity_id)",
    """CREATE TABLE local_profiles (
        alias       TEXT PRIMARY KEY CHECK (length(alias) > 0),
        identity_id INTEGER NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
        feature     TEXT NOT NULL,
        dimension   INTEGER NOT NULL CHECK (dimension > 0),
        seconds     REAL NOT NULL CHECK (seconds >= 0),
        vector      BLOB NOT NULL CHECK (length(vector) = 8 * dimension),
        updated     TEXT NOT NULL
    )""",
    "CREATE INDEX local_profiles_by_identity ON local_profiles(identity_id)",
    """CREATE TABLE calibrations (
        id       INTEGER PRIMARY KEY,
        name     TEXT NOT NULL,
        document TEXT NOT NULL CHECK (json_valid(document)),
        corpus   TEXT,
        protocol TEXT,
        fitted   TEXT,
        saved    TEXT NOT NULL
    )""",
    "CREATE INDEX calibrations_by_name ON calibrations(name, id)",
)

_V2_DAEMON = (
    """CREATE TABLE ledger_windows (
        id             INTEGER PRIMARY KEY,
        track          TEXT NOT NULL,
        period_start   REAL NOT NULL,
        window_start   REAL NOT NULL,
        window_end     REAL NOT NULL CHECK (window_end >= window_start),
        speech_seconds REAL NOT NULL CHECK (speech_seconds >= 0),
        window_bits    REAL,
        figures        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(figures))
    )""",
    "CREATE INDEX ledger_windows_by_track ON ledger_windows(track, period_start, window_end)",
    """CREATE TABLE ledger_pooled (
        track        TEXT NOT NULL,
        period_start REAL NOT NULL,
        feature      TEXT NOT NULL,
        dimension    INTEGER NOT NULL CHECK (dimension > 0),
        seconds      REAL NOT NULL CHECK (seconds >= 0),
        vector       BLOB NOT NULL CHECK (length(vector) = 8 * dimension),
        windows      INTEGER NOT NULL CHECK (windows >= 0),
        updated      TEXT NOT NULL,
        PRIMARY KEY (track, period_start, feature)
    )""",
    """CREATE TABLE budget_state (
        alias   TEXT PRIMARY KEY,
        state   TEXT NOT NULL CHECK (state IN ('ok', 'warning', 'exceeded')),
        bits    REAL NOT NULL,
        updated TEXT NOT NULL
    )""",
    """CREATE TABLE outbox (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        topic   TEXT NOT NULL,
        payload TEXT NOT NULL CHECK (json_valid(payload)),
        created TEXT NOT NULL
    )""",
)

# Which extractor made each stored vector (the feature's version, e.g. the embedding backend),
# so templates of different models are never scored together. Before this migration the only
# embedding was resemblyzer's GE2E; f0 and phone rows stay '' (made by an unrecorded version).
_V3_TEMPLATE_MODEL = (
    "ALTER TABLE templates ADD COLUMN model TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE local_profiles ADD COLUMN model TEXT NOT NULL DEFAULT ''",
    "UPDATE templates SET model = 'resemblyzer014-1' WHERE feature = 'embedding'",
    "UPDATE local_profiles SET model = 'resemblyzer014-1' WHERE feature = 'embedding'",
)

# Where each window lies in the file or stream (seconds), beside its wall-clock times, so an
# attribution can be checked against the recording (NULL for windows recorded before); and the
# merges of two tracks found to be one voice.
_V4_STREAM_AND_MERGES = (
    "ALTER TABLE ledger_windows ADD COLUMN stream_start REAL",
    "ALTER TABLE ledger_windows ADD COLUMN stream_end REAL",
    """CREATE TABLE ledger_merges (
        id           INTEGER PRIMARY KEY,
        period_start REAL NOT NULL,
        retired      TEXT NOT NULL,
        into_track   TEXT NOT NULL CHECK (into_track != retired),
        windows      INTEGER NOT NULL CHECK (windows >= 0),
        merged       TEXT NOT NULL
    )""",
)

#: Ordered migrations; a database at version v gets every migration with version > v.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "identities, templates, local profiles, calibrations", _V1_TEMPLATES),
    Migration(2, "evidence ledger, budget state, alert outbox", _V2_DAEMON),
    Migration(3, "model that made each template and local profile", _V3_TEMPLATE_MODEL),
    Migration(4, "stream position of each ledger window; track merges", _V4_STREAM_AND_MERGES),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def _create_private_file(path: Path) -> None:
    """Create an empty file with mode 0600 *before* SQLite opens it, so it is never readable."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)  # the umask may have cleared bits; make the mode exact


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
    return row.fetchone() is not None


def migrate(
    conn: sqlite3.Connection,
    path: Path,
    *,
    target: int = SCHEMA_VERSION,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> int:
    """Bring the schema to ``target``, one transaction per migration; return the version.

    A file with tables but no ``schema_migrations`` is some other SQLite database: refused.
    """
    with_tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'")
    if not _has_table(conn, "schema_migrations"):
        if with_tables.fetchone()[0]:
            raise StoreError(f"{path}: an SQLite database, but not a voxmeter one")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied TEXT NOT NULL)"
        )
        conn.execute("COMMIT")
    version = current_version(conn)
    newest = migrations[-1].version if migrations else 0
    if version > newest:
        raise StoreError(
            f"{path}: database schema version {version} is newer than this voxmeter supports "
            f"(version {newest}); upgrade voxmeter"
        )
    for migration in migrations:
        if version >= migration.version or migration.version > target:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read inside the write lock: another process may have migrated meanwhile.
            if current_version(conn) < migration.version:
                if callable(migration.apply):
                    migration.apply(conn)
                else:
                    for statement in migration.apply:
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, description, applied) VALUES (?,?,?)",
                    (migration.version, migration.description, utc_now()),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        version = migration.version
    return version


def _empty_without_wal(path: Path) -> bool:
    """A 0-byte file with no write-ahead log holds nothing yet (a fresh WAL database may keep
    its first pages in ``-wal`` until a checkpoint, so the log is checked too)."""
    wal = path.with_name(path.name + "-wal")
    return (
        path.is_file()
        and path.stat().st_size == 0
        and not (wal.is_file() and wal.stat().st_size > 0)
    )


def connect(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
) -> tuple[Path, sqlite3.Connection]:
    """Open (creating with mode 0600 if allowed) and configure the SQLite connection.

    No schema work here: :func:`open_store` migrates; tests use this to build old versions.
    """
    path = Path(path)
    if path.is_dir():
        raise StoreError(f"{path}: is a directory, not a database file")
    if path.exists() and not path.is_file():  # SQLite would leave <device>-journal beside it
        raise StoreError(f"{path}: not a regular file (a device, pipe or socket)")
    if not create and _empty_without_wal(path):  # reading must not write a schema into it
        raise StoreError(
            f"{path}: empty file, not a voxmeter database (create one with `voxmeter enroll`)"
        )
    if not path.exists():
        if not create:
            raise StoreError(f"{path}: no such database (create it with `voxmeter enroll`)")
        if not path.parent.is_dir():
            raise StoreError(f"{path}: directory {path.parent} does not exist")
        try:
            _create_private_file(path)
        except FileExistsError:
            pass  # another process created it between our check and now: fine
        except OSError as error:
            raise StoreError(f"{path}: cannot create database: {error.strerror}") from error
    try:
        conn = sqlite3.connect(
            path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as error:
        raise StoreError(f"{path}: cannot open database: {error}") from error
    try:
        if path.stat().st_size == 0:
            # Before the first table: 16 KiB pages keep a 256-d template (2 KiB) in one leaf
            # and read 10⁵ templates about three times faster than the 4 KiB default.
            conn.execute("PRAGMA page_size = 16384")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{path}: cannot switch the database to WAL mode (got {mode})")
        conn.execute("PRAGMA synchronous = NORMAL")  # durable at checkpoints; safe in WAL
    except sqlite3.DatabaseError as error:
        conn.close()
        if is_locked(error):
            raise StoreError(locked_message(path, busy_timeout_seconds)) from error
        if "not a database" in str(error) or "encrypted" in str(error):
            raise StoreError(f"{path}: not an SQLite database ({error})") from error
        if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
            raise StoreError(
                f"{path}: cannot open database ({error}): the file or its folder is read-only, "
                "and SQLite's WAL needs to write both"
            ) from error
        raise StoreError(f"{path}: cannot open database: {error}") from error
    except BaseException:
        conn.close()
        raise
    for suffix in ("", "-wal", "-shm"):  # an existing 0644 database is made private too
        side = path.with_name(path.name + suffix)
        if side.exists() and stat.S_IMODE(side.stat().st_mode) != 0o600:
            # Owned by another user (e.g. the daemon's): leave it as it is.
            with contextlib.suppress(PermissionError):
                os.chmod(side, 0o600)
    return path, conn


def open_store(
    path: str | os.PathLike[str],
    *,
    create: bool = True,
    busy_timeout_seconds: float = DEFAULT_BUSY_TIMEOUT_SECONDS,
) -> Store:
    """Open the database at ``path`` (created with mode 0600 when ``create``) and migrate it.

    Raises :class:`StoreError` for a missing file (``create=False``), a file that is not a
    voxmeter SQLite database, a schema newer than :data:`SCHEMA_VERSION`, or a lock held longer
    than ``busy_timeout_seconds`` by another process.
    """
    path, conn = connect(path, create=create, busy_timeout_seconds=busy_timeout_seconds)
    try:
        migrate(conn, path)
    except sqlite3.DatabaseError as error:
        conn.close()
        if is_locked(error):
            raise StoreError(locked_message(path, busy_timeout_seconds)) from error
        raise StoreError(f"{path}: cannot read the schema: {error}") from error
    except BaseException:
        conn.close()
        raise
    return Store(path, conn, busy_timeout_seconds)


class Store(TemplatesMixin, LedgerMixin, OutboxMixin, Database):
    """The voxmeter database: identities, templates, local profiles, calibrations (templates.py),
    evidence ledger (ledger.py), budget state and alert outbox (outbox.py)."""
