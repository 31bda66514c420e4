"""``voxmeter run`` as a real process: clean stop on SIGTERM, continuity after SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.ledger.budget import period_start
from monitor.store.database import open_store

pytestmark = pytest.mark.corpus

# A daemon that never logs a window hangs its test in readline: pytest-timeout ends it. No
# wall-clock assert: the 2 s requirement after SIGTERM is the daemon's own watchdog,
# which exits with status 1 after 1.75 s (test_watchdog.py); exit status 0 shows that the
# daemon's clean path finished first. The waits below are generous hang guards, not speed tests.
HANG_GUARD_SECONDS = 30


def start(db: Path, stream: Path, *args: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "monitor.cli", "run",
        "--db", str(db), "--source", f"file:{stream}",
        "--set", "prometheus.enabled=false", "--set", "logging.format=\"keyvalue\"",
        *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=os.environ
    )


def wait_for_windows(process: subprocess.Popen[str], count: int) -> list[str]:
    """Read log lines until ``count`` windows were scored; returns the window lines."""
    assert process.stderr is not None
    windows: list[str] = []
    while len(windows) < count:
        line = process.stderr.readline()
        assert line, f"daemon ended early (rc {process.poll()})"
        if "msg=window " in line:
            windows.append(line)
    return windows


def field(line: str, name: str) -> str:
    return next(p.split("=", 1)[1] for p in line.split() if p.startswith(f"{name}="))


@pytest.mark.slow
def test_sigterm_stops_through_the_clean_path(daemon_corpus, daemon_db) -> None:
    process = start(daemon_db, daemon_corpus.known_stream, "--keep-running")
    try:
        logged = wait_for_windows(process, 1)
        process.send_signal(signal.SIGTERM)
        rc = process.wait(timeout=HANG_GUARD_SECONDS)
    finally:
        process.kill()
    rest = process.stderr.read() if process.stderr else ""
    assert rc == 0, rest  # the watchdog's forced exit would be 1
    assert "exiting now" not in rest and "Traceback" not in rest
    assert "msg=stopping reason=SIGTERM" in rest  # the goodbye reached the exporters
    assert "msg=stopped reason=SIGTERM" in rest  # the store is closed, the lock released
    assert "stopped (SIGTERM):" in rest  # and the CLI printed the run's summary
    with open_store(daemon_db) as store:
        assert store.budget_states()["home-1"].state == "ok"
        kept = store.track_period("home-1", period_start(time.time(), 86400.0))
    assert kept.windows >= int(field(logged[-1], "windows"))  # every logged window is stored


@pytest.mark.slow
def test_sigkill_then_restart_continues_cumulative_figures(daemon_corpus, daemon_db) -> None:
    process = start(daemon_db, daemon_corpus.known_stream, "--keep-running")
    try:
        before = wait_for_windows(process, 2)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=HANG_GUARD_SECONDS)
    finally:
        process.kill()
    with open_store(daemon_db) as store:
        period = store.tracks(0.0) or None  # nothing in a period from 1970
        assert period is None
        states = store.budget_states()
        assert "home-1" in states
    killed_windows = int(field(before[-1], "windows"))
    with open_store(daemon_db) as store:
        start_of_period = period_start(time.time(), 86400.0)
        kept = store.track_period("home-1", start_of_period)
    # at most the in-flight window is lost: every logged window is in the ledger
    assert kept.windows >= killed_windows
    speech_before = kept.speech_seconds
    # windows end at turn pauses, so they are not all 3 s: the stream's first window (on the
    # fresh ledger of the killed run) is what the restarted run adds first
    assert int(field(before[0], "windows")) == 1
    first_window_speech = float(field(before[0], "speech_s"))
    again = start(daemon_db, daemon_corpus.known_stream, "--fast", "--exit-at-end")
    try:
        after = wait_for_windows(again, 1)
        rc = again.wait(timeout=120)  # a hang guard for a whole --fast run
    finally:
        again.kill()
    assert rc == 0
    after += [line for line in (again.stderr.read() if again.stderr else "").splitlines()
              if "msg=window " in line]  # fmt: skip
    first = after[0]
    assert int(field(first, "windows")) == kept.windows + 1
    assert float(field(first, "speech_s")) == pytest.approx(
        speech_before + first_window_speech, abs=0.01
    )
    with open_store(daemon_db) as store:
        final = store.track_period("home-1", start_of_period)
    assert final.windows == kept.windows + len(after) > kept.windows
    assert final.speech_seconds == pytest.approx(float(field(after[-1], "speech_s")), abs=0.01)
