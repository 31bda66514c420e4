"""One daemon per database: a second ``voxmeter run`` on the same database is refused with one
line and exit 2, and the lock goes with its owner however it ends (SIGKILL included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.daemon.lock import DaemonLock
from monitor.errors import StoreError
from tests.daemon.test_stdin_runs import pcm
from tests.realparts import stop_process

START_TIMEOUT_SECONDS = 90.0


def test_a_second_lock_on_the_same_database_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "voxmeter.db"
    db.write_bytes(b"")
    (tmp_path / "other.db").write_bytes(b"")
    with DaemonLock(db):
        with pytest.raises(StoreError, match=r"another voxmeter daemon .*\(pid \d+\)") as error:
            DaemonLock(db).acquire()
        assert f"(pid {os.getpid()})" in str(error.value) and str(db) in str(error.value)
        with DaemonLock(tmp_path / "other.db"):  # another database is another lock
            pass
    with DaemonLock(db):  # released with its owner
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db", "voxmeter.db"]  # no file


def test_the_lock_is_the_files_whatever_names_it(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "voxmeter.db"
    db.write_bytes(b"")
    (tmp_path / "via-symlink.db").symlink_to(db)
    os.link(db, tmp_path / "via-hardlink.db")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    with DaemonLock(db):
        for other in ("../via-symlink.db", "../via-hardlink.db", "../voxmeter.db"):
            with pytest.raises(StoreError, match="another voxmeter daemon"):
                DaemonLock(other).acquire()


def test_a_missing_or_special_database_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"missing\.db: no such database"):
        DaemonLock(tmp_path / "missing.db").acquire()
    with pytest.raises(StoreError, match="is a directory"):
        DaemonLock(tmp_path).acquire()
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="not a regular file"):  # and it does not wait
        DaemonLock(fifo).acquire()
    assert not (tmp_path / "missing.db").exists()


COMMAND = [
    sys.executable, "-m", "monitor.cli", "run", "--source", "stdin",
    "--set", "prometheus.enabled=false", "--set", 'logging.format="keyvalue"',
]  # fmt: skip


def voxmeter_run(db: Path, stdin: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*COMMAND, "--db", str(db)],
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        bufsize=0,
    )


@pytest.mark.slow
@pytest.mark.corpus
def test_second_daemon_refused_until_the_first_is_killed(
    daemon_corpus, daemon_db: Path, tmp_path: Path
) -> None:
    first = voxmeter_run(daemon_db, subprocess.PIPE)
    try:
        assert first.stderr is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while b"msg=started" not in first.stderr.readline():
            assert time.monotonic() < deadline and first.poll() is None, "first never started"
        second = subprocess.run(
            [*COMMAND, "--db", str(daemon_db)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_SECONDS,
        )
        assert second.returncode == 2
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0] == (
            f"voxmeter: error: {daemon_db}: another voxmeter daemon is running on this database "
            f"(pid {first.pid}); stop it first, or give this one its own daemon.db"
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        stop_process(first, sig=signal.SIGKILL)
    raw = tmp_path / "speech.raw"
    raw.write_bytes(pcm(daemon_corpus.known_stream, 0.5))
    with raw.open("rb") as stdin:
        third = voxmeter_run(daemon_db, stdin)
        try:
            _, errors = third.communicate(timeout=START_TIMEOUT_SECONDS)
        finally:
            stop_process(third, sig=signal.SIGKILL)
    assert third.returncode == 0, errors.decode()
