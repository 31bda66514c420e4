"""One line for every bad ``relay.socket``, the same rules in ``voxmeter relay`` and ``voxmeter
run`` (monitor/userfiles.py, :func:`socket_problem`): a parent that is a file, a folder that
cannot be entered, another user's stale socket in a sticky folder (refused, left untouched), a
path too long for ``sun_path``. Real processes; the cases that need a second user run the relay
as ``nobody`` when the tests run as root, and are skipped otherwise."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.errors import ConfigError
from monitor.settings.config import load_config
from monitor.userfiles import MAX_SOCKET_PATH_BYTES

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
ROOT = os.geteuid() == 0


def _nobody_runs_this_python() -> bool:
    """Whether ``nobody`` can start this interpreter (not one installed under /root, e.g.
    pyenv's, whose shared library that user cannot read)."""
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    try:
        run = subprocess.run([*command, sys.executable, "-c", ""], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0


AS_NOBODY = ROOT and _nobody_runs_this_python()
NEEDS_NOBODY = pytest.mark.skipif(
    not AS_NOBODY, reason="needs a second user who can run this Python: the relay runs as nobody"
)
SOURCE = "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:9"


@pytest.fixture
def folder() -> Iterator[Path]:
    """A short folder (a socket path must be short) every user can enter."""
    path = Path(tempfile.mkdtemp(prefix="vxsock-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for inner in path.rglob("*"):  # chmod back what a case locked, so it can be removed
            if inner.is_dir() and not inner.is_symlink():
                inner.chmod(0o755)
        shutil.rmtree(path, ignore_errors=True)


def _as(user: int | None) -> list[str]:
    if user is None:
        return []
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]


def relay(socket_path: Path | str, user: int | None = None) -> subprocess.Popen[str]:
    command = [
        *_as(user), sys.executable, "-m", "monitor.cli", "relay", "--set",
        f"daemon.source={SOURCE}", "--set", f"relay.socket={socket_path}",
        "--set", "wyoming.zeroconf=false",
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def refused(process: subprocess.Popen[str]) -> str:
    """The one line a refusing command printed (it must exit 2 at once, without a traceback)."""
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("voxmeter: error: "), stderr
    assert "relay.socket" in lines[0]
    return lines[0]


def voxmeter_run(socket_path: Path | str, db: Path) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "monitor.cli", "run", "--db", str(db), "--source", SOURCE,
        "--set", f"relay.socket={socket_path}", "--set", "prometheus.enabled=false",
        "--set", "wyoming.zeroconf=false",
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_parent_that_is_a_file_is_one_line_in_relay_and_run(folder: Path) -> None:
    from monitor.store.database import open_store

    (folder / "file").write_text("not a folder")
    path = folder / "file" / "relay.sock"
    line = refused(relay(path))
    assert "is not a folder" in line
    open_store(folder / "v.db").close()
    assert "is not a folder" in refused(voxmeter_run(path, folder / "v.db"))


@pytest.mark.skipif(ROOT and not AS_NOBODY, reason="nobody cannot run this Python")
def test_a_folder_that_cannot_be_entered_is_one_line(folder: Path) -> None:
    locked = folder / "locked"
    locked.mkdir(mode=0o700)
    user = NOBODY if ROOT else None
    if not ROOT:
        locked.chmod(0o000)
    line = refused(relay(locked / "inner" / "relay.sock", user))
    assert "cannot be entered" in line


@NEEDS_NOBODY
def test_another_users_stale_socket_in_a_sticky_folder_is_refused_untouched(folder: Path) -> None:
    sticky = folder / "shared"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp
    path = sticky / "relay.sock"
    with socket.socket(socket.AF_UNIX) as stale:  # root's relay, killed: its file stays
        stale.bind(str(path))
    before = path.lstat()
    line = refused(relay(path, NOBODY))
    assert "another user" in line and "left as it is" in line
    after = path.lstat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_both_commands_apply_one_length_limit(folder: Path) -> None:
    """``voxmeter run`` once refused 101–107 bytes that ``voxmeter relay`` accepted: both
    accept the longest path ``sun_path`` holds and refuse one byte more, in the same words."""
    stem = str(folder / "x")
    longest = stem + "x" * (MAX_SOCKET_PATH_BYTES - len(stem.encode()))
    assert len(longest.encode()) == MAX_SOCKET_PATH_BYTES
    config = load_config(None, [f"daemon.source={SOURCE}", f"relay.socket={longest}"])
    assert config.relay.socket == longest
    process = relay(longest)
    try:
        deadline = time.monotonic() + 60
        while not Path(longest).is_socket():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the relay never listened"
            time.sleep(0.05)
    finally:
        process.terminate()
        process.communicate(timeout=30)
    too_long = longest + "x"
    line = refused(relay(too_long))
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"daemon.source={SOURCE}", f"relay.socket={too_long}"])
    problem = f"{len(too_long.encode())} bytes, over the {MAX_SOCKET_PATH_BYTES}"
    assert problem in line and problem in str(caught.value)
