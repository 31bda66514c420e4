"""Home Assistant discovery against a real mosquitto: every config is what HA needs, its state
topic carries the value HA would show (its Jinja template rendered as HA does), and entities
vanish when a track expires or a speaker is removed from the database."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import pytest
from prometheus_client import CollectorRegistry as Registry

from monitor.errors import ConfigError
from monitor.events.messages import TrackExpired
from monitor.exporters import build_exporters
from monitor.exporters.discovery import SPEAKER_ENTITIES
from monitor.exporters.homeassistant import HomeAssistantExporter, safe_id
from monitor.exporters.mqtt import MqttExporter
from monitor.features.base import Observation
from monitor.settings.config import load_config
from monitor.settings.sections import HomeAssistantSettings
from monitor.store.database import Store, open_store
from tests.exporters.exporter_events import N_TEMPLATES, scored, started
from tests.exporters.test_exporter_mqtt import (
    DEVICE,
    TOPICS,
    Subscriber,
    run,
    settings_for,
    subscribed,
)
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = pytest.mark.mosquitto

PREFIX = "ha-test"
MEMBERS = ("member-a", "member.b")  # "." is not allowed in an HA object id
SAFE = re.compile(r"[a-zA-Z0-9_-]+")
JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined)


def household(path: Path) -> Store:
    store = open_store(path)
    rng = np.random.default_rng(3)
    for member in MEMBERS:
        store.add_identity(f"id-{member}")
        vector = rng.standard_normal(256)
        embedding = Observation("embedding", vector / np.linalg.norm(vector), 30.0)
        store.add_local_profile(member, f"id-{member}", embedding)
    return store


def render(template: str, payload: bytes) -> str:
    """What Home Assistant shows: the template applied to ``value_json``."""
    return JINJA.from_string(template).render(value_json=json.loads(payload), value=payload)


def configs(sub: Subscriber) -> dict[str, dict[str, Any] | None]:
    """Latest discovery payload per config topic (None once cleared)."""
    latest: dict[str, dict[str, Any] | None] = {}
    for message in sub.messages:
        topic = message.topic.value
        if topic.startswith(f"{PREFIX}/"):
            latest[topic] = json.loads(message.payload) if message.payload else None  # type: ignore[arg-type]
    return latest


def retained(sub: Subscriber, topic: str) -> bytes | None:
    payloads = [m.payload for m in sub.messages if m.topic.value == topic]
    return payloads[-1] if payloads else None  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def exporters(
    broker: MosquittoBroker,
    store: Store,
    *,
    prefix: str = PREFIX,
    sources: dict[str, str] | None = None,
    configuration_url: str | None = None,
) -> AsyncIterator[tuple[MqttExporter, HomeAssistantExporter]]:
    mqtt = settings_for(broker)
    plain = MqttExporter(mqtt, store=store, device_id=DEVICE, clear_expired=False)  # as built
    ha = HomeAssistantExporter(
        HomeAssistantSettings(discovery=True, discovery_prefix=prefix),
        mqtt,
        store=store,
        device_id=DEVICE,
        sources=sources,
        configuration_url=configuration_url,
        connection=plain.connection,  # as built: one connection
    )
    tasks = [asyncio.create_task(e.run()) for e in (plain, ha)]
    try:
        yield plain, ha
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def handle(pair: tuple[MqttExporter, HomeAssistantExporter], event: Any) -> None:
    for exporter in pair:
        await exporter.handle(event)


def check_config(topic: str, config: dict[str, Any]) -> None:
    """The fields HA needs for an MQTT sensor / binary_sensor with a device and availability."""
    _, component, node, object_id, last = topic.split("/")
    assert component in ("sensor", "binary_sensor") and last == "config"
    assert SAFE.fullmatch(node) and SAFE.fullmatch(object_id), topic
    assert config["unique_id"] == f"voxmeter_{node}_{object_id}"
    assert config["name"] and config["state_topic"] and config["value_template"]
    device = config["device"]
    assert {"manufacturer", "model", "sw_version"} <= device.keys()
    if object_id.startswith("source_"):  # a room: its own device, through the daemon's
        assert device["via_device"] == f"voxmeter_{node}" and device["suggested_area"]
    else:
        assert device["identifiers"] == [f"voxmeter_{node}"]
        assert device["name"] == f"voxmeter {DEVICE}"
    assert config["origin"]["name"] == "voxmeter" and config["origin"]["sw_version"]
    if object_id == "online":
        assert component == "binary_sensor" and config["device_class"] == "connectivity"
        assert (config["payload_on"], config["payload_off"]) == ("online", "offline")
        assert config["state_topic"] == TOPICS.status and "availability" not in config
        return
    if object_id == "problem":  # shown while offline: a start the user must fix
        assert component == "binary_sensor" and config["device_class"] == "problem"
        assert config["state_topic"] == TOPICS.status and "availability" not in config
        return
    (availability,) = config["availability"]
    assert availability["topic"] == TOPICS.status
    assert availability["payload_available"] == "online"
    assert "entity_category" not in config or object_id in ("templates", "reference_set")
    if object_id.endswith(("_disclosure", "_highest")):
        assert config["unit_of_measurement"] == "bit" and config["state_class"] == "measurement"
    elif object_id.endswith("_budget"):
        assert config["device_class"] == "enum"
        assert config["options"] == ["OK", "Nearly used", "Over budget"]
    elif object_id.endswith("_budget_used"):
        assert config["unit_of_measurement"] == "%" and config["state_class"] == "measurement"
    elif object_id.endswith("speech_seconds"):
        assert config["device_class"] == "duration" and config["state_class"] == "total_increasing"


def speaker_shown(base: str, bits: str, one_in: str, used: str, budget: str) -> dict[str, str]:
    """What Home Assistant shows for one speaker's five entities, by object id."""
    values = (bits, bits, one_in, used, budget)
    return {f"{base}_{suffix}": v for suffix, v in zip(SPEAKER_ENTITIES, values, strict=True)}


