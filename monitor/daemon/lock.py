"""One daemon per database file, whatever path names it: ``flock`` on the database file itself.

Two daemons on one database lose pooled evidence, send every alert twice under different seq
numbers and, sharing one MQTT client id, kick each other off the broker. The lock is taken on an
open descriptor of the database file, so it belongs to the file's identity (device and inode):
a symlink, a hard link or a relative path to the same file meets the same lock. ``flock`` does
not interfere with SQLite's own (``fcntl``) locks on that file, and the kernel releases it when
the process ends in any way, SIGKILL included, so a crash never leaves a stale lock. Nothing is
written: a full disk cannot fail it and no lock file is left behind. The holder's pid, for the
message, is read from ``/proc/locks``.

The descriptor is opened read-only and never written; it must stay open until every SQLite
connection of the process to that file is closed (closing a descriptor drops the process's
``fcntl`` locks on the file), so :func:`monitor.daemon.build.run_daemon` releases it last.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from types import TracebackType

from monitor.errors import StoreError
from monitor.store.files import dangling_link

PROC_LOCKS = Path("/proc/locks")


def holder_pid(status: os.stat_result, locks: Path = PROC_LOCKS) -> int | None:
    """The pid holding a ``flock`` on the file of ``status`` (device, inode), if the kernel
    says; None when it does not (no /proc, another pid namespace)."""
    wanted = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    try:
        lines = locks.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields:  # a waiter, not the holder
            continue
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            return int(fields[4]) if fields[4].isdigit() and fields[4] != "0" else None
    return None


class DaemonLock:
    """``with DaemonLock(db):`` — exclusive for the block, StoreError if another daemon holds it.

    The database must exist (a daemon needs enrolled templates): a missing one is the same
    one-line error ``open_store(create=False)`` gives.
    """

    def __init__(self, db: str | os.PathLike[str]) -> None:
        self.db = Path(db)
        self._fd: int | None = None

    def _open(self) -> int:
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY  # a FIFO: no wait
        try:
            fd = os.open(self.db, flags)
        except FileNotFoundError:
            if self.db.is_symlink():
                raise dangling_link(self.db) from None
            raise StoreError(
                f"{self.db}: no such database (create it with `voxmeter enroll`)"
            ) from None
        except OSError as exc:
            raise StoreError(f"{self.db}: cannot open: {exc.strerror or exc}") from exc
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "is a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise StoreError(f"{self.db}: {what}, not a database file")
        return fd

    def acquire(self) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            status = os.fstat(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise StoreError(f"{self.db}: cannot lock: {exc.strerror or exc}") from exc
            pid = holder_pid(status)
            owner = f" (pid {pid})" if pid is not None else ""
            raise StoreError(
                f"{self.db}: another voxmeter daemon is running on this database{owner}; "
                "stop it first, or give this one its own daemon.db"
            ) from None
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
