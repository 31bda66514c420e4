"""The connection and its transaction discipline, shared by every area of the store.

Each area of the schema (templates.py, ledger.py, outbox.py) is a mixin over :class:`Database`;
``database.py`` owns the schema and composes them into :class:`~monitor.store.database.Store`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from monitor.errors import StoreError


def utc_now() -> str:
    """Timestamps are ISO 8601 UTC strings: readable in `sqlite3` and sortable."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def dumps(document: Any) -> str:
    """JSON for the metadata and payload columns (NaN is not JSON: refuse it)."""
    try:
        return json.dumps(document, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValueError(f"not storable as JSON: {error}") from error


def is_locked(error: sqlite3.Error) -> bool:
    text = str(error).lower()
    return "locked" in text or "busy" in text


class Database:
    """The connection and its transaction discipline; the schema areas are mixins on top.

    One connection shared by the daemon's threads (``check_same_thread=False``) behind a lock;
    every write runs in ``BEGIN IMMEDIATE`` so lock waits happen at the start, never mid-way.
    """

    def __init__(self, path: Path, connection: sqlite3.Connection, busy_timeout: float) -> None:
        self.path = path
        self._conn = connection
        self._lock = threading.RLock()
        self._busy_timeout = busy_timeout

    # ---- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._read() as conn:
            return current_version(conn)

    def check_writable(self) -> None:
        """Raise StoreError now if the database cannot be written — another process holds the
        write lock, or the file or its folder is read-only — before long work starts. The
        probe rewrites the header's user_version with its own value: nothing changes."""
        with self._transaction() as conn:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            conn.execute(f"PRAGMA user_version = {version}")

    # ---- transactions ------------------------------------------------------------------------
    def _error(self, error: sqlite3.Error) -> StoreError:
        """Translate an SQLite failure into a one-line StoreError naming the file."""
        if is_locked(error):
            return StoreError(locked_message(self.path, self._busy_timeout))
        if "malformed" in str(error):
            return StoreError(damaged_message(self.path, str(error)))
        return StoreError(f"{self.path}: database error: {error}")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all statements inside commit together or not at all."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as error:
                raise self._error(error) from error
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as failure:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(failure, sqlite3.IntegrityError):
                    raise ValueError(f"{self.path}: rejected by the schema: {failure}") from failure
                if isinstance(failure, sqlite3.Error):
                    raise self._error(failure) from failure
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """Reads see one consistent snapshot (WAL) and hold the connection lock."""
        with self._lock:
            try:
                yield self._conn
            except sqlite3.Error as error:
                raise self._error(error) from error


def locked_message(path: Path, busy_timeout: float) -> str:
    """The one line a user sees when another process holds the write lock."""
    return (
        f"{path}: database is locked by another process "
        f"(waited {busy_timeout:g} s); stop the other voxmeter or retry"
    )


def damaged_message(path: Path, detail: str) -> str:
    """The one line for a database SQLite finds damaged, with the ways out."""
    return (
        f"{path}: the database is damaged ({detail}); nothing was written: restore it from a "
        f"backup, or copy what is readable into a new file with `voxmeter db recover --db "
        f"{path} NEW.db` (`voxmeter db check` tells more)"
    )


def current_version(conn: sqlite3.Connection) -> int:
    """The schema version: the highest applied migration (0 for a fresh file)."""
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def vector_blob(values: npt.ArrayLike, what: str) -> tuple[bytes, int]:
    """A (D,) finite vector as little-endian float64 bytes and D; ValueError names ``what``."""
    vector = np.asarray(values, dtype=np.float64)
    if vector.ndim != 1 or vector.size == 0:
        raise ValueError(f"{what}: values must be a non-empty 1-D vector, got shape {vector.shape}")
    if not np.all(np.isfinite(vector)):
        raise ValueError(f"{what}: values contain NaN or infinity")
    return vector.astype("<f8", copy=False).tobytes(), int(vector.size)


def blob_vector(blob: bytes) -> npt.NDArray[np.float64]:
    """Inverse of :func:`vector_blob` (a writable copy, native float64)."""
    return np.frombuffer(blob, dtype="<f8").astype(np.float64)