def test_safe_ids_are_safe_and_distinct() -> None:
    aliases = ["member-a", "member.b", "member_b", "member/b", "mémé", "unknown-12", "a+#"]
    ids = [safe_id(a) for a in aliases]
    assert all(SAFE.fullmatch(i) for i in ids) and len(set(ids)) == len(ids)
    assert safe_id("unknown-12") == "unknown-12"


def test_discovery_needs_mqtt_and_a_plain_prefix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"homeassistant\.discovery"):
        load_config(None, ["homeassistant.discovery=true"])
    with pytest.raises(ConfigError, match=r"homeassistant\.discovery_prefix"):
        load_config(None, ["homeassistant.discovery_prefix=ha/#"])
    with pytest.raises(ConfigError, match=r"homeassistant\.node_id"):
        load_config(None, ["homeassistant.node_id=a.b"])
    config = load_config(None, ["mqtt.enabled=true", "homeassistant.discovery=true"])
    registry = Registry()
    with open_store(tmp_path / "v.db") as store:
        built = build_exporters(
            config, store=store, db_path=tmp_path / "v.db", device_id="d", registry=registry
        )
    assert [e.name for e in built] == ["prometheus", "mqtt", "homeassistant"]
    assert registry.get_sample_value("voxmeter_mqtt_enabled") == 1.0
    alone = Registry()  # no MQTT: pending alerts are no alert (rules.yml reads this gauge)
    with open_store(tmp_path / "v.db") as store:
        built = build_exporters(
            load_config(None, []), store=store, db_path=tmp_path / "v.db", device_id="d",
            registry=alone,
        )  # fmt: skip
    assert [e.name for e in built] == ["prometheus"]
    assert alone.get_sample_value("voxmeter_mqtt_enabled") == 0.0


