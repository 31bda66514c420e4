"""One daemon per database: an OS lock on ``<db>.lock`` held for the daemon's whole life.

Two daemons on one database lose pooled evidence, send every alert twice under different seq
numbers and, sharing one MQTT client id, kick each other off the broker. ``flock`` on a sidecar
file (not on the database, which SQLite locks itself) is released by the kernel when the
process ends in any way, SIGKILL included, so a crash never leaves a stale lock. The file holds
the owner's pid for the error message; it is left in place on exit (deleting it would let a
third process lock a new file while a second still holds the old one).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from monitor.errors import StoreError


def lock_path(db: Path) -> Path:
    """``voxmeter.db`` → ``voxmeter.db.lock`` beside it."""
    return db.with_name(f"{db.name}.lock")


class DaemonLock:
    """``with DaemonLock(db):`` — exclusive for the block, StoreError if another daemon holds it."""

    def __init__(self, db: str | os.PathLike[str]) -> None:
        self.db = Path(db)
        self.path = lock_path(self.db)
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreError(
                f"{self.db}: cannot create the daemon lock {self.path}: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreError(f"{self.path}: cannot lock: {exc.strerror or exc}") from exc
            owner = f" (pid {holder})" if holder.isdigit() else ""
            raise StoreError(
                f"{self.db}: another voxmeter daemon is running on this database{owner}; "
                "stop it first, or give this one its own daemon.db"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> DaemonLock:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
