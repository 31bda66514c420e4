"""What ``voxmeter run`` checks and says at start: a bad source is one line before anything else;
a budget beyond reach and metrics open to the network are warned about; the budget period
resets on time, not at the next window."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.audio.stdin import StdinSource
from monitor.daemon.build import build_pipeline
from monitor.errors import ConfigError
from monitor.events.messages import StateChanged, WindowScored
from monitor.exporters.prometheus import PrometheusExporter, is_loopback
from monitor.features.base import get_feature
from monitor.ledger.budget import period_start
from monitor.scoring.evidence import WindowFeatures
from monitor.settings.config import load_config
from monitor.settings.sections import PrometheusSettings
from monitor.store.database import open_store
from tests.daemon.test_pipeline import Recorder
from tests.daemon.test_stdin_runs import pcm, pipe_with


def voxmeter_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--set", "prometheus.port=0", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def empty_database(folder: Path) -> Path:
    """A voxmeter database with no templates: the daemon locks it before checking its source."""
    path = folder / "v.db"
    open_store(path).close()
    return path


def test_missing_microphone_is_one_line_before_any_other_output(tmp_path: Path) -> None:
    empty_database(tmp_path)
    done = voxmeter_run(
        "--db", str(tmp_path / "v.db"), "--source", "mic:no-such-device-here",
        "--set", "audio.wait_for_device=false",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("voxmeter: error: audio device 'no-such-device-here': not found")
    assert done.stderr.count("\n") == 1


def test_file_source_with_nan_samples_is_one_line_naming_the_file(tmp_path: Path) -> None:
    audio = np.full(16000, np.nan, dtype=np.float32)  # all NaN: used to give 0 windows, no word
    path = tmp_path / "nan.wav"
    sf.write(path, audio, 16000, subtype="FLOAT")
    empty_database(tmp_path)
    done = voxmeter_run("--db", str(tmp_path / "v.db"), "--fast", "--source", f"file:{path}")
    assert done.returncode == 2
    assert done.stderr == f"voxmeter: error: {path}: audio contains NaN or infinite samples\n"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.0.2.7", False), ("voxmeter.lan", False)],
)  # fmt: skip
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_non_loopback_metrics_host_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    # 192.0.2.0/24 is TEST-NET-1, never this machine's: the bind fails, nothing is exposed
    exporter = PrometheusExporter(PrometheusSettings(host="192.0.2.7", port=0))
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match=r"prometheus\.port"):
        exporter.start_server()
    assert "prometheus.host = 192.0.2.7: metrics (per-speaker disclosure) are reachable" in (
        caplog.text
    )
    caplog.clear()
    local = PrometheusExporter(PrometheusSettings(host="127.0.0.1", port=0))
    local.start_server()
    local.stop_server()
    assert "reachable" not in caplog.text


@pytest.mark.corpus
def test_budget_above_the_ceiling_is_warned_about(
    daemon_corpus, daemon_db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def start(bits: float) -> None:
        config = load_config(
            None,
            [
                f"daemon.db={daemon_db}",
                "prometheus.enabled=false",
                f"budget.bits={bits}",
                "population.shipped=false",  # the database's 8 templates alone
            ],
        )
        with open_store(daemon_db) as store, pipe_with(b"") as stream:
            pipeline = build_pipeline(config, store=store, source=StdinSource(stream=stream))
            await pipeline.run()

    with caplog.at_level(logging.WARNING, logger="monitor"):
        asyncio.run(start(10.0))  # N = 8 templates: ceiling 3 bits
        assert "budget.bits = 10 bits is above the ceiling log2 N = 3.00 bits (N = 8" in (
            caplog.text
        )
        caplog.clear()
        asyncio.run(start(3.0))  # exactly the ceiling: reachable by a fully identified voice
        assert "ceiling" not in caplog.text


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@pytest.mark.slow
@pytest.mark.corpus
def test_period_reset_alert_comes_at_the_boundary_without_a_new_window(
    daemon_corpus, daemon_db: Path
) -> None:
    """A speaker exceeds a tiny budget, then the household is quiet: the reset to ok must come
    when the period ends, not whenever someone next speaks."""
    period_seconds = 30.0
    lead_seconds = 20.0  # the boundary, seconds after start: time to score the first window
    config = load_config(
        None,
        [
            f"daemon.db={daemon_db}",
            "prometheus.enabled=false",
            "budget.bits=0.2",
            "budget.warn_fraction=0.5",
            "budget.hysteresis_bits=0.05",
            f"budget.period_seconds={period_seconds}",
        ],
    )
    recorder = Recorder()
    speech = pcm(daemon_corpus.known_stream, 6.0)  # a window or two
    read_fd, write_fd = os.pipe()  # stays open after the speech: a quiet household

    async def scenario() -> float:
        with open_store(daemon_db) as store:
            features = {name: get_feature(name) for name in config.features.enabled}
            WindowFeatures(features).warm_up()  # models loaded before the clock starts
            now = time.time()
            # a wall clock that puts the next period boundary lead_seconds from now
            base = math.floor(now / period_seconds) * period_seconds
            offset = base + period_seconds - lead_seconds - now
            boundary = base + period_seconds
            with os.fdopen(read_fd, "rb", buffering=0) as stream:
                pipeline = build_pipeline(
                    config,
                    store=store,
                    source=StdinSource(stream=stream),
                    exporters=[recorder],
                    wall_clock=lambda: time.time() + offset,
                )
                task = asyncio.create_task(pipeline.run())
                await asyncio.to_thread(write_all, write_fd, speech)  # > the pipe's 64 KiB
                deadline = time.monotonic() + lead_seconds + 30
                while not any(
                    isinstance(e, StateChanged) and e.reason == "period" for e in recorder.events
                ):
                    assert time.monotonic() < deadline and not task.done(), recorder.events
                    await asyncio.sleep(0.05)
                pipeline.stop("test")
                await task
        return boundary

    try:
        boundary = asyncio.run(scenario())
    finally:
        os.close(write_fd)
    changes = [e for e in recorder.events if isinstance(e, StateChanged)]
    first_exceeded = next(e for e in changes if e.to_state == "exceeded")
    assert first_exceeded.reason == "window" and first_exceeded.changed_unix < boundary
    reset = next(e for e in changes if e.reason == "period")
    assert (reset.track, reset.from_state, reset.to_state) == ("home-1", "exceeded", "ok")
    # raised in the period that begins at the boundary (not before it, not a period late); how
    # soon after the boundary is the machine's business, not this test's
    assert period_start(reset.changed_unix, period_seconds) == boundary
    windows = [e for e in recorder.events if isinstance(e, WindowScored)]
    assert windows and all(w.scored_unix < boundary for w in windows)  # the timer raised it