def test_entities_carry_the_figures_and_vanish_with_their_speaker(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    async def scenario() -> None:
        with household(tmp_path / "v.db") as store:
            async with subscribed(mosquitto, "#") as sub, exporters(mosquitto, store) as pair:
                await handle(pair, started())
                await handle(pair, scored("member-a", combined_bits=4.2, state="warning"))
                await handle(pair, scored("member.b", index=1, combined_bits=1.5))
                await handle(pair, scored("unknown-3", unknown=True, combined_bits=5.6))
                # 5 device entities + 5 for each of the two members and unknown-3
                await sub.wait(lambda: len(configs(sub)) == 20)
                await sub.wait(lambda: retained(sub, TOPICS.speaker_state("unknown-3")) is not None)
                await sub.wait(
                    lambda: (
                        b'"speech_seconds": 9.0'
                        in (retained(sub, f"{TOPICS.prefix}/device") or b"")
                    )
                )

                found = configs(sub)
                ids = [c["unique_id"] for c in found.values() if c]
                assert len(set(ids)) == len(ids) == 20
                shown: dict[str, str] = {}
                for topic, config in found.items():
                    assert config is not None
                    check_config(topic, config)
                    payload = retained(sub, config["state_topic"])
                    assert payload, f"{config['state_topic']} carries nothing"
                    shown[topic.split("/")[3]] = render(config["value_template"], payload)
                    if config["name"].endswith("disclosure now"):
                        attributes = json.loads(render(config["json_attributes_template"], payload))
                        assert attributes["Budget"] == "5.00 bits"
                        assert attributes["Speech heard"].endswith(" s")
                assert shown == {
                    "online": "online",
                    "problem": "OFF",  # a clean start's status names no problem
                    "templates": str(N_TEMPLATES),
                    "reference_set": "OFF",  # no window reached log2 250
                    "speech_seconds": "0.15",  # three windows of 3 s of speech, in minutes
                    **speaker_shown("member-a", "4.2", "14", "84.0", "Nearly used"),
                    **speaker_shown("member_2eb", "1.5", "88", "30.0", "OK"),
                    **speaker_shown("unknown-3", "5.6", "5", "112.0", "OK"),
                }
                names = {c["name"] for c in found.values() if c}
                assert "Unrecognised voice 1 disclosure now" in names
                assert "member-a as identifying as 1 in" in names

                await handle(pair, TrackExpired("unknown-3", "unknown", 30.0, 1.8e9))
                gone = TOPICS.speaker_state("unknown-3")
                await sub.wait(
                    lambda: (
                        [k for k, v in configs(sub).items() if v is None and "unknown-3" in k]
                        and len([v for v in configs(sub).values() if v is None]) == 5
                        and retained(sub, gone) == b""
                    )
                )
                # both configs cleared before the state they read (HA would render an empty one)
                order = [m.topic.value for m in sub.messages if not m.payload]
                assert order.index(gone) > max(
                    order.index(t) for t in order if "unknown-3" in t and t.endswith("/config")
                )
                assert order.count(gone) == 1  # once, by discovery: the MQTT exporter leaves it

            # member.b leaves the household; the next run clears its entities and its figures
            store.remove_local_profile("member.b")
            async with subscribed(mosquitto, "#") as sub, exporters(mosquitto, store) as pair:
                await handle(pair, started())
                await sub.wait(
                    lambda: (
                        len([v for k, v in configs(sub).items() if v is None]) == 5
                        and retained(sub, TOPICS.speaker_state("member.b")) == b""
                    )
                )
                cleared = sorted(k for k, v in configs(sub).items() if v is None)
                assert cleared == sorted(
                    f"{PREFIX}/sensor/{DEVICE}/member_2eb_{suffix}/config"
                    for suffix in SPEAKER_ENTITIES
                )

            async with subscribed(mosquitto, "#") as late:
                await late.settled()  # every retained message is in: exactly these remain
                assert sorted(t.split("/")[3] for t in configs(late)) == sorted(
                    [
                        *(f"member-a_{suffix}" for suffix in SPEAKER_ENTITIES),
                        "online",
                        "problem",
                        "reference_set",
                        "speech_seconds",
                        "templates",
                    ]
                )
                assert retained(late, TOPICS.speaker_state("member.b")) is None
                assert retained(late, TOPICS.speaker_state("member-a")) is not None
                assert json.loads(retained(late, TOPICS.status) or b"{}")["state"] == "offline"

    run(scenario)


ODD_MEMBERS = ("名前", "a/b+#", "x y", "_5f")  # topic wildcards, a space, an escape look-alike


def test_odd_aliases_survive_a_broker_restart_and_are_rediscovered(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """Broker killed (no persistence: every retained config is gone) and started again: the
    exporter reconnects and publishes every config again, with safe, distinct object ids."""
    store = open_store(tmp_path / "v.db")
    rng = np.random.default_rng(5)
    for member in ODD_MEMBERS:
        store.add_identity(f"id-{member}")
        vector = rng.standard_normal(256)
        store.add_local_profile(
            member, f"id-{member}", Observation("embedding", vector / np.linalg.norm(vector), 30.0)
        )
    wanted = 5 + len(SPEAKER_ENTITIES) * len(ODD_MEMBERS)

    async def scenario() -> None:
        async with exporters(mosquitto, store) as pair:
            await handle(pair, started())
            async with subscribed(mosquitto, f"{PREFIX}/#") as sub:
                await sub.wait(lambda: len(configs(sub)) == wanted)
                first = configs(sub)
            mosquitto.stop()
            while pair[1].connected:  # discovery saw the broker go (and forgets nothing)
                await asyncio.sleep(0.05)
            mosquitto.start()
            async with subscribed(mosquitto, f"{PREFIX}/#") as sub:
                await sub.wait(lambda: len(configs(sub)) == wanted, timeout_seconds=60)
                assert configs(sub) == first
            assert pair[1].connected
        names = sorted(c["name"] for c in first.values() if c and c["name"].endswith(" budget"))
        assert names == sorted(f"{m} budget" for m in ODD_MEMBERS)
        for topic, config in first.items():
            assert config is not None
            check_config(topic, config)

    with store:
        run(scenario)
