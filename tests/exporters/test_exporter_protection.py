"""The protection switch in Home Assistant against a real mosquitto: the switch and the binary
sensor are discovered with the device (and survive the discovery sweep), a command turns
protection off and on again, and an alert goes out when protection starts for a person."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import aiomqtt
import pytest

from monitor.daemon.policy_feed import ProtectionObserver
from monitor.exporters.homeassistant import HomeAssistantExporter
from monitor.exporters.protection import (
    ProtectionMqtt,
    command_topic,
    protection_entities,
    state_topic,
)
from monitor.protect.mcadams import Alpha
from monitor.protect.policy import ProtectionPolicy
from monitor.settings.sections import HomeAssistantSettings, MqttSettings
from tests.exporters.exporter_events import scored, started
from tests.exporters.test_exporter_homeassistant import configs, household, render, retained
from tests.exporters.test_exporter_mqtt import DEVICE, TOPICS, settings_for, subscribed
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = pytest.mark.mosquitto

PREFIX = "ha-test"


async def until(condition, seconds: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.05)


def test_switch_sensor_and_alert_through_a_real_broker(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    store = household(tmp_path / "db.sqlite")
    mqtt = settings_for(mosquitto)
    policy = ProtectionPolicy("exceeded", Alpha.fixed(0.8))
    switch = ProtectionMqtt(policy, mqtt, device_id=DEVICE)
    policy.on_change = switch.changed
    ha = HomeAssistantExporter(
        HomeAssistantSettings(discovery=True, discovery_prefix=PREFIX), mqtt, store=store,
        device_id=DEVICE, connection=switch.connection,
    )  # fmt: skip
    ha.extra_entities.append(protection_entities)
    observer = ProtectionObserver(policy)

    async def scenario() -> None:
        async with subscribed(mosquitto, "#") as sub:
            tasks = [asyncio.create_task(e.run()) for e in (ha, switch)]
            try:
                for exporter in (ha, switch, observer):
                    await exporter.handle(started())
                node = ha.discovery.node_id
                switch_topic = f"{PREFIX}/switch/{node}/protection/config"
                sensor_topic = f"{PREFIX}/binary_sensor/{node}/protecting/config"
                await until(lambda: {switch_topic, sensor_topic} <= set(configs(sub)))
                await until(lambda: retained(sub, state_topic(TOPICS.prefix)) is not None)
                found = configs(sub)
                switch_config, sensor_config = found[switch_topic], found[sensor_topic]
                assert switch_config is not None and sensor_config is not None
                assert switch_config["command_topic"] == command_topic(TOPICS.prefix)
                assert switch_config["unique_id"] == f"voxmeter_{node}_protection"
                state = retained(sub, state_topic(TOPICS.prefix))
                assert render(switch_config["value_template"], state) == "ON"
                assert render(sensor_config["value_template"], state) == "OFF"

                # a member crosses the budget: the next utterance is protected, an alert goes out
                await observer.handle(scored("member-a", state="exceeded"))
                assert policy.decide().alpha == 0.8
                await until(lambda: any(m.topic.value == TOPICS.alerts for m in sub.messages))
                (alert,) = [
                    json.loads(m.payload) for m in sub.messages if m.topic.value == TOPICS.alerts
                ]
                assert alert["alias"] == "member-a" and alert["event"] == "protection"
                await until(
                    lambda: render(
                        sensor_config["value_template"], retained(sub, state_topic(TOPICS.prefix))
                    ) == "ON"
                )  # fmt: skip

                # Home Assistant turns the switch off: the next utterance passes clear
                async with aiomqtt.Client(
                    mosquitto.host, mosquitto.port, identifier="home-assistant"
                ) as commander:  # another client id: the subscriber's would take it over
                    await commander.publish(command_topic(TOPICS.prefix), b"OFF", qos=1)
                await until(lambda: not policy.enabled)
                assert policy.decide().alpha is None
                await until(
                    lambda: render(
                        switch_config["value_template"], retained(sub, state_topic(TOPICS.prefix))
                    ) == "OFF"
                )  # fmt: skip
                # the discovery sweep kept both entities
                await asyncio.sleep(0.5)
                assert configs(sub)[switch_topic] is not None
                assert configs(sub)[sensor_topic] is not None
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    asyncio.run(scenario())


class Relaying:
    """A source that relays (what protection_for looks for: an upstream transform)."""

    upstream_transform = None


def test_protection_says_why_and_is_there_whenever_the_daemon_relays(tmp_path: Path) -> None:
    from monitor.daemon.policy_feed import protection_for
    from monitor.settings.config import load_config

    settings = MqttSettings(enabled=True, host="127.0.0.1", port=1883)  # never connected
    policy = ProtectionPolicy("exceeded", Alpha.fixed(0.8))
    switch = ProtectionMqtt(policy, settings, device_id=DEVICE)
    switch.display_name = {"unknown-7": "Unrecognised voice 2"}.get  # type: ignore[assignment]

    def said() -> tuple[str, str]:
        state = json.loads(switch.state())
        return state["reason"], state["status"]

    assert said() == (
        "Not needed: nobody is over budget",
        "On since voxmeter started (every start turns protection on); not needed: nobody is "
        "over budget",
    )
    policy.budget("unknown-7", "exceeded")
    assert said()[0] == "Waiting: Unrecognised voice 2 over budget, no relayed audio since"
    switch.changed(True, "unknown-7")
    policy.report(True, "unknown-7")
    assert said()[0] == "Anonymising: Unrecognised voice 2 is over budget"
    policy.switch(False)
    assert said() == ("Off: switched off in Home Assistant", "Switched off in Home Assistant")
    policy.mode = "off"
    assert said()[0] == "Off: protect.mode is off in config.toml"

    # mode off, a relaying source, Home Assistant discovery: the entities are there all the same
    config = load_config(None, ["mqtt.enabled=true", "homeassistant.discovery=true"])
    ha = HomeAssistantExporter(config.homeassistant, config.mqtt, store=household(
        tmp_path / "v.db"), device_id=DEVICE)  # fmt: skip
    added = protection_for(config, Relaying(), [ha], DEVICE)
    assert [e.name for e in added] == ["protect", "protection-mqtt"]
    assert ha.extra_entities == [protection_entities]
    assert protection_for(config, object(), [ha], DEVICE) == []  # nothing relays: nothing shown


# ---- a stale or hostile command cannot switch protection off -------------------------------


@contextlib.asynccontextmanager
async def running_switch(switch: ProtectionMqtt):  # type: ignore[no-untyped-def]
    task = asyncio.create_task(switch.run())
    try:
        await switch.handle(started())
        await until(lambda: switch.connected)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_a_retained_off_is_ignored_cleared_and_protection_starts_on(
    mosquitto: MosquittoBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """A retained ``OFF`` on the command topic (Home Assistant never retains commands: a
    misconfiguration or an attack) does not turn protection off at the start: one warning, the
    retained message is cleared, and the state is the documented one (ON at each start)."""
    mqtt = settings_for(mosquitto)
    policy = ProtectionPolicy("always", Alpha.fixed(0.8))
    switch = ProtectionMqtt(policy, mqtt, device_id=DEVICE)
    topic = command_topic(TOPICS.prefix)

    async def scenario() -> None:
        async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="stale") as stale:
            await stale.publish(topic, b"OFF", qos=1, retain=True)
        async with subscribed(mosquitto, "#") as sub, running_switch(switch):
            await until(lambda: retained(sub, state_topic(TOPICS.prefix)) is not None)
            await asyncio.sleep(1.0)  # the retained command has long been delivered
            assert policy.enabled and policy.decide().alpha == 0.8
            assert json.loads(retained(sub, state_topic(TOPICS.prefix)))["enabled"] == "ON"
        async with subscribed(mosquitto, topic) as fresh:  # a new subscriber: nothing retained
            await asyncio.sleep(0.5)
            assert [m for m in fresh.messages if m.payload] == []

    with caplog.at_level("WARNING"):
        asyncio.run(scenario())
    stale_lines = [r for r in caplog.records if "retained" in r.getMessage()]
    assert len(stale_lines) == 1, [r.getMessage() for r in caplog.records]


def test_switching_protection_off_is_an_alert_and_junk_commands_are_rate_limited(
    mosquitto: MosquittoBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """Home Assistant turns protection off: an event on the alerts topic and a line in the log.
    500 junk commands are two warnings at most (the first, then a count), not 500."""
    mqtt = settings_for(mosquitto)
    policy = ProtectionPolicy("always", Alpha.fixed(0.8))
    switch = ProtectionMqtt(policy, mqtt, device_id=DEVICE)
    topic = command_topic(TOPICS.prefix)

    async def scenario() -> list[dict[str, object]]:
        async with subscribed(mosquitto, "#") as sub, running_switch(switch):
            async with aiomqtt.Client(mosquitto.host, mosquitto.port, identifier="ha") as ha:
                for number in range(500):
                    await ha.publish(topic, f"junk {number}".encode(), qos=1)
                await ha.publish(topic, b"OFF", qos=1)
            await until(lambda: not policy.enabled)
            await until(lambda: any(m.topic.value == TOPICS.alerts for m in sub.messages))
            return [json.loads(m.payload) for m in sub.messages if m.topic.value == TOPICS.alerts]

    with caplog.at_level("INFO"):
        alerts = asyncio.run(scenario())
    assert [(a["event"], a["enabled"], a["device"]) for a in alerts] == [
        ("protection-switched", False, DEVICE)
    ]
    lines = [r.getMessage() for r in caplog.records if r.name == "monitor.exporters.protection"]
    assert sum("ignored command" in line for line in lines) <= 2, lines
    assert any("protection switched OFF" in line for line in lines)
