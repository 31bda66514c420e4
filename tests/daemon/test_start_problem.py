"""A start the user must fix is one line in the log AND one entity in Home Assistant: a
database enrolled with the previous default backend (ECAPA int8) makes ``voxmeter run`` exit 2
with one line naming ``features.embedding``, and the device's *Problem* entity (its discovery
config published by the refusing process itself, with a real mosquitto) turns on with that line
as its *What to do*; the next clean start's status turns it off."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import aiomqtt
import numpy as np
import pytest
import soundfile

from monitor.exporters.problem import problem_messages
from monitor.features.base import EMBEDDING_ENV
from monitor.settings.config import load_config
from monitor.store import open_store
from tests.exporters.test_exporter_homeassistant import JINJA
from tests.realparts.mosquitto import MosquittoBroker
from tests.store.test_template_models import _enrol

DISCOVERY = "homeassistant/binary_sensor/kitchen/problem/config"
STATUS = "voxmeter/kitchen/status"


def render(template: str, payload: bytes) -> str:
    return JINJA.from_string(template).render(value_json=json.loads(payload))


async def retained(broker: MosquittoBroker) -> dict[str, bytes]:
    """Every retained message on the broker (sent on SUBSCRIBE, before our own marker)."""
    seen: dict[str, bytes] = {}
    async with aiomqtt.Client(broker.host, broker.port, identifier="test-reader") as client:
        await client.subscribe("#", qos=1)
        await client.publish("test/marker", b"x", qos=1)
        async for message in client.messages:
            if message.topic.value == "test/marker":
                return seen
            seen[message.topic.value] = bytes(message.payload)  # type: ignore[arg-type]
    return seen


@pytest.mark.mosquitto
def test_a_database_of_another_backend_is_one_line_and_one_entity(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    db = tmp_path / "household.db"
    with open_store(db) as store:
        _enrol(store, "alice", "ecapa-int8")  # the default before CAM++ int8
    stream = tmp_path / "silence.wav"
    soundfile.write(stream, np.zeros(16000, dtype=np.float32), 16000)
    broker = [
        "mqtt.enabled=true", f'mqtt.host="{mosquitto.host}"', f"mqtt.port={mosquitto.port}",
        "homeassistant.discovery=true", 'daemon.device_id="kitchen"',
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != EMBEDDING_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--db", str(db), "--source",
         f"file:{stream}", *(a for s in broker for a in ("--set", s))],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and 'set features.embedding = "ecapa-int8"' in lines[0]
    messages = asyncio.run(retained(mosquitto))
    config = json.loads(messages[DISCOVERY])
    assert config["device_class"] == "problem" and "availability" not in config
    assert config["device"]["identifiers"] == ["voxmeter_kitchen"]
    status = messages[STATUS]
    assert json.loads(status)["state"] == "offline"
    assert render(config["value_template"], status) == "ON"
    attributes = json.loads(render(config["json_attributes_template"], status))
    assert attributes == {"What to do": lines[0]}
    # the Online entity is there too, showing the device offline
    online = json.loads(messages["homeassistant/binary_sensor/kitchen/online/config"])
    assert online["state_topic"] == STATUS
    # a clean start's status has no problem: the entity turns off
    clean = json.dumps({"state": "online", "version": "x", "started": "y"}).encode()
    assert render(config["value_template"], clean) == "OFF"
    assert json.loads(render(config["json_attributes_template"], clean)) == {
        "What to do": "nothing"
    }


def test_without_discovery_only_the_status_carries_the_problem() -> None:
    config = load_config(None, ["mqtt.enabled=true", 'daemon.device_id="hall"'])
    messages = problem_messages(config, "voxmeter: error: something to fix")
    assert [topic for topic, _ in messages] == ["voxmeter/hall/status"]
    assert json.loads(messages[0][1])["problem"] == "voxmeter: error: something to fix"
