"""Home Assistant MQTT discovery: voxmeter's figures as entities of one HA device.

Home Assistant creates an entity for every retained JSON config on
``<discovery_prefix>/<component>/<node_id>/<object_id>/config``. This exporter publishes:

- per speaker (local profile or ``unknown-N``): ``sensor`` *disclosure* (unit ``bit``, state
  class ``measurement``, the budget figure) and ``sensor`` *budget* (enum ``ok``, ``warning``,
  ``exceeded``), both reading the speaker's retained state topic that
  :class:`~monitor.exporters.mqtt.MqttExporter` already publishes;
- per device: ``binary_sensor`` *online* (connectivity, the existing status topic and its last
  will), ``sensor`` *templates* (N) and ``sensor`` *speech seconds* (scored in the current
  budget period: restored from the ledger at start, zero at a new period), the last two from a
  retained device state topic this exporter publishes.

An ``unknown-N`` track's entities appear only once the track holds ``[tracker] show_seconds``
of speech in ``show_windows`` windows (its pooled figures, merged fragments included): a
fragment of a voice, or of a television, that merges or expires before never shows; its
disclosure is in the ledger, MQTT and Prometheus all the same.

Every entity has a ``device`` block, an ``origin`` block, a ``unique_id`` and the status topic
as availability. Entities vanish (an empty retained config) when an ``unknown-N`` track expires
and, at start, for every speaker that is no longer a local profile in the database: the exporter
subscribes to its own node's configs, and a *retained* one (published before this run) for a
speaker it does not know is cleared, with that speaker's retained state. A speaker's state is
cleared only after every config reading it (acknowledged, on this one connection): an empty
state reaching an entity that still exists is a template error in Home Assistant's log.
Topics come from :func:`~monitor.exporters.mqtt.topics_for`; object ids are escaped to
``[a-zA-Z0-9_-]``.

It keeps its own broker connection (client id ``<mqtt client id>-ha``), so the alert path of
the MQTT exporter is untouched by discovery.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import aiomqtt

from monitor import __version__
from monitor.events.figures import Figures
from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    TrackExpired,
    TrackRestored,
    WindowScored,
)
from monitor.exporters.connection import Reconnect, client_options, tls_context
from monitor.exporters.mqtt import Topics, iso_utc, publish, topics_for
from monitor.settings.sections import HomeAssistantSettings, MqttSettings
from monitor.store.templates import LocalProfile
from monitor.vocabulary import BUDGET_STATES as STATES

logger = logging.getLogger(__name__)

ONLINE, OFFLINE = "online", "offline"
SPEAKER_ENTITIES = ("disclosure", "budget")
"""Object-id suffixes of one speaker's entities."""
SUPPORT_URL = "https://github.com/voxmeter/voxmeter"
STATE_CLEAR_GRACE_SECONDS = 1.0
"""Wait between a speaker's acknowledged empty configs and its empty state (see _publisher)."""


class Profiles(Protocol):
    """The part of :class:`monitor.store.Store` this exporter reads (the household members)."""

    def local_profiles(self) -> list[LocalProfile]: ...


def safe_id(text: str) -> str:
    """``text`` as ``[a-zA-Z0-9_-]`` for HA object and unique ids, injectively.

    Letters, digits and ``-`` stay; every other character (``_`` too) becomes ``_xx`` per UTF-8
    byte, so ``a.b`` and ``a_b`` never share an entity.
    """
    return re.sub(
        r"[^a-zA-Z0-9-]",
        lambda m: "".join(f"_{byte:02x}" for byte in m.group().encode()),
        text,
    )


def device_state_topic(topics: Topics) -> str:
    """Retained device figures (templates, speech seconds) under the device's prefix."""
    return f"{topics.prefix}/device"


@dataclass(frozen=True)
class Entity:
    """One discovery config: where it goes and what it says."""

    component: str
    object_id: str
    config: dict[str, Any]


