"""``voxmeter db check`` and ``voxmeter db recover``: find damage, copy what is readable.

Neither ever writes the database it examines: check reads it through a read-only connection;
recover reads it the same way and writes a *new* file (refusing one that exists), built in a
temporary file beside it and linked into place only when complete. Recovery copies each table
row by row, forwards by rowid until the first unreadable page, then backwards from the end to
it (what ``sqlite3``'s ``.dump`` does; Debian's sqlite3 lacks ``.recover``), so rows on both
sides of a damaged leaf survive; rows whose parent was lost (a template of a lost identity) are
dropped. The copy is then opened as a store, which migrates it and checks it again.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from monitor.errors import StoreError
from monitor.store.base import current_version
from monitor.store.files import read_only_uri, recognise, regular_file, sidecar
from monitor.store.schema import APPLICATION_ID, SCHEMA_VERSION

__all__ = ["CheckResult", "Recovery", "check", "recover"]

_MAX_PROBLEMS = 20


@dataclass(frozen=True)
class CheckResult:
    """What ``PRAGMA integrity_check`` found: ``problems`` empty when the file is sound."""

    path: Path
    schema_version: int
    identities: int
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Recovery:
    """Rows copied per table, the tables with unreadable rows, orphans dropped."""

    rows: dict[str, int] = field(default_factory=dict)
    damaged_tables: tuple[str, ...] = ()
    orphans_dropped: int = 0


@contextlib.contextmanager
def _reader(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection that cannot write ``path`` (immutable when no write-ahead log is beside)."""
    log = sidecar(path, "-wal")
    frozen = not (log.is_file() and log.stat().st_size > 0)
    try:
        conn = sqlite3.connect(read_only_uri(path, immutable=frozen), uri=True)
    except sqlite3.Error as error:
        raise StoreError(f"{path}: cannot open database: {error}") from error
    try:
        yield conn
    finally:
        conn.close()


def _count(conn: sqlite3.Connection, table: str) -> int:
    try:
        return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    except sqlite3.DatabaseError:
        return -1


def check(path: Path) -> CheckResult:
    """Run the full ``integrity_check`` on a recognised database, read-only."""
    if regular_file(path) is None:
        raise StoreError(f"{path}: no such database")
    if not recognise(path):
        raise StoreError(f"{path}: empty file, not a voxmeter database")
    with _reader(path) as conn:
        try:
            problems = [str(r[0]) for r in conn.execute(f"PRAGMA integrity_check({_MAX_PROBLEMS})")]
        except sqlite3.DatabaseError as error:
            problems = [str(error)]
        try:
            version = current_version(conn)
        except sqlite3.DatabaseError:
            version = -1
        identities = _count(conn, "identities")
    return CheckResult(path, version, identities, () if problems == ["ok"] else tuple(problems))


def _source_schema(source: Path, conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(type, name, sql) of the source's tables then indexes; StoreError if unreadable or the
    file is another application's."""
    try:
        application_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "ORDER BY type = 'index', rowid"
        ).fetchall()
    except sqlite3.DatabaseError as error:
        raise StoreError(
            f"{source}: its schema is unreadable ({error}): nothing can be recovered; restore "
            "it from a backup"
        ) from error
    names = {name for kind, name, _ in rows if kind == "table"}
    if application_id not in (0, APPLICATION_ID) or "schema_migrations" not in names:
        raise StoreError(f"{source}: not a voxmeter database; nothing to recover")
    return [(str(k), str(n), str(s)) for k, n, s in rows]


def _table_rows(conn: sqlite3.Connection, table: str) -> tuple[list[tuple[object, ...]], bool]:
    """Every readable row (rowid first): forwards to the first error, then backwards to it.
    Returns the rows and whether any could not be read."""
    rows: list[tuple[object, ...]] = []
    query = f'SELECT rowid, * FROM "{table}" ORDER BY rowid'
    try:
        for row in conn.execute(query):
            rows.append(row)
        return rows, False
    except sqlite3.DatabaseError:
        pass
    last = rows[-1][0] if rows else None
    try:
        for row in conn.execute(query + " DESC"):
            if last is not None and row[0] <= last:
                break
            rows.append(row)
    except sqlite3.DatabaseError:
        pass
    return rows, True


def _copy(source: sqlite3.Connection, target: sqlite3.Connection, source_path: Path) -> Recovery:
    schema = _source_schema(source_path, source)
    target.execute("PRAGMA page_size = 16384")
    target.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    target.execute("BEGIN")
    for kind, name, sql in schema:
        if kind == "table" and not name.startswith("sqlite_"):
            target.execute(sql)
    counts: dict[str, int] = {}
    damaged: list[str] = []
    tables = [name for kind, name, _ in schema if kind == "table"]
    for table in sorted(tables, key=lambda t: t == "sqlite_sequence"):  # sequences last
        rows, lost = _table_rows(source, table)
        if lost:
            damaged.append(table)
        if rows:
            marks = ",".join("?" * len(rows[0]))
            if table == "sqlite_sequence":
                target.execute("DELETE FROM sqlite_sequence")
                target.executemany(
                    "INSERT INTO sqlite_sequence VALUES (?, ?)", [r[1:] for r in rows]
                )
            else:
                target.executemany(
                    f'INSERT INTO "{table}" VALUES ({marks[2:]})', [r[1:] for r in rows]
                )
        counts[table] = len(rows)
    for kind, _name, sql in schema:
        if kind == "index":
            target.execute(sql)
    orphans = target.execute("PRAGMA foreign_key_check").fetchall()
    for table, rowid, _parent, _key in orphans:
        target.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))
        counts[table] -= 1
    target.execute("COMMIT")
    return Recovery(counts, tuple(damaged), len(orphans))


def recover(source: Path, destination: Path) -> Recovery:
    """Copy every readable row of ``source`` into the new file ``destination`` (mode 0600).

    ``source`` is only read; an existing ``destination`` is refused, never overwritten.
    """
    if regular_file(source) is None:
        raise StoreError(f"{source}: no such database")
    if destination.exists() or destination.is_symlink():
        raise StoreError(f"{destination}: already exists; recover writes a new file only")
    if not destination.parent.is_dir():
        raise StoreError(f"{destination}: directory {destination.parent} does not exist")
    if destination.resolve() == source.resolve():
        raise StoreError(f"{destination}: is the damaged database itself; give a new file")
    partial = destination.with_name(f".{destination.name}.{os.getpid()}.partial")
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        target = sqlite3.connect(partial, isolation_level=None)
        try:
            with _reader(source) as conn:
                recovery = _copy(conn, target, source)
            problems = [r[0] for r in target.execute("PRAGMA integrity_check(1)")]
            if problems != ["ok"] or current_version(target) > SCHEMA_VERSION:
                raise StoreError(f"{source}: the copy is not sound ({problems[0]}); not written")
        finally:
            target.close()
        os.link(partial, destination)  # fails if it appeared meanwhile: never replaces a file
    except FileExistsError:
        raise StoreError(f"{destination}: already exists; recover writes a new file only") from None
    except sqlite3.Error as error:
        raise StoreError(f"{source}: recovery failed: {error}") from error
    finally:
        for leftover in (partial, sidecar(partial, "-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    return recovery
