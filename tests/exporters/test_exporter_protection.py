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

from monitor.daemon.protection import ProtectionObserver
from monitor.exporters.homeassistant import HomeAssistantExporter
from monitor.exporters.protection import (
    ProtectionMqtt,
    command_topic,
    protection_entities,
    state_topic,
)
from monitor.protect.mcadams import Alpha
from monitor.protect.policy import ProtectionPolicy
from monitor.settings.sections import HomeAssistantSettings
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
        device_id=DEVICE,
    )  # fmt: skip
    ha.extra_entities = protection_entities
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
