"""Enrolment from Home Assistant: the entities and the commands of an enrolment session.

On the daemon's device (:func:`enrolment_entities`, published by the Home Assistant exporter as
its ``extra_entities``):

- *New member's alias* (``text``): what the next member will be called;
- *Enrol the next voice* (``button``): collect the next voice heard until it holds enough
  speech, then enrol it;
- *Cancel enrolment* (``button``);
- *Enrolment progress* (``sensor``): a sentence — "Nobody enrolled yet: …", "Listening: 12 of
  30 s of one voice", "Done: alice enrolled", or why not — with its parts as attributes;

and on each speaker (:meth:`~monitor.exporters.discovery.Discovery.speaker_button`): *Forget
<member>* and *Enrol Unrecognised voice K as the new member* (its speech so far becomes the
profile of the alias typed).

:class:`EnrolmentMqtt` is the exporter, a user of the daemon's one MQTT connection
(:class:`~monitor.exporters.connection.MqttConnection`): it subscribes to the command topics
(``<prefix>/enrolment/alias/set``, ``…/command`` START or CANCEL, ``…/claim``, ``…/forget``),
hands each command to the
:class:`~monitor.tracking.enrolment.EnrolmentSession`, and keeps the retained state
``<prefix>/enrolment`` up to date. A command is an act of now: a *retained* one is ignored
with one warning and cleared (as the protection switch's). Payloads are bounded: anything over
``MAX_COMMAND_BYTES`` is refused unread beyond its length.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random

from aiomqtt import Message

from monitor.events.messages import DaemonEvent, DaemonStarted, PipelineStats
from monitor.exporters.connection import ConnectionUser, MqttConnection
from monitor.exporters.discovery import Discovery, Entity
from monitor.exporters.mqtt import topics_for
from monitor.logs import PeerWarnings
from monitor.settings.sections import MqttSettings
from monitor.tracking.enrolment import MAX_ALIAS_CHARS, EnrolmentSession

logger = logging.getLogger(__name__)

START, CANCEL = "START", "CANCEL"
MAX_COMMAND_BYTES = 1024
"""A command longer than this is refused by its length (an alias is at most 64 characters)."""
COMMANDS = ("enrolment_alias", "enrolment_command", "enrolment_claim", "enrolment_forget")


def enrolment_entities(discovery: Discovery) -> list[Entity]:
    """The text, the two buttons and the progress sensor on the daemon's device."""
    topics = discovery.topics
    state = topics.at("enrolment_state")
    alias = {
        **discovery._common("enrol_alias", "New member's alias"),
        "command_topic": topics.at("enrolment_alias"),
        "state_topic": state,
        "value_template": "{{ value_json.alias }}",
        "min": 0,
        "max": MAX_ALIAS_CHARS,
        "mode": "text",
        "icon": "mdi:account-edit",
    }
    start = {
        **discovery._common("enrol_start", "Enrol the next voice"),
        "command_topic": topics.at("enrolment_command"),
        "payload_press": START,
        "icon": "mdi:account-voice",
    }
    cancel = {
        **discovery._common("enrol_cancel", "Cancel enrolment"),
        "command_topic": topics.at("enrolment_command"),
        "payload_press": CANCEL,
        "icon": "mdi:cancel",
    }
    progress = {
        **discovery._common("enrolment", "Enrolment progress"),
        "state_topic": state,
        "value_template": "{{ value_json.status }}",
        "icon": "mdi:account-multiple-plus",
        "json_attributes_topic": state,
        "json_attributes_template": (
            "{{ {'Phase': value_json.phase, 'Alias': value_json.alias, "
            "'Speech collected (s)': value_json.seconds, 'Speech needed (s)': value_json.needed, "
            "'Members': value_json.members, 'Reason': value_json.reason} | tojson }}"
        ),
    }
    return [
        Entity("text", "enrol_alias", alias),
        Entity("button", "enrol_start", start),
        Entity("button", "enrol_cancel", cancel),
        Entity("sensor", "enrolment", progress),
    ]


class EnrolmentMqtt(ConnectionUser):
    """The enrolment's commands in, its progress out (module docstring)."""

    name = "enrolment-mqtt"

    def __init__(
        self,
        session: EnrolmentSession,
        mqtt: MqttSettings,
        *,
        device_id: str,
        connection: MqttConnection | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.session = session
        self.mqtt = mqtt
        self.topics = topics_for(mqtt, device_id)
        self.attach(connection, mqtt, ("enrolment", self._session), device_id=device_id, rng=rng)
        self._names = {self.topics.at(name): name for name in COMMANDS}
        self._wake = asyncio.Event()
        self._started = asyncio.Event()
        self._warnings = PeerWarnings(logger)
        session.on_change = self._wake.set

    def state(self) -> bytes:
        """The retained ``<prefix>/enrolment`` payload."""
        return json.dumps(dataclasses.asdict(self.session.progress())).encode()

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case DaemonStarted():
                self._started.set()
            case PipelineStats():
                self.session.tick()
            case _:
                return
        self._wake.set()

    async def _session(self) -> None:
        """One connection's life, from ``DaemonStarted`` on: the commands and the progress."""
        await self._started.wait()
        for topic in self._names:
            await self.connection.subscribe(topic, self._message)
        topic = self.topics.at("enrolment_state")
        await self.keep_state(topic, self.state, self._wake, qos=max(1, self.mqtt.qos))

    async def _message(self, message: Message) -> None:
        topic = message.topic.value
        payload = message.payload if isinstance(message.payload, bytes) else b""
        if topic not in self._names or not payload:
            return  # not ours, or a retained command being cleared
        if message.retain:  # stale: a command is an act of now, never a standing order
            self.session._refuse_command(
                f"ignored a retained command on {topic} and cleared it (commands are never "
                "retained)"
            )
            await self.connection.publish(topic, b"", qos=1, retain=True)
            return
        if len(payload) > MAX_COMMAND_BYTES:
            self.session._refuse_command(
                f"ignored a command of {len(payload)} bytes on {topic} (at most "
                f"{MAX_COMMAND_BYTES})"
            )
            return
        self._command(self._names[topic], payload.decode(errors="replace"))

    def _command(self, name: str, text: str) -> None:
        session = self.session
        if name == "enrolment_alias":
            session.set_alias(text)
        elif name == "enrolment_claim":
            session.claim(text)
        elif name == "enrolment_forget":
            session.forget(text)
        elif text.strip().upper() == START:
            session.start()
        elif text.strip().upper() == CANCEL:
            session.cancel()
        else:
            self._warnings.warn(
                name, "command", "enrolment: ignored command %r (START or CANCEL)", text[:20]
            )