@dataclass(frozen=True)
class Discovery:
    """Builds the discovery configs of one device (pure: no network)."""

    settings: HomeAssistantSettings
    topics: Topics
    device_id: str
    version: str = __version__

    @property
    def node_id(self) -> str:
        return self.settings.node_id or safe_id(self.device_id)

    def config_topic(self, component: str, object_id: str) -> str:
        prefix = self.settings.discovery_prefix.rstrip("/")
        return f"{prefix}/{component}/{self.node_id}/{object_id}/config"

    @property
    def subscription(self) -> str:
        """Every config of this node, whatever the component."""
        return self.config_topic("+", "+")

    def _device(self) -> dict[str, Any]:
        return {
            "identifiers": [f"voxmeter_{self.node_id}"],
            "name": f"voxmeter {self.device_id}",
            "manufacturer": "voxmeter",
            "model": "speaker disclosure monitor",
            "sw_version": self.version,
        }

    def _origin(self) -> dict[str, Any]:
        """Who publishes the entity (HA shows it in the MQTT info and logs of the entity)."""
        return {"name": "voxmeter", "sw_version": self.version, "support_url": SUPPORT_URL}

    def _common(self, object_id: str, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "unique_id": f"voxmeter_{self.node_id}_{object_id}",
            "device": self._device(),
            "origin": self._origin(),
            "availability": [
                {
                    "topic": self.topics.status,
                    "value_template": "{{ value_json.state }}",
                    "payload_available": ONLINE,
                    "payload_not_available": OFFLINE,
                }
            ],
        }

    def device_entities(self) -> list[Entity]:
        """Online status (last will), number of templates, seconds of speech scored."""
        status = {
            **self._common("online", "Online"),
            "state_topic": self.topics.status,
            "value_template": "{{ value_json.state }}",
            "payload_on": ONLINE,
            "payload_off": OFFLINE,
            "device_class": "connectivity",
            "entity_category": "diagnostic",
        }
        del status["availability"]  # it *is* the availability: unavailable would hide offline
        state = device_state_topic(self.topics)
        templates = {
            **self._common("templates", "Templates"),
            "state_topic": state,
            "value_template": "{{ value_json.templates }}",
            "state_class": "measurement",
            "icon": "mdi:account-group",
            "entity_category": "diagnostic",
        }
        speech = {
            **self._common("speech_seconds", "Speech seconds"),
            "state_topic": state,
            "value_template": "{{ value_json.speech_seconds }}",
            "unit_of_measurement": "s",
            "device_class": "duration",
            "state_class": "total_increasing",
        }
        return [
            Entity("binary_sensor", "online", status),
            Entity("sensor", "templates", templates),
            Entity("sensor", "speech_seconds", speech),
        ]

    def speaker_entities(self, alias: str) -> list[Entity]:
        """Disclosure bits and budget state of one speaker, from its retained state topic."""
        base = safe_id(alias)
        state_topic = self.topics.speaker_state(alias)
        disclosure = {
            **self._common(f"{base}_disclosure", f"{alias} disclosure"),
            "state_topic": state_topic,
            "value_template": "{{ value_json.bits }}",
            "unit_of_measurement": "bit",
            "state_class": "measurement",
            "suggested_display_precision": 2,
            "icon": "mdi:account-voice",
            "json_attributes_topic": state_topic,
            "json_attributes_template": (
                "{{ {'budget': value_json.budget, 'measure': value_json.measure, "
                "'ceiling': value_json.ceiling, 'windows': value_json.windows, "
                "'speech_seconds': value_json.speech_seconds} | tojson }}"
            ),
        }
        budget = {
            **self._common(f"{base}_budget", f"{alias} budget"),
            "state_topic": state_topic,
            "value_template": "{{ value_json.state }}",
            "device_class": "enum",
            "options": list(STATES),
            "icon": "mdi:shield-account",
        }
        return [
            Entity("sensor", f"{base}_disclosure", disclosure),
            Entity("sensor", f"{base}_budget", budget),
        ]


