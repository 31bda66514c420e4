"""``voxmeter run --source stdin`` ends at end of input every time and SIGTERM always stops it
(through its own clean path, before the 1.75 s exit watchdog), with a real mosquitto broker
connected (about one run in ten hung after
"connected to MQTT broker" and then ignored SIGTERM).

The cause was a cancellation swallowed by ``asyncio.wait_for`` on Python 3.11 (inside aiomqtt's
publish) when the PUBACK of the ``online`` status arrived in the same loop turn as the stop. The
fifty runs share one process: loading torch and pocketsphinx costs ~3 s per process, a run in a
warm process ~0.1 s, and the race is the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

import aiomqtt
import pytest
import soundfile as sf

from monitor.audio.stdin import StdinSource
from monitor.daemon.build import build_pipeline
from monitor.settings.config import load_config
from monitor.store.database import open_store
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = [pytest.mark.corpus, pytest.mark.mosquitto]

RUNS = 50
START_TIMEOUT_SECONDS = 90.0
HANG_GUARD_SECONDS = 30
FRAME_SECONDS = 0.03  # StdinSource's default frame


def pcm(stream: Path, seconds: float) -> bytes:
    """The first ``seconds`` of a 16 kHz WAV as raw s16le, what ``--source stdin`` reads."""
    audio, rate = sf.read(stream, dtype="int16")
    assert rate == 16000
    return audio[: int(seconds * rate)].tobytes()


def pipe_with(data: bytes) -> BinaryIO:
    """The read end of a real pipe holding ``data``, its write end closed (end of input)."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, data)  # < 64 KiB: fits in the pipe buffer
    os.close(write_fd)
    return os.fdopen(read_fd, "rb", buffering=0)


async def retained(broker: MosquittoBroker, topic: str) -> dict[str, object]:
    async with aiomqtt.Client(broker.host, broker.port, identifier="test-reader") as client:
        await client.subscribe(topic, qos=1)
        async with asyncio.timeout(5):
            async for message in client.messages:
                assert isinstance(message.payload, bytes)
                return dict(json.loads(message.payload))
    raise AssertionError("no retained message")


def test_fifty_stdin_runs_each_end_at_end_of_input(
    daemon_corpus, daemon_db, mosquitto: MosquittoBroker
) -> None:
    config = load_config(
        None,
        [
            f"daemon.db={daemon_db}",
            "daemon.source=stdin",
            "daemon.device_id=stdin-test",
            "prometheus.enabled=false",
            "mqtt.enabled=true",
            f"mqtt.port={mosquitto.port}",
        ],
    )
    speech = pcm(daemon_corpus.known_stream, 1.0)

    async def runs() -> list[str]:
        reasons = []
        with open_store(daemon_db) as store:
            for _ in range(RUNS):
                with pipe_with(speech) as stream:
                    source = StdinSource(stream=stream)
                    pipeline = build_pipeline(config, store=store, source=source)
                    async with asyncio.timeout(30):  # a hang fails here, it does not block
                        summary = await pipeline.run()
                reasons.append(summary.stop_reason)
        return reasons

    assert asyncio.run(runs()) == ["end of input"] * RUNS
    status = asyncio.run(retained(mosquitto, "voxmeter/stdin-test/status"))
    assert status["state"] == "offline"  # every run said goodbye


def voxmeter_run(
    db: Path, broker: MosquittoBroker, stdin: object, *settings: str
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "monitor.cli", "run", "--db", str(db), "--source", "stdin",
        "--set", "prometheus.enabled=false", "--set", "mqtt.enabled=true",
        "--set", f"mqtt.port={broker.port}", "--set", 'logging.format="keyvalue"',
        *(arg for setting in settings for arg in ("--set", setting)),
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0
    )


@pytest.mark.slow
def test_stdin_process_exits_zero_at_end_of_input(
    daemon_corpus, daemon_db, mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    raw = tmp_path / "speech.raw"
    raw.write_bytes(pcm(daemon_corpus.known_stream, 1.0))
    for _ in range(3):
        with raw.open("rb") as stdin:
            process = voxmeter_run(daemon_db, mosquitto, stdin)
            try:
                _, errors = process.communicate(timeout=START_TIMEOUT_SECONDS)
            finally:
                stop_process(process, sig=signal.SIGKILL)
        err = errors.decode()
        assert process.returncode == 0, err
        assert 'reason="end of input"' in err
        # 1 s of audio holds no 3 s window: said, not silently 0 windows
        assert "no window was scored: 1 s of audio held less than one 3 s window" in err
        assert "Traceback" not in err


@pytest.mark.slow
def test_sigterm_while_reading_stdin_stops_through_the_clean_path(
    daemon_corpus, daemon_db, mosquitto: MosquittoBroker
) -> None:
    frames = 16
    process = voxmeter_run(
        daemon_db, mosquitto, subprocess.PIPE,
        'logging.level="debug"', "daemon.stats_interval_seconds=0.1",
    )  # fmt: skip
    try:
        assert process.stdin is not None and process.stderr is not None
        process.stdin.write(pcm(daemon_corpus.known_stream, frames * FRAME_SECONDS))
        # Wait, by what the daemon logs, until it is connected to the broker and has taken every
        # frame written: the stdin pipe stays open and quiet, the reader thread is blocked.
        connected = consumed = False
        deadline = time.monotonic() + START_TIMEOUT_SECONDS  # a hang guard
        while not (connected and consumed):
            line = process.stderr.readline().decode()
            assert line and time.monotonic() < deadline, f"not ready (rc {process.poll()})"
            connected = connected or "connected to MQTT broker" in line
            consumed = consumed or f"msg=stats frames={frames} " in line
        process.send_signal(signal.SIGTERM)
        rc = process.wait(timeout=HANG_GUARD_SECONDS)
        rest = process.stderr.read().decode()
    finally:
        stop_process(process, sig=signal.SIGKILL)
    # 0, not the watchdog's 1: the clean path ended it within 1.75 s of SIGTERM
    assert rc == 0, rest
    assert "exiting now" not in rest and "Traceback" not in rest
    assert "msg=stopping reason=SIGTERM" in rest and "msg=stopped reason=SIGTERM" in rest
