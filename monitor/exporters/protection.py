"""Protection in Home Assistant: a switch to turn it on and off, a binary sensor *Protecting*
with its reason, a *Protection status* sentence, and an alert when protection starts for a
person.

The entities are discovery configs of the device (:func:`protection_entities`), published and
kept by the Home Assistant exporter (its ``extra_entities``), so its sweep of stale configs
leaves them be. :class:`ProtectionMqtt` is the exporter, a user of the daemon's one MQTT
connection (:class:`~monitor.exporters.connection.MqttConnection`): it subscribes to the
switch's command topic
(``<prefix>/protection/set``, ``ON``/``OFF``), applies it to the policy (``enabled``), and keeps
the retained state ``<prefix>/protection`` = ``{"enabled", "protecting", "speaker", "mode",
"reason", "switch", "status"}`` up to date. When the policy starts protecting because a person
is over budget, ``{"alias", "event": "protection", "protecting": true, "device", "sent"}`` goes
to the alerts topic (QoS 1; not through the store's outbox: the budget alert that caused it
already did; through the connection's bounded queue, so an alert raised while the broker is
away goes when it is back).

Every start turns protection on: a user's OFF lasts until the daemon restarts. The switch says
so in its *Reason* attribute, and *Protection status* — a text sensor, so Home Assistant's
logbook lists each change — reads "On since voxmeter started; …" after a restart, beside the
line that the switch turned on.

A command is an act of now: a *retained* one (Home Assistant never retains commands; one left on
the broker is a misconfiguration or an attack) is ignored with one warning and cleared, so the
switch is ON at each start, as documented. A command that changes the switch goes to the log
and, as ``{"event": "protection-switched", "enabled", "device", "sent"}``, to the alerts topic:
protection never goes off unnoticed. Junk commands are one warning, then a count a minute
(:class:`~monitor.logs.PeerWarnings`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiomqtt import Message

from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    StateChanged,
    TrackExpired,
    TrackRestored,
    WindowScored,
)
from monitor.exporters.connection import ConnectionUser, MqttConnection
from monitor.exporters.discovery import Discovery, Entity
from monitor.exporters.mqtt import Topics, topics_for
from monitor.logs import PeerWarnings
from monitor.protect.policy import ProtectionPolicy
from monitor.settings.sections import MqttSettings

logger = logging.getLogger(__name__)

ON, OFF = "ON", "OFF"


def state_topic(prefix: str) -> str:
    return Topics(prefix).protection


def command_topic(prefix: str) -> str:
    return Topics(prefix).protection_set


def protection_entities(discovery: Discovery) -> list[Entity]:
    """The switch *Protection*, the binary sensor *Protecting* and the *Protection status*.

    No fixed icons: Home Assistant's own differ between on and off (a switch's toggle, a binary
    sensor's filled or empty circle).
    """
    topic = state_topic(discovery.topics.prefix)
    switch = {
        **discovery._common("protection", "Protection"),
        "state_topic": topic,
        "value_template": "{{ value_json.enabled }}",
        "command_topic": command_topic(discovery.topics.prefix),
        "payload_on": ON,
        "payload_off": OFF,
        "state_on": ON,
        "state_off": OFF,
        "device_class": "switch",
        "json_attributes_topic": topic,
        "json_attributes_template": "{{ {'Reason': value_json.switch} | tojson }}",
    }
    protecting = {
        **discovery._common("protecting", "Protecting"),
        "state_topic": topic,
        "value_template": "{{ value_json.protecting }}",
        "payload_on": ON,
        "payload_off": OFF,
        "json_attributes_topic": topic,
        "json_attributes_template": (
            "{{ {'Reason': value_json.reason, 'Mode': value_json.mode} | tojson }}"
        ),
    }
    status = {
        **discovery._common("protection_status", "Protection status"),
        "state_topic": topic,
        "value_template": "{{ value_json.status }}",
        "icon": "mdi:shield-half-full",
    }
    return [
        Entity("switch", "protection", switch),
        Entity("binary_sensor", "protecting", protecting),
        Entity("sensor", "protection_status", status),
    ]


class ProtectionMqtt(ConnectionUser):
    """The switch's commands in, the protection state and alerts out (module docstring)."""

    name = "protection-mqtt"

    def __init__(
        self,
        policy: ProtectionPolicy,
        mqtt: MqttSettings,
        *,
        device_id: str,
        connection: MqttConnection | None = None,
        rng: random.Random | None = None,
        clock: Any = time.time,
    ) -> None:
        self.policy = policy
        self.mqtt = mqtt
        self.device_id = device_id
        self.topics = topics_for(mqtt, device_id)
        self.attach(connection, mqtt, ("protection", self._session), device_id=device_id, rng=rng)
        self._clock = clock
        self._wake = asyncio.Event()
        self._speaker: str | None = None
        self._started = asyncio.Event()
        self._warnings = PeerWarnings(logger)
        self._switched = "On since voxmeter started (every start turns protection on)"
        self.display_name: Callable[[str], str] = str  # a track alias as Home Assistant names it

    def changed(self, protecting: bool, speaker: str | None) -> None:
        """The policy's ``on_change``: publish the state; alert when a person is protected."""
        self._speaker = speaker if protecting else None
        if protecting and speaker is not None:
            self._alert(
                {
                    "alias": speaker,
                    "event": "protection",
                    "protecting": True,
                    "device": self.device_id,
                }
            )
        self._wake.set()

    def _alert(self, alert: dict[str, Any]) -> None:
        """``alert`` to the alerts topic, stamped ``sent`` as it goes (the connection's queue)."""

        def payload() -> bytes:
            sent = datetime.fromtimestamp(self._clock(), UTC).isoformat()
            return json.dumps({**alert, "sent": sent}).encode()

        self.connection.post(self.topics.alerts, payload, qos=max(1, self.mqtt.qos))

    def reason(self) -> str:
        """Why *Protecting* is on or off, in a sentence."""
        policy = self.policy
        if policy.mode == "off":
            return "Off: protect.mode is off in config.toml"
        if not policy.enabled:
            return "Off: switched off in Home Assistant"
        if policy.mode == "always":
            return "Anonymising every utterance (protect.mode is always)"
        if policy.protecting and self._speaker is not None:
            return f"Anonymising: {self.display_name(self._speaker)} is over budget"
        over = sorted(self.display_name(alias) for alias in policy.exceeded)
        if over:
            return f"Waiting: {', '.join(over)} over budget, no relayed audio since"
        return "Not needed: nobody is over budget"

    def state(self) -> bytes:
        policy = self.policy
        switch = self._switched if policy.enabled else "Switched off in Home Assistant"
        reason = self.reason()
        status = f"{switch}; {reason[:1].lower()}{reason[1:]}" if policy.enabled else switch
        return json.dumps(
            {
                "enabled": ON if policy.enabled else OFF,
                "protecting": ON if policy.protecting and policy.enabled else OFF,
                "speaker": self._speaker,
                "mode": policy.mode,
                "reason": reason,
                "switch": switch,
                "status": status,
            }
        ).encode()

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case DaemonStarted():
                self._started.set()
            case StateChanged() | TrackRestored() | TrackExpired():
                pass  # who is over budget may have changed: the reason with it
            case WindowScored(figures=figures) if figures.windows == 1:
                pass  # a new period starts afresh
            case _:
                return
        self._wake.set()

    async def _session(self) -> None:
        """One connection's life, from ``DaemonStarted`` on: the commands and the state."""
        await self._started.wait()
        await self.connection.subscribe(command_topic(self.topics.prefix), self._command)
        topic = state_topic(self.topics.prefix)
        await self.keep_state(topic, self.state, self._wake, qos=max(1, self.mqtt.qos))

    async def _command(self, message: Message) -> None:
        topic = command_topic(self.topics.prefix)
        payload = bytes(message.payload or b"")
        if message.retain:  # stale: a command is an act of now, never a standing order
            if payload:
                self._warnings.warn(
                    topic, "retained", "protection switch: ignored the retained command %r "
                    "on %s and cleared it (commands are never retained; protection starts "
                    "ON)", payload[:20].decode(errors="replace"), topic,
                )  # fmt: skip
                await self.connection.publish(topic, b"", qos=1, retain=True)
            return
        if not payload:  # a retained command being cleared (ours or anyone's)
            return
        command = payload.decode(errors="replace").strip().upper()
        if command not in (ON, OFF):
            self._warnings.warn(
                topic, "command", "protection switch: ignored command %r (ON or OFF)",
                command[:20],
            )  # fmt: skip
            return
        self._switch(command == ON)

    def _switch(self, on: bool) -> None:
        """A command from Home Assistant: applied, logged, and a change an alert (turning
        protection off must never go unnoticed)."""
        changed = self.policy.enabled != on
        self.policy.switch(on)
        self._switched = f"Switched {'on' if on else 'off'} in Home Assistant"
        if on:
            logger.info("protection switched ON from Home Assistant")
        else:
            logger.warning("protection switched OFF from Home Assistant: audio passes clear")
        if changed:
            self._alert({"event": "protection-switched", "enabled": on, "device": self.device_id})
        self._wake.set()