class HomeAssistantExporter:
    """Publishes discovery configs and the device state; clears entities that went away.

    ``handle`` only updates memory and wakes ``run``; ``run`` owns its own connection and keeps
    it as the alert sender does (connection.Reconnect, ``[mqtt]`` reconnect settings).
    """

    name = "homeassistant"

    def __init__(
        self,
        settings: HomeAssistantSettings,
        mqtt: MqttSettings,
        *,
        store: Profiles,
        device_id: str,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        show_seconds: float = 0.0,
        show_windows: int = 1,
    ) -> None:
        self.mqtt = mqtt
        # an unknown-N track shows once it holds this much ([tracker] show_*): a fragment that
        # merges or expires before never appears (its figures are in the ledger all the same)
        self.show_seconds, self.show_windows = show_seconds, show_windows
        self.topics = topics_for(mqtt, device_id)
        self.discovery = Discovery(settings, self.topics, device_id)
        self.client_id = f"{mqtt.client_id or f'voxmeter-{device_id}'}-ha"
        self._tls = tls_context(mqtt)
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self._reconnect = Reconnect(
            mqtt,
            logger=logger,
            label="Home Assistant discovery, ",
            rng=rng,
            sleep=sleep,
            on_connection=self._set_connected,
        )
        self._speakers: set[str] = set()
        self._configs: dict[str, bytes] = {}  # config topic → payload wanted on the broker
        self._dirty: dict[str, bytes] = {}  # config topic → payload to publish (b"" clears)
        self._cleared: dict[str, None] = {}  # speaker state topics to clear, after the configs
        self._device: dict[str, Any] = {"templates": 0, "speech_seconds": 0.0}
        self._device_dirty = False
        self._period_start_unix: float | None = None
        self._started = asyncio.Event()
        self._wake = asyncio.Event()
        self.connected = False
        self.extra_entities: Callable[[Discovery], list[Entity]] | None = None  # protection's

    # ---- what should exist (no network) ----------------------------------------------------

    def _want(self, entities: Iterable[Entity]) -> None:
        for entity in entities:
            topic = self.discovery.config_topic(entity.component, entity.object_id)
            payload = json.dumps(entity.config, sort_keys=True).encode()
            if self._configs.get(topic) != payload:
                self._configs[topic] = payload
                self._dirty[topic] = payload

    def _forget(self, alias: str) -> None:
        """Clear the speaker's configs, then (once they are acknowledged) its state."""
        self._speakers.discard(alias)
        for entity in self.discovery.speaker_entities(alias):
            topic = self.discovery.config_topic(entity.component, entity.object_id)
            self._configs.pop(topic, None)
            self._dirty[topic] = b""
        self._cleared[self.topics.speaker_state(alias)] = None

    def _shows(self, figures: Figures) -> bool:
        """Whether the track of ``figures`` appears: a member at once, an unknown-N track once
        its period's windows (merged fragments' pooled in) hold enough speech."""
        return figures.kind != "unknown" or (
            figures.windows >= self.show_windows
            and figures.pooled_speech_seconds >= self.show_seconds
        )

    def _add_speaker(self, alias: str) -> None:
        if alias not in self._speakers:
            self._speakers.add(alias)
            self._cleared.pop(self.topics.speaker_state(alias), None)
            self._want(self.discovery.speaker_entities(alias))

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case DaemonStarted():
                self.discovery = Discovery(
                    self.discovery.settings, self.topics, event.device_id, event.version
                )
                self._configs.clear()
                self._want(self.discovery.device_entities())
                if self.extra_entities is not None:
                    self._want(self.extra_entities(self.discovery))
                household = {p.alias for p in self._store.local_profiles()}
                for alias in sorted(self._speakers | household):
                    self._speakers.discard(alias)
                    self._add_speaker(alias)
                self._device["templates"] = max(event.templates.values(), default=0)
                # this period's figure as the ledger holds it: a restart neither zeroes it nor
                # leaves the last run's retained figure standing until the first new window
                self._device["speech_seconds"] = round(event.speech_seconds, 3)
                self._period_start_unix = event.period_start_unix
                self._device_dirty = True
                self._started.set()
            case WindowScored():
                if self._shows(event.figures):
                    self._add_speaker(event.figures.track)
                if event.figures.period_start_unix != self._period_start_unix:
                    self._period_start_unix = event.figures.period_start_unix
                    self._device["speech_seconds"] = 0.0  # a new budget period counts afresh
                self._device["speech_seconds"] = round(
                    self._device["speech_seconds"] + event.window_speech_seconds, 3
                )
                self._device["templates"] = event.figures.templates
                self._device_dirty = True
            case TrackExpired():
                if event.track in self._speakers:
                    self._forget(event.track)
                else:  # never shown: no entity to clear, only the state MQTT published
                    self._cleared[self.topics.speaker_state(event.track)] = None
            case TrackRestored():  # resumed after a restart: its entities exist again at once
                if self._shows(event.figures):
                    self._add_speaker(event.figures.track)
            case _:
                return  # PipelineStats, StateChanged, DaemonStopping: nothing to show
        self._wake.set()

    def is_wanted(self, config_topic: str) -> bool:
        return config_topic in self._configs

    def device_payload(self) -> bytes:
        return json.dumps({**self._device, "updated": iso_utc(self._clock())}).encode()

    # ---- connection ------------------------------------------------------------------------

    async def run(self) -> None:
        """After ``DaemonStarted``: connect, publish, and reconnect (connection.Reconnect, the
        alert sender's policy) until cancelled."""
        await self._started.wait()
        await self._reconnect.run(self._client, self._session)

    def _client(self) -> aiomqtt.Client:
        return aiomqtt.Client(**client_options(self.mqtt, self._tls), identifier=self.client_id)

    def _set_connected(self, connected: bool) -> None:
        self.connected = connected

    async def _session(self, client: aiomqtt.Client) -> None:
        # Subscribe before publishing: retained configs delivered now predate this connection.
        await client.subscribe(self.discovery.subscription, qos=1)
        self._dirty.update(self._configs)  # a restarted broker has forgotten retained messages
        self._device_dirty = True
        try:
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(self._sweep(client), name="voxmeter.exporter.homeassistant.sweep")
                tasks.create_task(
                    self._publisher(client), name="voxmeter.exporter.homeassistant.pub"
                )
        except ExceptionGroup as group:
            # A lost broker fails both tasks; the group would escape ``run``'s reconnect loop
            # (and end the daemon): hand ``run`` the broker error itself.
            lost, other = group.split(aiomqtt.MqttError)
            if lost is None or other is not None:
                raise
            raise _first(lost) from group

    async def _sweep(self, client: aiomqtt.Client) -> None:
        """Clear retained configs (and their speaker state) this run does not want."""
        async for message in client.messages:
            topic = message.topic.value
            if not message.retain or not message.payload or self.is_wanted(topic):
                continue
            if topic in self._dirty:  # this run decided about it already
                continue
            logger.info("removing Home Assistant entity %s", topic)
            self._dirty[topic] = b""
            alias = self._speaker_of(_state_topic(message.payload))
            if alias is not None and alias not in self._speakers:
                self._forget(alias)  # all its entities, then its figures
            self._wake.set()
        raise aiomqtt.MqttError("message stream ended")

    def _speaker_of(self, state_topic: str | None) -> str | None:
        """The alias whose retained state ``state_topic`` is (None: not a speaker's)."""
        head = f"{self.topics.prefix}/speakers/"
        if state_topic is None or not state_topic.startswith(head):
            return None
        level, _, tail = state_topic.removeprefix(head).partition("/")
        return urllib.parse.unquote(level) if tail == "state" and level else None

    async def _publisher(self, client: aiomqtt.Client) -> None:
        qos = max(1, self.mqtt.qos)
        while True:
            self._wake.clear()
            while self._dirty:  # configs first: the states below must find no entity left
                for topic in list(self._dirty):
                    payload = self._dirty[topic]
                    await publish(client, topic, payload, qos=qos, retain=True)
                    if self._dirty.get(topic) is payload:
                        del self._dirty[topic]
            if self._cleared:
                # Home Assistant removes an entity in a task of its own after the empty config:
                # a state cleared right behind the config would still reach its templates.
                await self._sleep(STATE_CLEAR_GRACE_SECONDS)
            for topic in list(self._cleared):
                if self._dirty:
                    break  # a config arrived meanwhile: it goes first, next turn
                await publish(client, topic, b"", qos=qos, retain=True)
                self._cleared.pop(topic, None)
            if self._device_dirty:
                self._device_dirty = False
                await publish(
                    client,
                    device_state_topic(self.topics),
                    self.device_payload(),
                    qos=qos,
                    retain=True,
                )
            await self._wake.wait()


def _first(group: BaseExceptionGroup[aiomqtt.MqttError]) -> aiomqtt.MqttError:
    """The first leaf error of a (possibly nested) exception group."""
    error = group.exceptions[0]
    return _first(error) if isinstance(error, BaseExceptionGroup) else error


def _state_topic(payload: Any) -> str | None:
    try:
        config = json.loads(payload)
    except (TypeError, ValueError):
        return None
    topic = config.get("state_topic") if isinstance(config, dict) else None
    return topic if isinstance(topic, str) else None
