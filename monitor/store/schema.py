"""The schema: its versions as ordered migrations, and the mark that makes a file ours.

Each migration runs in its own transaction, so a crash mid-upgrade leaves the previous version
intact. A database voxmeter creates carries :data:`APPLICATION_ID` in its SQLite header from its
first write; databases made before that are recognised by their ``schema_migrations`` table
(see files.py) and get the mark the first time they are opened for writing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.errors import StoreError
from monitor.store.base import current_version, utc_now

__all__ = [
    "APPLICATION_ID",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "initialise",
    "migrate",
]

APPLICATION_ID = 0x766F786D
"""``PRAGMA application_id`` of a voxmeter database: "voxm" in ASCII (header bytes 68–71)."""

_MIGRATIONS_TABLE = (
    "CREATE TABLE schema_migrations "
    "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied TEXT NOT NULL)"
)
MIGRATIONS_COLUMNS = ("version", "description", "applied")


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

# What each source has learnt of its room (monitor.tracking.domain): an embedding offset per
# source, never audio.
_V5_SOURCE_ROOMS = (
    """CREATE TABLE source_rooms (
        source    TEXT PRIMARY KEY,
        model     TEXT NOT NULL,
        dimension INTEGER NOT NULL CHECK (dimension > 0),
        residuals BLOB NOT NULL CHECK (length(residuals) = 8 * dimension),
        seconds   REAL NOT NULL CHECK (seconds >= 0),
        updated   TEXT NOT NULL
    )""",
)

#: Ordered migrations; a database at version v gets every migration with version > v.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "identities, templates, local profiles, calibrations", _V1_TEMPLATES),
    Migration(2, "evidence ledger, budget state, alert outbox", _V2_DAEMON),
    Migration(3, "model that made each template and local profile", _V3_TEMPLATE_MODEL),
    Migration(4, "stream position of each ledger window; track merges", _V4_STREAM_AND_MERGES),
    Migration(5, "what each source has learnt of its room", _V5_SOURCE_ROOMS),
)
SCHEMA_VERSION = MIGRATIONS[-1].version


def initialise(conn: sqlite3.Connection) -> None:
    """Mark a new, empty file as ours and create ``schema_migrations``, in one transaction, so a
    crash leaves either an empty file or one that says it is voxmeter's."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(_MIGRATIONS_TABLE)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _mark(conn: sqlite3.Connection) -> None:
    """Give a database made before the application id (recognised by its schema) the mark."""
    if int(conn.execute("PRAGMA application_id").fetchone()[0]) == APPLICATION_ID:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


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
    """Bring a recognised database's schema to ``target``, one transaction per migration;
    return the version. Only a file :func:`monitor.store.files.recognise` accepted gets here
    (connect() has initialised a new one); a file without ``schema_migrations`` is refused.
    """
    if not _has_table(conn, "schema_migrations"):
        raise StoreError(f"{path}: an SQLite database, but not a voxmeter one; nothing changed")
    _mark(conn)
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
