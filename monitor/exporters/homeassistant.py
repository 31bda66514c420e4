"""Home Assistant MQTT discovery, kept on the broker: the configs of monitor.exporters.discovery
published, updated and cleared as the household's tracks come and go.

Per speaker (local profile or ``unknown-N``) the entities read the speaker's retained state
topic that :class:`~monitor.exporters.mqtt.MqttExporter` publishes; the device's figures
(templates, speech seconds this budget period — restored from the ledger at start, zero at a new
period — and whether one window reaches the ceiling) and each named source's (its speech, the
last voice it heard, whether a television or radio plays there and its speech this period) come
from retained topics this exporter publishes.

An ``unknown-N`` track's entities appear only once the track holds ``[tracker] show_seconds``
of speech in ``show_windows`` windows (its pooled figures, merged fragments included): a
fragment of a voice, or of a television, that merges or expires before never shows; its
disclosure is in the ledger, MQTT and Prometheus all the same. A shown track is called
"Unrecognised voice K", K the smallest number no other shown track holds.

Every entity has a ``device`` block, an ``origin`` block, a ``unique_id`` and the status topic
as availability. Entities vanish (an empty retained config) when an ``unknown-N`` track expires
and, at start, for every speaker that is no longer a local profile in the database: the exporter
subscribes to its own node's configs, and a *retained* one (published before this run) for a
speaker it does not know is cleared, with that speaker's retained state. A speaker's state is
cleared only after every config reading it (acknowledged, on this one connection): an empty
state reaching an entity that still exists is a template error in Home Assistant's log.

It publishes on the daemon's one MQTT connection
(:class:`~monitor.exporters.connection.MqttConnection`, shared with the alert sender), from
``DaemonStarted`` on: its sweep subscribes only once the run knows which configs it wants.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from aiomqtt import Message

from monitor.events.figures import Figures
from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    HouseholdChanged,
    PipelineStats,
    TrackExpired,
    TrackRestored,
    WindowScored,
)
from monitor.exporters.connection import ConnectionUser, MqttConnection
from monitor.exporters.discovery import (
    Discovery,
    Entity,
    device_state_topic,
    safe_id,
    source_state_topic,
)
from monitor.exporters.mqtt import iso_utc, topics_for
from monitor.exporters.words import STRANGER, count_words, stranger_numbers
from monitor.references import MORE_REFERENCES, saturated
from monitor.settings.sections import HomeAssistantSettings, MqttSettings
from monitor.store.templates import LocalProfile
from monitor.vocabulary import FigureKey

__all__ = ["Discovery", "Entity", "HomeAssistantExporter", "Profiles", "safe_id"]

logger = logging.getLogger(__name__)

_NO_MEDIA = {"media": "OFF", "media_speech_seconds": 0.0}  # a room's television, before stats

STATE_CLEAR_GRACE_SECONDS = 1.0
"""Wait between a speaker's acknowledged empty configs and its empty state (see _publisher)."""


class Profiles(Protocol):
    """The part of :class:`monitor.store.Store` this exporter reads (the household members)."""

    def local_profiles(self) -> list[LocalProfile]: ...


def reference_attributes(templates: int, population: float, ceiling_bits: float) -> dict[str, Any]:
    """The attributes of the "figure beyond the reference" problem sensor, in words."""
    return {
        "Reference voices": templates,
        "Population": count_words(population),
        "Most a figure can reach": f"{ceiling_bits:.2f} bits",
        "To validate more": MORE_REFERENCES,
    }


