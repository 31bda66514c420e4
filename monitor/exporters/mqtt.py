"""Budget alerts, per-speaker state and daemon status over MQTT, via aiomqtt 2.x.

Topics under ``<prefix>`` (default ``voxmeter/<device_id>``):

- ``<prefix>/status`` (retained): ``{"state": "online"|"offline", "version", "started"}``; the
  broker's last will publishes ``offline`` if the daemon vanishes without saying goodbye.
- ``<prefix>/speakers/<alias>/state`` (retained): the speaker's latest figures; cleared (empty
  retained message) when an ``unknown-N`` track expires — by the Home Assistant exporter when
  discovery is on (``clear_expired=False`` here), after the entities reading it are gone.
  ``<alias>`` is percent-encoded by :func:`topic_level` (UTF-8, every character but
  ``A-Z a-z 0-9 - . _ ~``), so an alias with ``#``, ``+``, ``/``, a control character or a
  non-ASCII letter is one valid topic level;
  ``urllib.parse.unquote`` gives the alias back (the payload's ``alias`` holds it as is).
- ``<prefix>/alerts``: one JSON object per budget transition, read from the store's outbox.

Alerts are never held only in memory: the budget stage writes each to the outbox in the same
transaction as the state change, and this exporter deletes it (``ack``) only after the broker's
PUBACK (QoS ≥ 1). Across broker outages and daemon restarts every alert is therefore delivered
at least once and in ``seq`` order. It publishes on the daemon's one MQTT connection
(:class:`~monitor.exporters.connection.MqttConnection`, shared with Home Assistant discovery,
the protection switch and enrolment), whose last will is this status; the connection's
reconnect wait also ends within a second when an alert waits in the outbox.

With ``mqtt.tls`` the connection is TLS (``connection.tls_context``: the broker's certificate
checked against ``mqtt.cafile`` or the system's CAs, its host name against ``mqtt.host`` unless
``mqtt.verify_hostname = false``; a client certificate when ``mqtt.certfile`` is set).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any, Protocol

from monitor import __version__
from monitor.errors import StoreError
from monitor.events.messages import (
    BOUNDS,
    DaemonEvent,
    DaemonStarted,
    DaemonStopping,
    Figures,
    PipelineStats,
    StateChanged,
    TrackExpired,
    TrackRestored,
    WindowScored,
)
from monitor.exporters.connection import ConnectionUser, MqttConnection
from monitor.exporters.topics import TOPICS
from monitor.exporters.words import BUDGET_WORDS, budget_share, one_in, speaker_words
from monitor.settings.config import is_loopback
from monitor.settings.sections import MqttSettings
from monitor.settings.zones import zone_name
from monitor.store.ledger import WindowRecord
from monitor.store.outbox import OutboxMessage

logger = logging.getLogger(__name__)

OUTBOX_BATCH = 100


class Outbox(Protocol):
    """The part of :class:`monitor.store.Store` this exporter uses (monitor/store/outbox.py)."""

    def pending(self, limit: int = 100) -> list[OutboxMessage]: ...

    def ack(self, seq: int) -> bool: ...

    def windows(self, track: str, period_start: float) -> list[WindowRecord]: ...


@dataclass(frozen=True)
class Topics:
    """Every topic of one device."""

    prefix: str

    def at(self, name: str, **levels: str) -> str:
        """The topic declared as ``name`` in :data:`~monitor.exporters.topics.TOPICS`."""
        return TOPICS[name].pattern.format(prefix=self.prefix, **levels)

    @property
    def status(self) -> str:
        return self.at("status")

    @property
    def alerts(self) -> str:
        return self.at("alerts")

    @property
    def device(self) -> str:
        return self.at("device_state")

    @property
    def protection(self) -> str:
        return self.at("protection_state")

    @property
    def protection_set(self) -> str:
        return self.at("protection_set")

    def speaker_state(self, alias: str) -> str:
        return self.at("speaker_state", alias=topic_level(alias))


def topic_level(name: str) -> str:
    """``name`` as one MQTT topic level: percent-encoding (RFC 3986) of its UTF-8 bytes except
    the unreserved ``A-Z a-z 0-9 - . _ ~``; reversible with ``urllib.parse.unquote``.

    Use it for every alias in a topic: ``#`` and ``+`` are wildcards paho refuses to publish to,
    ``/`` would add levels, and control characters make brokers drop the connection.
    """
    return urllib.parse.quote(name, safe="")


def topics_for(settings: MqttSettings, device_id: str) -> Topics:
    """``settings.prefix``, or ``voxmeter/<device_id>`` when it is empty."""
    return Topics((settings.prefix or f"voxmeter/{device_id}").rstrip("/"))


def iso_utc(unix: float) -> str:
    """Wall-clock seconds → ISO 8601 UTC with milliseconds (what every payload uses)."""
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds")


def speaker_state_payload(
    figures: Figures,
    *,
    updated_unix: float,
    highest_bits: float | None = None,
    zone: tzinfo = UTC,
) -> dict[str, Any]:
    """The retained state of one speaker after a window: the record's ``to_json()`` as
    ``figures``, the flat keys dashboards and Home Assistant read (renamings of that JSON:
    cumulative bits; ``features {feature: {measure: bits}}``), and the same figures in words
    (monitor.exporters.words): ``one_in`` (K of "1 in K of N"), ``budget_share`` (percent),
    ``budget_state`` ("OK", "Nearly used", "Over budget"), ``highest`` (the highest pooled
    figure of the period so far: the pooled ``bits`` can fall as more speech arrives) and
    ``words`` (attributes named in words, with units)."""
    data = figures.to_json()
    features: dict[str, dict[str, float]] = {}
    for key, values in data["disclosures"].items():
        feature, _, measure = key.partition(".")
        features.setdefault(feature, {})[measure] = values[0]
    payload: dict[str, Any] = {
        "alias": data["track"],
        "kind": data["kind"],
        "state": data["state"],
        "bits": data["budget_figure_bits"],
        "budget": data["budget_bits"],
        "measure": data["budget_measure"],
        "features": features,
        "bounds": {bound: data["bounds"][bound] for bound in BOUNDS},
        "ceiling": data["ceiling_bits"],
        "windows": data["windows"],
        "speech_seconds": data["pooled_speech_seconds"],
        "period_start": iso_utc(data["period_start_unix"]),
        "updated": iso_utc(updated_unix),
    }
    if data["information_gain_bits"] is not None:
        payload["information_gain"] = data["information_gain_bits"]
        payload["top_candidate"] = data["top_candidate"]
        payload["top_candidate_bits"] = data["top_candidate_bits"]
    payload["figures"] = data
    bits, population = payload["bits"], figures.population_size
    highest = bits if highest_bits is None else max(highest_bits, bits)
    payload["highest"] = highest
    payload["one_in"] = one_in(bits, population)
    payload["population"] = population
    payload["at_least"] = figures.budget_at_least_bits  # None: the reference vouches for it
    payload["budget_share"] = budget_share(bits, payload["budget"])
    payload["budget_state"] = BUDGET_WORDS.get(payload["state"], payload["state"])
    payload["words"] = speaker_words(payload, highest)
    # in words, the period's start on the budget's wall clock, naming the zone (a household
    # reads "since 00:00 Europe/Paris", not a UTC timestamp)
    start = datetime.fromtimestamp(data["period_start_unix"], zone)
    payload["words"]["Period started"] = f"{start:%Y-%m-%d %H:%M} ({zone_name(zone)})"
    return payload


class MqttExporter(ConnectionUser):
    """Publishes status, speaker states and the outbox; see the module docstring.

    ``handle`` only updates memory and wakes its MQTT session, which runs on ``connection``
    (:class:`~monitor.exporters.connection.MqttConnection`), which it makes when none is given
    and then runs itself; the status topic is that connection's availability. Clock, random
    source and sleep (the reconnect's) are arguments so tests control time and backoff.
    """

    name = "mqtt"

    def __init__(
        self,
        settings: MqttSettings,
        *,
        store: Outbox,
        device_id: str,
        connection: MqttConnection | None = None,
        on_connection: Callable[[bool], None] | None = None,
        clear_expired: bool = True,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        zone: tzinfo = UTC,
    ) -> None:
        self.settings = settings
        self._zone = zone  # budget.zone: the words say when the period started on its clock
        if (
            settings.password
            and not settings.tls
            and not is_loopback(settings.host)
            and not settings.internal_network
        ):
            logger.warning(  # allowed by mqtt.allow_plaintext_password (config checks)
                "mqtt.allow_plaintext_password: the MQTT password crosses the network to %s "
                "in clear text",
                settings.host,
            )
        self.topics = topics_for(settings, device_id)
        # a waiting alert ends the reconnect's backoff within a second
        self.attach(
            connection,
            settings,
            ("status", self._session),
            device_id=device_id,
            urgent=self._alerts_waiting,
            rng=rng,
            sleep=sleep,
        )
        if on_connection is not None:
            self.connection.on_connection(on_connection)
        self.connection.availability(self.topics.status, lambda: self.status_payload("offline"))
        self.client_id = self.connection.client_id
        self._outbox = store
        self._clear_expired = clear_expired
        self._clock = clock
        self._version = __version__
        self._started_unix = clock()
        self._states: dict[str, dict[str, Any]] = {}  # alias → latest retained payload
        self._dirty: dict[str, dict[str, Any] | None] = {}  # to publish; None clears
        self._status_dirty = True
        self._wake = asyncio.Event()

    # ---- events (no network) -------------------------------------------------------------

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case DaemonStarted():
                self._version = event.version
                self._started_unix = event.started_unix
                self._status_dirty = True
            case WindowScored():
                figures = event.figures
                highest = self._highest_before(figures.track, figures.period_start_unix)
                self._set_state(
                    speaker_state_payload(
                        figures, updated_unix=self._clock(), highest_bits=highest, zone=self._zone
                    )
                )
            case TrackRestored():  # a restart: figures of its last window, as they were
                figures = event.figures
                highest = self._highest_in_ledger(figures.track, figures.period_start_unix)
                self._set_state(
                    speaker_state_payload(
                        figures,
                        updated_unix=figures.window_end_unix,
                        highest_bits=highest,
                        zone=self._zone,
                    )
                )
            case StateChanged():
                pass  # the alert is already in the outbox: just wake the drain
            case TrackExpired():
                self._states.pop(event.track, None)
                if self._clear_expired:
                    self._dirty[event.track] = None
                else:  # Home Assistant's exporter clears it, after the configs that read it
                    self._dirty.pop(event.track, None)
            case PipelineStats() | DaemonStopping():
                return
        self._wake.set()

    def _highest_before(self, track: str, period_start_unix: float) -> float | None:
        """The highest pooled figure ``track`` showed earlier in this period (None: none)."""
        last = self._states.get(track)
        if last is None or last["figures"]["period_start_unix"] != period_start_unix:
            return None
        return float(last["highest"])

    def _highest_in_ledger(self, track: str, period_start_unix: float) -> float | None:
        """The highest pooled figure of the track's windows in the period, as the ledger holds
        them (a restart keeps "highest this period" as it was)."""
        figures = [
            w.figures.get("budget_figure_bits")
            for w in self._outbox.windows(track, period_start_unix)
        ]
        values = [float(bits) for bits in figures if isinstance(bits, int | float)]
        return max(values, default=None)

    def _set_state(self, payload: dict[str, Any]) -> None:
        self._states[payload["alias"]] = payload
        self._dirty[payload["alias"]] = payload

    # ---- connection ------------------------------------------------------------------------

    def status_payload(self, state: str) -> bytes:
        return json.dumps(
            {"state": state, "version": self._version, "started": iso_utc(self._started_unix)}
        ).encode()

    def _alerts_waiting(self) -> bool:
        try:
            return bool(self._outbox.pending(1))
        except StoreError:
            return False  # the next connection's drain reports it

    async def _session(self) -> None:
        """One connection's life: the status, the outbox and the states, as they change."""
        self._status_dirty = True
        self._dirty.update(self._states)  # a restarted broker has forgotten retained messages
        while True:
            self._wake.clear()
            if self._status_dirty:
                self._status_dirty = False
                await self.connection.publish(
                    self.topics.status, self.status_payload("online"), qos=1, retain=True
                )
            await self._drain_outbox()
            await self._publish_states()
            await self._wake.wait()

    async def _drain_outbox(self) -> None:
        """Publish pending alerts in seq order; ack each only after its PUBACK."""
        qos = max(1, self.settings.qos)  # at-least-once needs an acknowledgement
        while messages := self._outbox.pending(OUTBOX_BATCH):
            for message in messages:
                payload = {**message.payload, "seq": message.seq, "sent": iso_utc(self._clock())}
                await self.connection.publish(message.topic, json.dumps(payload).encode(), qos=qos)
                self._outbox.ack(message.seq)

    async def _publish_states(self) -> None:
        for alias in list(self._dirty):
            payload = self._dirty[alias]
            body = b"" if payload is None else json.dumps(payload).encode()
            await self.connection.publish(
                self.topics.speaker_state(alias), body, qos=self.settings.qos, retain=True
            )
            if self._dirty.get(alias, ...) is payload:  # unchanged while we published
                del self._dirty[alias]
