"""Protection in Home Assistant: a switch to turn it on and off, a binary sensor *protecting*,
and an alert when protection starts for a person.

The two entities are discovery configs of the device (:func:`protection_entities`), published
and kept by the Home Assistant exporter (its ``extra_entities``), so its sweep of stale configs
leaves them be. :class:`ProtectionMqtt` is the exporter with its own connection (client id
``<mqtt client id>-protect``): it subscribes to the switch's command topic
(``<prefix>/protection/set``, ``ON``/``OFF``), applies it to the policy (``enabled``), and keeps
the retained state ``<prefix>/protection`` = ``{"enabled", "protecting", "speaker"}`` (``ON``
or ``OFF``) up to date. When the policy starts protecting because a person is over budget,
``{"alias", "event": "protection", "protecting": true, "device", "sent"}`` goes to the alerts
topic (QoS 1; not through the outbox: the budget alert that caused it already did).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import aiomqtt

from monitor.events.messages import DaemonEvent, DaemonStarted
from monitor.exporters.connection import Reconnect, client_options, tls_context
from monitor.exporters.mqtt import publish, topics_for
from monitor.protect.policy import ProtectionPolicy
from monitor.settings.sections import MqttSettings

if TYPE_CHECKING:
    from monitor.exporters.homeassistant import Discovery, Entity

logger = logging.getLogger(__name__)

ON, OFF = "ON", "OFF"


def state_topic(prefix: str) -> str:
    return f"{prefix}/protection"


def command_topic(prefix: str) -> str:
    return f"{prefix}/protection/set"


def protection_entities(discovery: Discovery) -> list[Entity]:
    """The switch *Protection* and the binary sensor *Protecting* of the device."""
    from monitor.exporters.homeassistant import Entity

    prefix = discovery.topics.prefix
    switch = {
        **discovery._common("protection", "Protection"),
        "state_topic": state_topic(prefix),
        "value_template": "{{ value_json.enabled }}",
        "command_topic": command_topic(prefix),
        "payload_on": ON,
        "payload_off": OFF,
        "state_on": ON,
        "state_off": OFF,
        "icon": "mdi:account-voice-off",
    }
    protecting = {
        **discovery._common("protecting", "Protecting"),
        "state_topic": state_topic(prefix),
        "value_template": "{{ value_json.protecting }}",
        "json_attributes_topic": state_topic(prefix),
        "payload_on": ON,
        "payload_off": OFF,
        "icon": "mdi:shield-account",
    }
    return [
        Entity("switch", "protection", switch),
        Entity("binary_sensor", "protecting", protecting),
    ]


class ProtectionMqtt:
    """The switch's commands in, the protection state and alerts out (module docstring)."""

    name = "protection-mqtt"

    def __init__(
        self,
        policy: ProtectionPolicy,
        mqtt: MqttSettings,
        *,
        device_id: str,
        rng: random.Random | None = None,
        clock: Any = time.time,
    ) -> None:
        self.policy = policy
        self.mqtt = mqtt
        self.device_id = device_id
        self.topics = topics_for(mqtt, device_id)
        self.client_id = f"{mqtt.client_id or f'voxmeter-{device_id}'}-protect"
        self._tls = tls_context(mqtt)
        self._clock = clock
        self._reconnect = Reconnect(
            mqtt,
            logger=logger,
            label="protection switch, ",
            rng=rng,
            on_connection=self._set_connected,
        )
        self._wake = asyncio.Event()
        self._alerts: list[dict[str, Any]] = []
        self._speaker: str | None = None
        self._started = asyncio.Event()
        self.connected = False

    def changed(self, protecting: bool, speaker: str | None) -> None:
        """The policy's ``on_change``: publish the state; alert when a person is protected."""
        self._speaker = speaker if protecting else None
        if protecting and speaker is not None:
            self._alerts.append(
                {
                    "alias": speaker,
                    "event": "protection",
                    "protecting": True,
                    "device": self.device_id,
                }
            )
        self._wake.set()

    def state(self) -> bytes:
        policy = self.policy
        return json.dumps(
            {
                "enabled": ON if policy.enabled else OFF,
                "protecting": ON if policy.protecting and policy.enabled else OFF,
                "speaker": self._speaker,
                "mode": policy.mode,
            }
        ).encode()

    async def handle(self, event: DaemonEvent) -> None:
        if isinstance(event, DaemonStarted):
            self._started.set()

    async def run(self) -> None:
        """After ``DaemonStarted``: connect and reconnect (``connection.Reconnect``, the policy
        of every MQTT client of the daemon) until cancelled."""
        await self._started.wait()
        await self._reconnect.run(self._client, self._session)

    def _client(self) -> aiomqtt.Client:
        return aiomqtt.Client(**client_options(self.mqtt, self._tls), identifier=self.client_id)

    def _set_connected(self, connected: bool) -> None:
        self.connected = connected

    async def _session(self, client: aiomqtt.Client) -> None:
        await client.subscribe(command_topic(self.topics.prefix), qos=1)
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._commands(client), name="voxmeter.exporter.protect.commands")
                tasks.create_task(self._publisher(client), name="voxmeter.exporter.protect.pub")
        except ExceptionGroup as group:  # a lost broker fails both: hand Reconnect its error
            lost, other = group.split(aiomqtt.MqttError)
            if lost is None or other is not None:
                raise
            raise lost.exceptions[0] from group

    async def _commands(self, client: aiomqtt.Client) -> None:
        async for message in client.messages:
            command = bytes(message.payload or b"").decode(errors="replace").strip().upper()
            if command not in (ON, OFF):
                logger.warning("protection switch: ignored command %r (ON or OFF)", command[:20])
                continue
            self.policy.switch(command == ON)
            logger.info("protection switched %s from Home Assistant", command)
            self._wake.set()
        raise aiomqtt.MqttError("message stream ended")

    async def _publisher(self, client: aiomqtt.Client) -> None:
        qos = max(1, self.mqtt.qos)
        while True:
            self._wake.clear()
            await publish(
                client, state_topic(self.topics.prefix), self.state(), qos=qos, retain=True
            )
            while self._alerts:
                alert = {
                    **self._alerts[0],
                    "sent": datetime.fromtimestamp(self._clock(), UTC).isoformat(),
                }
                await publish(client, self.topics.alerts, json.dumps(alert).encode(), qos=qos)
                self._alerts.pop(0)
            await self._wake.wait()
