"""Opening, file mode, WAL, migrations, and the user errors of the database file."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from monitor.errors import StoreError
from monitor.features.base import Observation
from monitor.store import MIGRATIONS, SCHEMA_VERSION, open_store
from monitor.store.database import connect, migrate


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_database_is_private_wal_with_foreign_keys(db_path: Path) -> None:
    old_umask = os.umask(0o022)  # a permissive umask must not widen the mode
    try:
        store = open_store(db_path)
        store.add_identity("spk1")
    finally:
        os.umask(old_umask)
    with store:
        assert _mode(db_path) == 0o600
        for suffix in ("-wal", "-shm"):
            side = db_path.with_name(db_path.name + suffix)
            assert side.exists() and _mode(side) == 0o600
        conn = store._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert store.schema_version == SCHEMA_VERSION


def test_wider_sidecar_modes_are_tightened(db_path: Path) -> None:
    open_store(db_path).close()
    wal = db_path.with_name(db_path.name + "-wal")
    wal.touch()
    os.chmod(wal, 0o644)
    with open_store(db_path):
        assert _mode(wal) == 0o600


def test_missing_file_without_create(db_path: Path) -> None:
    with pytest.raises(StoreError, match="no such database"):
        open_store(db_path, create=False)
    assert not db_path.exists()


def test_old_version_is_migrated_keeping_its_data(db_path: Path) -> None:
    path, conn = connect(db_path)
    assert migrate(conn, path, target=1) == 1
    conn.execute("INSERT INTO identities (alias, metadata, created) VALUES ('old', '{}', 'x')")
    conn.execute(
        "INSERT INTO templates VALUES (1, 'f0', 2, 3.5, ?, 'x')",
        (np.array([1.0, 2.0]).tobytes(),),
    )
    assert not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'outbox'"
    ).fetchone()  # version 1 has no daemon tables
    conn.close()

    with open_store(db_path) as store:
        assert store.schema_version == SCHEMA_VERSION == MIGRATIONS[-1].version
        versions = [r[0] for r in store._conn.execute("SELECT version FROM schema_migrations")]
        assert versions == [m.version for m in MIGRATIONS]
        assert store.template("old", "f0").values.tolist() == [1.0, 2.0]
        store.transition("old", "warning", 3.0, {"to": "warning"}, "t/alerts")  # v2 table works
        assert store.pending_count() == 1


def test_failed_migration_leaves_previous_version(db_path: Path) -> None:
    from monitor.store.database import Migration

    path, conn = connect(db_path)
    broken = (*MIGRATIONS[:1], Migration(2, "broken", ("CREATE TABLE a (x)", "NOT SQL")))
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, path, migrations=broken)
    assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == 1
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'a'").fetchone()
    conn.close()


def test_newer_schema_is_refused_naming_both_versions(db_path: Path) -> None:
    open_store(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(
        "INSERT INTO schema_migrations VALUES (?, 'from the future', 'x')", (SCHEMA_VERSION + 5,)
    )
    conn.commit()
    conn.close()
    with pytest.raises(StoreError) as error:
        open_store(db_path)
    message = str(error.value)
    assert str(db_path) in message
    assert f"version {SCHEMA_VERSION + 5}" in message and f"version {SCHEMA_VERSION})" in message


def test_not_sqlite_file_is_named(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("these are not the pages you are looking for\n" * 100)
    with pytest.raises(StoreError, match=r"notes\.db: not an SQLite database"):
        open_store(bogus)


def test_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a voxmeter one"):
        open_store(other)


def test_locked_database_gives_a_clear_message(db_path: Path) -> None:
    open_store(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with open_store(db_path, busy_timeout_seconds=0.2) as store:
            observation = Observation("f0", np.ones(4), 1.0)
            with pytest.raises(StoreError) as error:
                store.replace_templates("spk1", {"f0": observation})
        message = str(error.value)
        assert message.startswith(f"{db_path}: database is locked by another process")
        assert "0.2 s" in message and "\n" not in message
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with open_store(db_path) as store:  # usable again once the lock is gone
        store.replace_templates("spk1", {"f0": Observation("f0", np.ones(4), 1.0)})
        assert [i.alias for i in store.identities()] == ["spk1"]


def test_locked_fresh_database_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None)  # rollback journal, not WAL yet
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE t (x)")
    try:
        with pytest.raises(StoreError, match="database is locked by another process"):
            open_store(path, busy_timeout_seconds=0.1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_reading_an_empty_file_writes_nothing_into_it(tmp_path: Path) -> None:
    """`db list` on a 0-byte file must not turn it into a voxmeter database."""
    empty = tmp_path / "x.db"
    empty.touch()
    with pytest.raises(StoreError, match="empty file"):
        open_store(empty, create=False)
    assert empty.stat().st_size == 0
    assert not empty.with_name("x.db-wal").exists()