class HomeAssistantExporter(ConnectionUser):
    """Publishes discovery configs and the device state; clears entities that went away.

    ``handle`` only updates memory and wakes its MQTT session, which runs on ``connection`` (the
    alert sender's, :class:`~monitor.exporters.connection.MqttConnection`); without one it
    makes its own and runs it.
    """

    name = "homeassistant"

    def __init__(
        self,
        settings: HomeAssistantSettings,
        mqtt: MqttSettings,
        *,
        store: Profiles,
        device_id: str,
        connection: MqttConnection | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        show_seconds: float = 0.0,
        show_windows: int = 1,
        sources: Mapping[str, str] | None = None,
        configuration_url: str | None = None,
    ) -> None:
        self.mqtt = mqtt
        # an unknown-N track shows once it holds this much ([tracker] show_*): a fragment that
        # merges or expires before never appears (its figures are in the ledger all the same)
        self.show_seconds, self.show_windows = show_seconds, show_windows
        self.topics = topics_for(mqtt, device_id)
        self.discovery = Discovery(
            settings,
            self.topics,
            device_id,
            sources=dict(sources or {}),
            configuration_url=configuration_url,
        )
        self.attach(
            connection,
            mqtt,
            ("homeassistant", self._session),
            device_id=device_id,
            rng=rng,
            sleep=sleep,
        )
        self._store = store
        self._clock = clock
        self._sleep = sleep
        self._speakers: set[str] = set()
        self._strangers: dict[str, int] = {}  # shown unknown-N track → its number in HA
        self._configs: dict[str, bytes] = {}  # config topic → payload wanted on the broker
        self._dirty: dict[str, bytes] = {}  # config topic → payload to publish (b"" clears)
        self._cleared: dict[str, None] = {}  # speaker state topics to clear, after the configs
        self._device, self._rooms = self._figures()
        self._media_totals: dict[str, float] = {}  # source → media seconds at the last stats
        self._rooms_dirty: set[str] = set(self._rooms)
        self._device_dirty = False
        self._period_start_unix: float | None = None
        self._started = asyncio.Event()
        self._wake = asyncio.Event()
        # the device's other entities (protection's switch, enrolment's): kept, never swept
        self.extra_entities: list[Callable[[Discovery], list[Entity]]] = []
        self.enrolment_buttons = False  # each speaker's Forget / Enrol button (enrolment on)

    def _figures(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """The figures this exporter publishes itself, as they start: the device's, each
        room's."""
        device = {"templates": 0, "speech_seconds": 0.0, "saturated": False}
        rooms = {
            name: {"speech_seconds": 0.0, "last_voice": "nobody yet"} | _NO_MEDIA
            for name in self.sources
        }
        return device, rooms

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
        self._strangers.pop(alias, None)
        gone = self.discovery.speaker_entities(alias)
        if self.enrolment_buttons:  # whichever it had
            gone += [self.discovery.speaker_button(alias, None, k) for k in ("local", "unknown")]
        for entity in gone:
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

    @property
    def sources(self) -> Mapping[str, str]:
        """The named sources (rooms) shown as devices: name → source kind."""
        return self.discovery.sources

    def display_name(self, alias: str) -> str:
        """What Home Assistant calls a speaker: a member by alias, a shown ``unknown-N`` track
        "Unrecognised voice K" (numbered without gaps)."""
        number = self._strangers.get(alias)
        return alias if number is None else f"{STRANGER} {number}"

    def _add_speaker(self, alias: str, *, stranger: bool = False) -> None:
        if alias not in self._speakers:
            self._speakers.add(alias)
            if stranger:
                self._strangers[alias] = stranger_numbers(self._strangers, alias)
            self._cleared.pop(self.topics.speaker_state(alias), None)
            kind = ("unknown" if stranger else "local") if self.enrolment_buttons else None
            self._want(self.discovery.speaker_entities(alias, self.display_name(alias), kind))

    def _reference_set(self, figures: Figures) -> None:
        """Whether a figure lies beyond what the reference set can validate (figures against
        the templates alone: whether one window reached their ceiling log2 N)."""
        key = FigureKey.parse(figures.budget_measure)
        window_bits = figures.bits(key.feature, key.measure, cumulative=False)
        beyond = figures.budget_at_least_bits is not None
        if beyond or (not figures.population and saturated(window_bits, figures.ceiling_bits)):
            self._device["saturated"] = True  # for the rest of the run: said once, kept
        self._device["reference_set"] = reference_attributes(
            figures.templates, figures.population_size, figures.ceiling_bits
        )

    def _heard(self, event: WindowScored) -> None:
        """The room the window was heard in: its speech, and who spoke last."""
        room = self._rooms.get(event.stream.source)
        if room is None:
            return
        if event.figures.track in self._speakers:
            room["last_voice"] = self.display_name(event.figures.track)
        room["speech_seconds"] = round(room["speech_seconds"] + event.window_speech_seconds, 3)
        self._rooms_dirty.add(event.stream.source)

    def _media(self, event: PipelineStats) -> bool:
        """Each room's television or radio (tracker.media): whether it plays, and the speech
        given to it this period (the growth of the source's total since the last stats).
        Whether a room's figures changed."""
        changed = False
        for name, counts in event.sources.items():
            room = self._rooms.get(name)
            if room is None:
                continue
            grown = counts.media_seconds - self._media_totals.get(name, 0.0)
            self._media_totals[name] = counts.media_seconds
            playing = "ON" if counts.media_playing else "OFF"
            if grown > 0 or room["media"] != playing:
                room["media"] = playing
                room["media_speech_seconds"] = round(
                    room["media_speech_seconds"] + max(grown, 0.0), 3
                )
                self._rooms_dirty.add(name)
                changed = True
        return changed

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case DaemonStarted():
                self.discovery = replace(
                    self.discovery, device_id=event.device_id, version=event.version
                )
                self._configs.clear()
                self._want(self.discovery.device_entities())
                for source in self.sources:
                    self._want(self.discovery.source_entities(source))
                for extra in self.extra_entities:
                    self._want(extra(self.discovery))
                household = {p.alias for p in self._store.local_profiles()}
                for alias in sorted(self._speakers | household):
                    self._speakers.discard(alias)
                    self._add_speaker(alias)
                self._device["templates"] = max(event.templates.values(), default=0)
                self._device["reference_set"] = reference_attributes(
                    self._device["templates"],
                    event.population or self._device["templates"],
                    event.ceiling_bits,
                )
                # this period's figure as the ledger holds it: a restart neither zeroes it nor
                # leaves the last run's retained figure standing until the first new window
                self._device["speech_seconds"] = round(event.speech_seconds, 3)
                self._period_start_unix = event.period_start_unix
                self._device_dirty = True
                self._started.set()
            case WindowScored():
                if self._shows(event.figures):
                    self._add_speaker(event.figures.track, stranger=event.figures.kind == "unknown")
                if event.figures.period_start_unix != self._period_start_unix:
                    self._period_start_unix = event.figures.period_start_unix
                    self._device["speech_seconds"] = 0.0  # a new budget period counts afresh
                    for room in self._rooms.values():
                        room |= {"speech_seconds": 0.0, "media_speech_seconds": 0.0}
                self._heard(event)
                self._reference_set(event.figures)
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
                    self._add_speaker(event.figures.track, stranger=event.figures.kind == "unknown")
            case PipelineStats():
                if not self._media(event):
                    return
            case HouseholdChanged():
                self._household(event)
            case _:
                return  # StateChanged, DaemonStopping: nothing to show
        self._wake.set()

    def _household(self, event: HouseholdChanged) -> None:
        """A member enrolled (an unrecognised voice named: its entities become the member's)
        or forgotten: their entities appear or go, at once."""
        for alias in event.removed:
            if alias in self._speakers:
                self._forget(alias)
        for alias in event.added:
            self._speakers.discard(alias)
            self._strangers.pop(alias, None)
            self._add_speaker(alias)
        if event.claimed is not None and event.claimed in self._speakers:
            self._forget(event.claimed)  # its speech is the member's profile now
        self._device["templates"] = event.templates
        self._device_dirty = True

    def is_wanted(self, config_topic: str) -> bool:
        return config_topic in self._configs

    def device_payload(self) -> bytes:
        return json.dumps({**self._device, "updated": iso_utc(self._clock())}).encode()

    # ---- connection ------------------------------------------------------------------------

    async def _session(self) -> None:
        """One connection's life, from ``DaemonStarted`` on: the sweep, then the publisher."""
        await self._started.wait()
        # Subscribe before publishing: retained configs delivered now predate this connection.
        await self.connection.subscribe(self.discovery.subscription, self._sweep)
        self._dirty.update(self._configs)  # a restarted broker has forgotten retained messages
        self._device_dirty = True
        self._rooms_dirty.update(self._rooms)
        await self._publisher()

    async def _sweep(self, message: Message) -> None:
        """Clear a retained config (and its speaker's state) this run does not want."""
        topic = message.topic.value
        if not message.retain or not message.payload or self.is_wanted(topic):
            return
        if topic in self._dirty:  # this run decided about it already
            return
        logger.info("removing Home Assistant entity %s", topic)
        self._dirty[topic] = b""
        alias = self._speaker_of(_state_topic(message.payload))
        if alias is not None and alias not in self._speakers:
            self._forget(alias)  # all its entities, then its figures
        self._wake.set()

    def _speaker_of(self, state_topic: str | None) -> str | None:
        """The alias whose retained state ``state_topic`` is (None: not a speaker's)."""
        head = f"{self.topics.prefix}/speakers/"
        if state_topic is None or not state_topic.startswith(head):
            return None
        level, _, tail = state_topic.removeprefix(head).partition("/")
        return urllib.parse.unquote(level) if tail == "state" and level else None

    async def _publisher(self) -> None:
        qos = max(1, self.mqtt.qos)
        while True:
            self._wake.clear()
            while self._dirty:  # configs first: the states below must find no entity left
                for topic in list(self._dirty):
                    payload = self._dirty[topic]
                    await self.connection.publish(topic, payload, qos=qos, retain=True)
                    if self._dirty.get(topic) is payload:
                        del self._dirty[topic]
            if self._cleared:
                # Home Assistant removes an entity in a task of its own after the empty config:
                # a state cleared right behind the config would still reach its templates.
                await self._sleep(STATE_CLEAR_GRACE_SECONDS)
            for topic in list(self._cleared):
                if self._dirty:
                    break  # a config arrived meanwhile: it goes first, next turn
                await self.connection.publish(topic, b"", qos=qos, retain=True)
                self._cleared.pop(topic, None)
            if self._device_dirty:
                self._device_dirty = False
                await self.connection.publish(
                    device_state_topic(self.topics),
                    self.device_payload(),
                    qos=qos,
                    retain=True,
                )
            while self._rooms_dirty:
                source = self._rooms_dirty.pop()
                payload = json.dumps(
                    {**self._rooms[source], "updated": iso_utc(self._clock())}
                ).encode()
                topic = source_state_topic(self.topics, source)
                await self.connection.publish(topic, payload, qos=qos, retain=True)
            await self._wake.wait()


def _state_topic(payload: Any) -> str | None:
    try:
        config = json.loads(payload)
    except (TypeError, ValueError):
        return None
    topic = config.get("state_topic") if isinstance(config, dict) else None
    return topic if isinstance(topic, str) else None
