"""Home Assistant MQTT discovery configs: what each entity is called, reads and shows (pure).

Home Assistant creates an entity for every retained JSON config on
``<discovery_prefix>/<component>/<node_id>/<object_id>/config``. The configs here describe:

- the daemon, one device: *Online* (connectivity, the status topic and its last will; not a
  diagnostic, so "Disconnected" shows on a dashboard), *Problem* (on while the measuring
  process refuses to start for a reason the user must fix, the fix as its attribute),
  *Speech heard this period* (a duration), and, as diagnostics, *Reference voices* (N, the
  templates scored against) and *Figure beyond the reference* (a problem once a figure lies
  beyond what they can validate against the population N_pop, or, without a population model,
  once a window reaches log2 N);
- each named source (a room: ``kitchen=wyoming-proxy://…``), a device of its own in that area,
  connected through the daemon's device (``via_device``): *Speech heard this period* and *Last
  voice heard*;
- each speaker (a household member by alias; an ``unknown-N`` track as "Unrecognised voice K",
  numbered by the exporter without gaps): *disclosure now* (the pooled figure in bits: it can
  fall as more speech arrives), *highest this period*, *as identifying as 1 in* (K of N),
  *budget used* (percent) and *budget* ("OK", "Nearly used", "Over budget"), with attributes
  named in words and units (monitor.exporters.words).

Figures with a unit keep Home Assistant's long-term statistics (``state_class``). Topics come
from :func:`~monitor.exporters.mqtt.topics_for`; object ids are escaped to ``[a-zA-Z0-9_-]``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor import __version__
from monitor.exporters.mqtt import Topics, topic_level
from monitor.exporters.topics import TOPICS
from monitor.exporters.words import BUDGET_WORDS
from monitor.settings.sections import HomeAssistantSettings

ONLINE, OFFLINE = "online", "offline"
SPEAKER_ENTITIES = ("disclosure", "highest", "one_in", "budget_used", "budget")
"""Object-id suffixes of one speaker's entities."""
MEMBER_BUTTON, STRANGER_BUTTON = "forget", "enrol"
"""Object-id suffixes of a member's *Forget* button and of an unrecognised voice's *Enrol as
the new member* button (the enrolment's commands, monitor.exporters.enrolment)."""
SUPPORT_URL = "https://github.com/voxmeter/voxmeter"
DOCUMENTATION_URL = f"{SUPPORT_URL}/blob/main/docs/home-assistant.md"
"""The devices' Visit link unless ``homeassistant.configuration_url`` names another (the add-on
names its own page in Home Assistant)."""
SOURCE_MODELS = {
    "mic": "microphone",
    "file": "audio file",
    "stdin": "audio on standard input",
    "wyoming": "Wyoming audio",
    "wyoming-proxy": "Wyoming proxy",
}
"""The model a room's device shows, by source kind (monitor.sources.spec)."""


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


def room_name(source: str) -> str:
    """A source's name as a room: ``living-room`` and ``living_room`` → "Living room"."""
    words = re.sub(r"[-_]+", " ", source).strip()
    return words[:1].upper() + words[1:]


def device_state_topic(topics: Topics) -> str:
    """Retained device figures (templates, speech seconds, saturation) under the prefix."""
    return topics.device


def source_state_topic(topics: Topics, source: str) -> str:
    """Retained figures of one source (its speech this period, the last voice it heard)."""
    return topics.at("source_state", source=topic_level(source))


@dataclass(frozen=True)
class Entity:
    """One discovery config: where it goes and what it says."""

    component: str
    object_id: str
    config: dict[str, Any]


