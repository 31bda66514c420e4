"""End to end: the broker goes down while `voxmeter run` is listening, alerts are raised during
the outage, and every one of them reaches a subscriber, in order, once the broker is back.

The daemon listens on stdin, so the speech is fed only after the broker has been stopped: every
state change of this run happens during the outage and must wait in the outbox. The subscriber
holds a persistent session (clean session off, QoS 1) on a broker that keeps its sessions on
disk, so whatever the daemon publishes after the restart is queued for it even if it reconnects
later than the daemon does.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from monitor.calibration.buckets import DEFAULT_PATH as DEFAULT_CALIBRATION
from tests.daemon.test_e2e_exporters import (
    REPO,
    VOXMETER,
    link_speakers,
    replay_audio,
    voxmeter,
    wait_until,
)
from tests.daemon_corpus import hand_calibration
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.mosquitto]

DEVICE = "outage"


def outbox(db: Path) -> list[dict[str, Any]]:
    """Alerts still waiting for the broker's acknowledgement, oldest first (read-only)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as connection:
        rows = connection.execute("SELECT seq, payload FROM outbox ORDER BY seq").fetchall()
    return [{**json.loads(payload), "seq": seq} for seq, payload in rows]


def received(log: Path, topic: str) -> list[dict[str, Any]]:
    messages = []
    for line in log.read_text().splitlines():
        name, _, payload = line.partition(" ")
        if name == topic:
            messages.append(json.loads(payload))
    return messages


def stable(read: Callable[[], list[Any]], seconds: float) -> Callable[[], list[Any] | None]:
    """A predicate that holds once ``read()`` is non-empty and unchanged for ``seconds``."""
    last: dict[str, Any] = {"value": None, "since": time.monotonic()}

    def check() -> list[Any] | None:
        value = read()
        if value != last["value"]:
            last.update(value=value, since=time.monotonic())
            return None
        return value if value and time.monotonic() - last["since"] >= seconds else None

    return check


def test_alerts_raised_during_a_broker_outage_arrive_in_order_once_it_is_back(
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path: Path,
) -> None:
    for tool in ("mosquitto", "mosquitto_sub"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install mosquitto mosquitto-clients)")
    adults = [
        row["speaker"]
        for row in corpus_speakers
        if row["original_split"] == "test" and int(row["age"]) >= 18
    ]
    household, reference = adults[0], adults[1:7]
    db = tmp_path / "voxmeter.db"
    env = {**os.environ, "VOXMETER_CACHE": str(tmp_path / "cache")}
    voxmeter("enroll", str(link_speakers(corpus_root, reference, tmp_path / "ref")),
             "--db", str(db), "--utterances", "3", env=env)  # fmt: skip
    voxmeter("enroll", str(link_speakers(corpus_root, [household], tmp_path / "home")),
             "--db", str(db), "--utterances", "4", "--local", env=env)  # fmt: skip
    wav = replay_audio(corpus_root, household, reference[0], tmp_path / "replay.wav")
    pcm = (np.clip(soundfile.read(wav, dtype="float32")[0], -1, 1) * 32767).astype("<i2")
    calibration = DEFAULT_CALIBRATION
    if not calibration.is_file():
        calibration = tmp_path / "calibration.json"
        hand_calibration(len(reference) + 1).save(calibration)

    broker = MosquittoBroker(tmp_path / "broker", persistent=True)
    broker.directory.mkdir()
    broker.start()
    sub_log = tmp_path / "mqtt.log"
    subscriber = daemon = None
    try:
        with open(sub_log, "wb") as out:
            subscriber = subprocess.Popen(
                ["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-q", "1",
                 "-c", "-i", "voxmeter-outage-test", "-v", "-t", f"voxmeter/{DEVICE}/#"],
                stdout=out,
            )  # fmt: skip
        daemon = subprocess.Popen(
            [
                *VOXMETER, "run",
                "--db", str(db),
                "--source", "stdin:16000",
                "--keep-running",
                "--set", f"daemon.device_id={json.dumps(DEVICE)}",
                "--set", f"scorer.calibration={json.dumps(str(calibration))}",
                "--set", "prometheus.enabled=false",
                "--set", "mqtt.enabled=true",
                "--set", f"mqtt.port={broker.port}",
                "--set", "mqtt.reconnect_max_seconds=2.0",
                "--set", "budget.bits=1.0",
                "--set", "budget.warn_fraction=0.5",
            ],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "daemon.log", "wb"),  # noqa: SIM115 - closed with the process
        )  # fmt: skip
        status_topic = f"voxmeter/{DEVICE}/status"
        wait_until(
            lambda: any(m["state"] == "online" for m in received(sub_log, status_topic)),
            120,
            "the daemon online on the broker",
        )

        # ---- the outage: every alert of this run is raised now --------------------------------
        broker.stop()
        assert daemon.stdin is not None
        daemon.stdin.write(pcm.tobytes())
        daemon.stdin.close()
        pending = wait_until(stable(lambda: outbox(db), 8.0), 180, "alerts in the outbox")
        assert len(pending) >= 2, pending
        assert [a["seq"] for a in pending] == sorted(a["seq"] for a in pending)
        alerts_topic = f"voxmeter/{DEVICE}/alerts"
        assert received(sub_log, alerts_topic) == []

        # ---- the broker is back: all of them arrive, none lost, in order ------------------------
        broker.start()
        expected = [a["seq"] for a in pending]
        wait_until(
            lambda: {a["seq"] for a in received(sub_log, alerts_topic)} >= set(expected),
            90,
            f"alerts {expected} on {alerts_topic}",
        )
        arrived = [a["seq"] for a in received(sub_log, alerts_topic)]
        first_arrivals = list(dict.fromkeys(arrived))  # at-least-once: drop repeats by seq
        assert first_arrivals == expected, arrived
        by_seq = {a["seq"]: a for a in received(sub_log, alerts_topic)}
        for alert in pending:
            assert {k: by_seq[alert["seq"]][k] for k in ("alias", "from", "to")} == {
                k: alert[k] for k in ("alias", "from", "to")
            }
        wait_until(lambda: not outbox(db), 30, "the outbox emptied by acknowledgements")
    finally:
        if daemon is not None:
            stop_process(daemon, grace_seconds=30)
        if subscriber is not None:
            stop_process(subscriber)
        broker.stop()
