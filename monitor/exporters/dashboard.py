"""The Lovelace dashboard of a household, from the same discovery configs Home Assistant reads.

Every entity voxmeter publishes sets its ``object_id``, so its entity id is predictable:
``<component>.voxmeter_<node>_<object id>`` made lowercase, every run of other characters an
``_`` (Home Assistant's slugify). :func:`lovelace` builds one view: the daemon (online, speech
heard, protection), one budget gauge and figures card per member, the members' disclosure over
the last day, the unrecognised voices (a Markdown card that lists whichever are shown now), and
one card per room. ``deploy/homeassistant/dashboard.yaml`` is this function's output for an
example household; a test keeps the two the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from monitor.exporters.discovery import Discovery, Entity, room_name, safe_id
from monitor.exporters.words import STRANGER

DAY_HOURS = 24


def slug(text: str) -> str:
    """Home Assistant's slugify of an ASCII object id: lowercase, other runs as ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def entity_id(entity: Entity) -> str:
    """The entity id Home Assistant gives a new entity of this config."""
    return f"{entity.component}.{slug(entity.config['object_id'])}"


def _ids(discovery: Discovery, entities: list[Entity]) -> dict[str, str]:
    """Object id → entity id."""
    return {e.object_id: entity_id(e) for e in entities}


def _member_cards(discovery: Discovery, alias: str) -> list[dict[str, Any]]:
    ids = _ids(discovery, discovery.speaker_entities(alias))
    base = safe_id(alias)
    gauge = {
        "type": "gauge",
        "entity": ids[f"{base}_budget_used"],
        "name": f"{alias}: budget used",
        "min": 0,
        "max": 100,
        "severity": {"green": 0, "yellow": 80, "red": 100},
        "needle": True,
    }
    figures = {
        "type": "entities",
        "title": alias,
        "entities": [
            {"entity": ids[f"{base}_budget"], "name": "Budget"},
            {"entity": ids[f"{base}_disclosure"], "name": "Disclosure now"},
            {"entity": ids[f"{base}_highest"], "name": "Highest this period"},
            {"entity": ids[f"{base}_one_in"], "name": "As identifying as 1 in"},
        ],
    }
    return [gauge, figures]


def _strangers_card(discovery: Discovery) -> dict[str, Any]:
    """Whichever unrecognised voices Home Assistant shows now (their number varies)."""
    prefix = f"sensor.{slug(f'voxmeter_{discovery.node_id}_unknown')}_"
    content = (
        "{% set voices = states.sensor | selectattr('entity_id', 'search', '^"
        + prefix
        + "[0-9]+_disclosure$') | list %}"
        "{% for s in voices | sort(attribute='name') %}"
        "**{{ s.name | replace(' disclosure now', '') | replace('"
        + f"voxmeter {discovery.device_id} "
        + "', '') }}**: {{ s.state }} bits, "
        "as identifying as {{ s.attributes['Identifying as'] }}, "
        "{{ s.attributes['Budget state'] }}\n\n"
        "{% else %}No unrecognised voice this period.{% endfor %}"
    )
    return {"type": "markdown", "title": f"{STRANGER}s", "content": content}


def lovelace(discovery: Discovery, members: Sequence[str]) -> dict[str, Any]:
    """The dashboard (Lovelace config, as YAML or the storage API takes it)."""
    device = _ids(discovery, discovery.device_entities())
    node = slug(f"voxmeter_{discovery.node_id}")
    daemon = [
        {"entity": device["online"], "name": "Online"},
        {"entity": device["speech_seconds"], "name": "Speech heard this period"},
        {"entity": f"switch.{node}_protection", "name": "Protection"},
        {"entity": f"binary_sensor.{node}_protecting", "name": "Protecting"},
        {"entity": f"sensor.{node}_protection_status", "name": "Why"},
        {"entity": device["reference_set"], "name": "Figure beyond the reference"},
    ]
    cards: list[dict[str, Any]] = [
        {"type": "entities", "title": f"voxmeter {discovery.device_id}", "entities": daemon}
    ]
    for alias in members:
        cards += _member_cards(discovery, alias)
    cards.append(
        {
            "type": "history-graph",
            "title": "Disclosure today",
            "hours_to_show": DAY_HOURS,
            "entities": [
                _ids(discovery, discovery.speaker_entities(a))[f"{safe_id(a)}_{suffix}"]
                for a in members
                for suffix in ("disclosure", "highest")
            ],
        }
    )
    cards.append(_strangers_card(discovery))
    for source in discovery.sources:
        speech, last, media, _ = _ids(discovery, discovery.source_entities(source)).values()
        rows = [
            {"entity": speech, "name": "Speech heard this period"},
            {"entity": last, "name": "Last voice heard"},
            {"entity": media, "name": "Television or radio"},
        ]
        cards.append({"type": "entities", "title": room_name(source), "entities": rows})
    view = {"title": "Household", "path": "household", "cards": cards}
    return {"title": "Household", "views": [view]}


EXAMPLE = {
    "device": "home",
    "members": ("member-1", "member-2"),
    "rooms": ("kitchen", "living-room"),
}
"""The household of ``deploy/homeassistant/dashboard.yaml``."""


def render(device: str, members: Sequence[str], rooms: Sequence[str], *, node_id: str = "") -> str:
    """The dashboard as YAML, for a daemon ``device`` (its ``daemon.device_id``), its members'
    aliases and its named sources."""
    from monitor.exporters.mqtt import Topics
    from monitor.settings.sections import HomeAssistantSettings

    discovery = Discovery(
        HomeAssistantSettings(discovery=True, node_id=node_id),
        Topics(f"voxmeter/{device}"),
        device,
        sources=dict.fromkeys(rooms, "wyoming-proxy"),
    )
    header = (
        "# voxmeter's Home Assistant dashboard (docs/homeassistant-dashboard.md); made by\n"
        f"# python -m monitor.exporters.dashboard --device {device}"
        + "".join(f" --member {m}" for m in members)
        + "".join(f" --room {r}" for r in rooms)
        + "\n"
    )
    return header + "\n".join(to_yaml(lovelace(discovery, members))) + "\n"


def to_yaml(value: Any, indent: str = "") -> list[str]:
    """Block-style YAML lines of JSON-like data (strings double-quoted, as JSON writes them:
    valid YAML, and no dependency for a file this plain)."""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines += [f"{indent}{key}:", *to_yaml(item, indent + "  ")]
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
        return lines
    if isinstance(value, list):
        lines = []
        for item in value:
            block = to_yaml(item, indent + "  ")
            lines += [f"{indent}- {block[0].lstrip()}", *block[1:]]
        return lines
    return [f"{indent}{_scalar(value)}"]


def _scalar(value: Any) -> str:
    if isinstance(value, dict | list):
        return "{}" if isinstance(value, dict) else "[]"
    return json.dumps(value, ensure_ascii=False)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m monitor.exporters.dashboard --device ID --member ALIAS ... --room NAME ...``"""
    import argparse

    parser = argparse.ArgumentParser(description="Print a Lovelace dashboard for a household.")
    parser.add_argument("--device", required=True, help="daemon.device_id (or the host name)")
    parser.add_argument("--node-id", default="", help="homeassistant.node_id, when set")
    parser.add_argument("--member", action="append", default=[], help="a member's alias")
    parser.add_argument("--room", action="append", default=[], help="a named source")
    args = parser.parse_args(argv)
    print(render(args.device, args.member, args.room, node_id=args.node_id), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