@dataclass(frozen=True)
class Discovery:
    """Builds the discovery configs of one daemon and its rooms (pure: no network)."""

    settings: HomeAssistantSettings
    topics: Topics
    device_id: str
    version: str = __version__
    sources: Mapping[str, str] = field(default_factory=dict)  # named source → its kind
    configuration_url: str | None = None  # every device's Visit link; None: see visit_url

    @property
    def visit_url(self) -> str:
        """Where a device's Visit link leads: the add-on's page in Home Assistant under the
        add-on (it sets ``homeassistant.configuration_url``), else the documentation: a page a
        household can read, never the raw metrics."""
        return self.configuration_url or self.settings.configuration_url or DOCUMENTATION_URL

    @property
    def node_id(self) -> str:
        return self.settings.node_id or safe_id(self.device_id)

    def config_topic(self, component: str, object_id: str) -> str:
        prefix = self.settings.discovery_prefix.rstrip("/")
        return TOPICS["discovery_config"].pattern.format(
            discovery_prefix=prefix, component=component, node_id=self.node_id, object_id=object_id
        )

    @property
    def subscription(self) -> str:
        """Every config of this node, whatever the component."""
        return self.config_topic("+", "+")

    def _device(self) -> dict[str, Any]:
        device = {
            "identifiers": [f"voxmeter_{self.node_id}"],
            "name": f"voxmeter {self.device_id}",
            "manufacturer": "voxmeter",
            "model": "speaker disclosure monitor",
            "sw_version": self.version,
        }
        device["configuration_url"] = self.visit_url
        return device

    def _source_device(self, source: str) -> dict[str, Any]:
        """A room: its own device, in its area, connected through the daemon's."""
        room = room_name(source)
        device = {
            "identifiers": [f"voxmeter_{self.node_id}_source_{safe_id(source)}"],
            "name": room,
            "manufacturer": "voxmeter",
            "model": f"{SOURCE_MODELS.get(self.sources[source], 'audio')} source",
            "sw_version": self.version,
            "suggested_area": room,
            "via_device": f"voxmeter_{self.node_id}",
        }
        device["configuration_url"] = self.visit_url
        return device

    def _origin(self) -> dict[str, Any]:
        """Who publishes the entity (HA shows it in the MQTT info and logs of the entity)."""
        return {"name": "voxmeter", "sw_version": self.version, "support_url": SUPPORT_URL}

    def _common(self, object_id: str, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "unique_id": f"voxmeter_{self.node_id}_{object_id}",
            "object_id": f"voxmeter_{self.node_id}_{object_id}",  # a predictable entity id
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
        """Online (its last will), Problem, speech heard, the reference set's two diagnostics."""
        status = {
            **self._common("online", "Online"),
            "state_topic": self.topics.status,
            "value_template": "{{ value_json.state }}",
            "payload_on": ONLINE,
            "payload_off": OFFLINE,
            "device_class": "connectivity",
        }
        del status["availability"]  # it *is* the availability: unavailable would hide offline
        state = device_state_topic(self.topics)
        templates = {
            **self._common("templates", "Reference voices"),
            "state_topic": state,
            "value_template": "{{ value_json.templates }}",
            "state_class": "measurement",
            "unit_of_measurement": "voices",
            "icon": "mdi:account-group",
            "entity_category": "diagnostic",
        }
        too_small = {
            **self._common("reference_set", "Figure beyond the reference"),
            "state_topic": state,
            "value_template": "{{ 'ON' if value_json.saturated else 'OFF' }}",
            "device_class": "problem",
            "entity_category": "diagnostic",
            "json_attributes_topic": state,
            "json_attributes_template": "{{ value_json.reference_set | tojson }}",
        }
        return [
            Entity("binary_sensor", "online", status),
            Entity("binary_sensor", "problem", self._problem()),
            Entity("sensor", "speech_seconds", self._speech("speech_seconds", state)),
            Entity("sensor", "templates", templates),
            Entity("binary_sensor", "reference_set", too_small),
        ]

    def _problem(self) -> dict[str, Any]:
        """On while the measuring process refuses to start for a reason the user must fix
        (monitor.daemon.problem puts the log's line in the status); its *What to do*
        attribute is that line. Shown while offline: that is when it matters."""
        problem = {
            **self._common("problem", "Problem"),
            "state_topic": self.topics.status,
            "value_template": "{{ 'ON' if value_json.problem is defined else 'OFF' }}",
            "device_class": "problem",
            "json_attributes_topic": self.topics.status,
            "json_attributes_template": (
                "{{ {'What to do': value_json.problem | default('nothing')} | tojson }}"
            ),
        }
        del problem["availability"]
        return problem

    def _speech(self, object_id: str, state_topic: str) -> dict[str, Any]:
        """Speech scored this budget period, a duration in minutes (Home Assistant converts
        it to the unit a user picks)."""
        return {
            **self._common(object_id, "Speech heard this period"),
            "state_topic": state_topic,
            "value_template": "{{ (value_json.speech_seconds / 60) | round(3) }}",
            "unit_of_measurement": "min",
            "suggested_display_precision": 1,
            "device_class": "duration",
            "state_class": "total_increasing",
        }

    def source_entities(self, source: str) -> list[Entity]:
        """One room's device: its speech this period and the last voice it heard."""
        base = f"source_{safe_id(source)}"
        state = source_state_topic(self.topics, source)
        speech = {
            **self._speech(f"{base}_speech_seconds", state),
            "device": self._source_device(source),
        }
        last = {
            **self._common(f"{base}_last_voice", "Last voice heard"),
            "device": self._source_device(source),
            "state_topic": state,
            "value_template": "{{ value_json.last_voice }}",
            "icon": "mdi:account-voice",
        }
        return [
            Entity("sensor", f"{base}_speech_seconds", speech),
            Entity("sensor", f"{base}_last_voice", last),
            *self._media_entities(source, base, state),
        ]

    def _media_entities(self, source: str, base: str, state: str) -> list[Entity]:
        """A room's television or radio: one entity however many voices it speaks in (its
        windows are never strangers), playing or not, and its speech this period."""
        playing = {
            **self._common(f"{base}_media", "Television or radio"),
            "device": self._source_device(source),
            "state_topic": state,
            "value_template": "{{ value_json.media | default('OFF') }}",
            "icon": "mdi:television-classic",
        }
        speech = {
            **self._speech(f"{base}_media_speech_seconds", state),
            "name": "Television or radio speech this period",
            "value_template": _MEDIA_MINUTES,
            "device": self._source_device(source),
        }
        return [
            Entity("binary_sensor", f"{base}_media", playing),
            Entity("sensor", f"{base}_media_speech_seconds", speech),
        ]

    def speaker_button(self, alias: str, display: str | None, kind: str) -> Entity:
        """A member's *Forget* button (``kind`` local: its payload is the alias) or an
        unrecognised voice's *Enrol as the new member* (``kind`` unknown: the track's speech so
        far becomes the profile of the alias typed in *New member's alias*)."""
        who, stranger = display or alias, kind == "unknown"
        suffix = STRANGER_BUTTON if stranger else MEMBER_BUTTON
        name = f"Enrol {who} as the new member" if stranger else f"Forget {who}"
        config = {
            **self._common(f"{safe_id(alias)}_{suffix}", name),
            "command_topic": self.topics.at("enrolment_claim" if stranger else "enrolment_forget"),
            "payload_press": alias,
            "icon": "mdi:account-plus" if stranger else "mdi:account-remove",
            "entity_category": "config",
        }
        return Entity("button", f"{safe_id(alias)}_{suffix}", config)

    def speaker_entities(
        self, alias: str, display: str | None = None, kind: str | None = None
    ) -> list[Entity]:
        """One speaker's figures (module docstring), from its retained state topic; ``display``
        is the name Home Assistant shows (default: the alias); with ``kind`` (local or unknown)
        its enrolment button too (:meth:`speaker_button`)."""
        base, who = safe_id(alias), display or alias
        state_topic = self.topics.speaker_state(alias)

        def figure(suffix: str, name: str, template: str, unit: str) -> dict[str, Any]:
            return {
                **self._common(f"{base}_{suffix}", f"{who} {name}"),
                "state_topic": state_topic,
                "value_template": template,
                "unit_of_measurement": unit,
                "state_class": "measurement",
                "suggested_display_precision": 2 if unit == "bit" else 0,
            }

        disclosure = {
            **figure("disclosure", "disclosure now", "{{ value_json.bits }}", "bit"),
            "icon": "mdi:account-voice",
            "json_attributes_topic": state_topic,
            "json_attributes_template": "{{ value_json.words | tojson }}",
        }
        highest = {
            **figure("highest", "highest this period", _HIGHEST, "bit"),
            "icon": "mdi:chart-bell-curve-cumulative",
        }
        one_in = {
            **figure("one_in", "as identifying as 1 in", _ONE_IN, "voices"),
            "icon": "mdi:account-search",
        }
        used = {
            **figure("budget_used", "budget used", _BUDGET_USED, "%"),
            "icon": "mdi:gauge",
        }
        budget = {
            **self._common(f"{base}_budget", f"{who} budget"),
            "state_topic": state_topic,
            "value_template": _BUDGET_STATE,
            "device_class": "enum",
            "options": list(BUDGET_WORDS.values()),
            "icon": "mdi:wallet-outline",
        }
        entities = zip(SPEAKER_ENTITIES, (disclosure, highest, one_in, used, budget), strict=True)
        sensors = [Entity("sensor", f"{base}_{suffix}", config) for suffix, config in entities]
        return sensors if kind is None else [*sensors, self.speaker_button(alias, display, kind)]


# Templates that also read a state retained by an older voxmeter (without the words, the media).
_MEDIA_MINUTES = "{{ ((value_json.media_speech_seconds | default(0)) / 60) | round(3) }}"
_HIGHEST = "{{ value_json.highest if value_json.highest is defined else value_json.bits }}"
_ONE_IN = (
    "{{ value_json.one_in if value_json.one_in is defined else "
    "[1, (value_json.figures.templates / 2 ** value_json.bits) | round | int] | max }}"
)
_BUDGET_USED = (
    "{{ value_json.budget_share if value_json.budget_share is defined else "
    "(100 * [value_json.bits, 0] | max / value_json.budget) | round(1) }}"
)
_BUDGET_STATE = (
    "{{ value_json.budget_state if value_json.budget_state is defined else "
    + repr(dict(BUDGET_WORDS))
    + "[value_json.state] }}"
)
