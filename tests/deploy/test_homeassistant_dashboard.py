"""The shipped Lovelace dashboard is the generator's output for the example household, reads as
YAML into the config Home Assistant stores, and names only entities our discovery creates."""

from __future__ import annotations

from pathlib import Path

import yaml

from monitor.exporters.dashboard import EXAMPLE, entity_id, lovelace, main, render
from monitor.exporters.discovery import Discovery
from monitor.exporters.mqtt import Topics
from monitor.settings.sections import HomeAssistantSettings

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "homeassistant" / "dashboard.yaml"


def example() -> tuple[Discovery, tuple[str, ...]]:
    device, members, rooms = EXAMPLE["device"], EXAMPLE["members"], EXAMPLE["rooms"]
    discovery = Discovery(
        HomeAssistantSettings(discovery=True),
        Topics(f"voxmeter/{device}"),
        str(device),
        sources=dict.fromkeys(rooms, "wyoming-proxy"),
    )
    return discovery, tuple(members)


def test_the_shipped_dashboard_is_the_generators_output() -> None:
    discovery, members = example()
    text = render(str(EXAMPLE["device"]), members, tuple(EXAMPLE["rooms"]))
    assert SHIPPED.read_text() == text, (
        "deploy/homeassistant/dashboard.yaml is stale: regenerate it with the command in its "
        "first lines"
    )
    assert yaml.safe_load(text) == lovelace(discovery, members)


def test_every_entity_of_the_dashboard_is_discovered() -> None:
    from monitor.exporters.protection import protection_entities

    discovery, members = example()
    entities = [
        *discovery.device_entities(),
        *protection_entities(discovery),
        *(e for m in members for e in discovery.speaker_entities(m)),
        *(e for s in discovery.sources for e in discovery.source_entities(s)),
    ]
    known = {entity_id(e) for e in entities}
    named: set[str] = set()

    def walk(value: object) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("entity"), str):
                named.add(value["entity"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, str) and "." in item:
                    named.add(item)
                else:
                    walk(item)

    walk(yaml.safe_load(SHIPPED.read_text()))
    assert named and named <= known, sorted(named - known)


def test_the_generator_prints_a_households_dashboard(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["--device", "flat", "--member", "p-1", "--room", "hall"]) == 0
    loaded = yaml.safe_load(capsys.readouterr().out)
    titles = [card.get("title") for card in loaded["views"][0]["cards"]]
    assert titles[0] == "voxmeter flat" and "p-1" in titles and "Hall" in titles
