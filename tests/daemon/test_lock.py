"""One daemon per database: a second ``voxmeter run`` on the same database is refused with one
line and exit 2, and the lock goes with its owner however it ends (SIGKILL included)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from monitor.daemon.lock import DaemonLock
from monitor.errors import StoreError
from monitor.store.database import open_store
from tests.daemon.test_stdin_runs import pcm
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker, free_port

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


def daemon_command(
    db: str, broker: MosquittoBroker, client_id: str, metrics_port: int
) -> list[str]:
    """Both daemons ask for the same broker client id and the same metrics port: a second one
    that got past the lock would knock the first off the broker or fail to bind."""
    return [
        *COMMAND, "--db", db,
        "--set", "prometheus.enabled=true",
        "--set", f"prometheus.port={metrics_port}",
        "--set", "mqtt.enabled=true",
        "--set", f"mqtt.port={broker.port}",
        "--set", f'mqtt.client_id="{client_id}"',
    ]  # fmt: skip


def connections(broker: MosquittoBroker, client_id: str) -> int:
    """How many times ``client_id`` connected, from the broker's own log."""
    log = broker.log_path.read_text() if broker.log_path.exists() else ""
    return sum(1 for line in log.splitlines() if f" as {client_id} " in line)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.mosquitto
def test_a_second_daemon_by_another_name_never_reaches_the_broker(
    daemon_corpus, daemon_db: Path, tmp_path: Path, mosquitto: MosquittoBroker
) -> None:
    client_id = "voxmeter-lock-test"
    metrics_port = free_port()
    symlink = tmp_path / "via-symlink.db"
    first = subprocess.Popen(
        daemon_command(str(daemon_db), mosquitto, client_id, metrics_port),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert first.stderr is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while b"msg=started" not in first.stderr.readline():
            assert time.monotonic() < deadline and first.poll() is None, "first never started"
        while connections(mosquitto, client_id) == 0:
            assert time.monotonic() < deadline, "the first daemon never reached the broker"
            time.sleep(0.05)
        symlink.symlink_to(daemon_db)
        hardlink = daemon_db.with_name("via-hardlink.db")
        os.link(daemon_db, hardlink)
        for name in (str(symlink), str(hardlink), "./voxmeter.db"):
            second = subprocess.run(
                daemon_command(name, mosquitto, client_id, metrics_port),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT_SECONDS,
                cwd=daemon_db.parent,
            )
            assert second.returncode == 2, second.stderr
            assert second.stderr == (
                f"voxmeter: error: {Path(name)}: another voxmeter daemon is running on this "
                f"database (pid {first.pid}); stop it first, or give this one its own daemon.db\n"
            )
        time.sleep(1.0)  # a connection would have been logged by now
        assert connections(mosquitto, client_id) == 1, mosquitto.log_path.read_text()
        assert first.poll() is None  # never knocked off, still running
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            assert b"voxmeter_" in r.read()  # the port is still the first daemon's
        assert not hardlink.with_name("via-hardlink.db-wal").exists()  # no stray log
        assert not hardlink.with_name("via-hardlink.db-shm").exists()
    finally:
        stop_process(first, sig=signal.SIGTERM)


def test_disk_full_at_start_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A real full file system: a small tmpfs holding the database, the rest filled."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        db = disk / "voxmeter.db"
        open_store(db).close()
        with contextlib.suppress(OSError), (disk / "filler").open("wb") as filler:  # to ENOSPC
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        before = sorted(p.name for p in disk.iterdir())
        done = subprocess.run(
            [*COMMAND, "--db", str(db)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_SECONDS,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr == (
            f"voxmeter: error: {db}: cannot open database: the disk holding it is full; "
            "nothing was changed: free some space, then try again\n"
        )
        assert sorted(p.name for p in disk.iterdir()) == before  # no lock, no -wal, no -shm
    finally:
        subprocess.run(["umount", str(disk)], check=True)
