"""A start the user must fix is one line in the log AND the device's *Problem* entity in Home
Assistant, with no restart loop: a database enrolled with the previous default backend (ECAPA
int8) makes ``voxmeter run`` (a process of its own, a real mosquitto) publish the Online and
Problem configs and a retained status carrying the line, then wait; SIGTERM makes the status
offline, still with the line, and the command exits 2. The next clean start's status turns the
entity off. Without discovery, or without a broker, the same start fails at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from monitor.features.base import EMBEDDING_ENV
from monitor.store import open_store
from tests.exporters.test_exporter_homeassistant import JINJA
from tests.exporters.test_exporter_mqtt import subscribed
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker, free_port
from tests.store.test_template_models import _enrol

pytestmark = pytest.mark.mosquitto

PROBLEM = "homeassistant/binary_sensor/kitchen/problem/config"
ONLINE = "homeassistant/binary_sensor/kitchen/online/config"
STATUS = "voxmeter/kitchen/status"


def render(template: str, status: dict[str, object]) -> str:
    return JINJA.from_string(template).render(value_json=status)


def command(tmp_path: Path, port: int, *, discovery: bool) -> list[str]:
    """``voxmeter run`` on a database enrolled with ECAPA int8 (the default before CAM++)."""
    db = tmp_path / "household.db"
    with open_store(db) as store:
        _enrol(store, "alice", "ecapa-int8")
    stream = tmp_path / "silence.wav"
    soundfile.write(stream, np.zeros(16000, dtype=np.float32), 16000)
    settings = [
        "mqtt.enabled=true", f"mqtt.port={port}", 'daemon.device_id="kitchen"',
        f"homeassistant.discovery={str(discovery).lower()}", "prometheus.enabled=false",
    ]  # fmt: skip
    run = [sys.executable, "-m", "monitor.cli", "run", "--db", str(db), "--source"]
    return [*run, f"file:{stream}"] + [item for setting in settings for item in ("--set", setting)]


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != EMBEDDING_ENV}


def test_a_database_of_another_backend_is_one_entity_and_no_restart_loop(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    async def scenario() -> tuple[list[dict[str, object]], dict[str, object], int | None, str]:
        async with subscribed(mosquitto, "#") as sub:
            process = subprocess.Popen(
                command(tmp_path, mosquitto.port, discovery=True),
                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=environment(),
            )  # fmt: skip
            try:
                await sub.wait(lambda: any(s and "problem" in s for s in sub.on(STATUS)), 60)
                await sub.wait(lambda: bool(sub.on(PROBLEM) and sub.on(ONLINE)), 30)
                running = process.poll()
            finally:
                stop_process(process)
            _, stderr = process.communicate(timeout=30)
            assert process.returncode == 2, stderr
            await sub.wait(lambda: sub.on(STATUS)[-1]["state"] == "offline", 30)
            assert [m.topic.value for m in sub.messages if "/sensor/" in m.topic.value] == []
            return sub.on(STATUS), sub.on(PROBLEM)[-1], running, stderr

    statuses, config, running, stderr = asyncio.run(scenario())
    assert running is None  # it waited: nothing for a supervisor to restart
    shown, stopped = statuses[0], statuses[-1]
    assert shown["state"] == "online" and stopped["state"] == "offline"
    line = str(shown["problem"])
    assert 'set features.embedding = "ecapa-int8"' in line and "\n" not in line
    assert stderr.strip().splitlines()[-1] == f"voxmeter: error: {line}"
    assert "Traceback" not in stderr
    assert config["device_class"] == "problem" and "availability" not in config
    assert config["device"]["identifiers"] == ["voxmeter_kitchen"]  # type: ignore[index]
    for status in (shown, stopped):  # on while held, and still on once stopped
        assert render(str(config["value_template"]), status) == "ON"
        attributes = render(str(config["json_attributes_template"]), status)
        assert json.loads(attributes) == {"What to do": line}
    clean = {"state": "online", "version": "x", "started": "y"}  # the next clean start's status
    assert render(str(config["value_template"]), clean) == "OFF"
    attributes = render(str(config["json_attributes_template"]), clean)
    assert json.loads(attributes) == {"What to do": "nothing"}


@pytest.mark.parametrize("discovery", [False, True])
def test_with_nothing_to_show_it_on_the_start_fails_at_once(
    mosquitto: MosquittoBroker, tmp_path: Path, discovery: bool
) -> None:
    """No discovery (a broker but no entity), or discovery and no broker: exit 2 at once."""
    port = free_port() if discovery else mosquitto.port
    result = subprocess.run(
        command(tmp_path, port, discovery=discovery), capture_output=True, text=True,
        timeout=120, env=environment(), stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert 'set features.embedding = "ecapa-int8"' in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr

    async def retained() -> list[object]:
        async with subscribed(mosquitto, "#") as sub:
            await sub.settled()
            return sub.on(STATUS)

    assert asyncio.run(retained()) == []  # nothing published: the log's line is the place
