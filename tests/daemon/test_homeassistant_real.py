"""Our MQTT discovery read by a real Home Assistant (2025.4) through a real mosquitto.

Home Assistant's MQTT integration is configured through its config flow API; the daemon's
exporters publish as in a run. Entities appear with our figures, follow a new window, and vanish
when their track expires or their speaker leaves the household, with no warning or error line
about our entities in Home Assistant's log (template errors on an empty state were the symptom
of clearing states before configs)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from monitor.events.messages import TrackExpired
from tests.exporters.exporter_events import N_TEMPLATES, scored, started
from tests.exporters.test_exporter_homeassistant import exporters, handle, household
from tests.exporters.test_exporter_mqtt import run
from tests.realparts.homeassistant import HomeAssistant, wait_until
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto, pytest.mark.homeassistant]

PREFIX = "homeassistant"  # Home Assistant's own default discovery prefix
SYMPTOMS = ("voxmeter", "value_json", "Error parsing value", "Erroneous JSON", "testdev")


def connect_mqtt(ha: HomeAssistant, broker: MosquittoBroker) -> None:
    """The MQTT integration set up as a user does: the config flow, broker and port."""
    result = ha.config_flow("mqtt", {"broker": broker.host, "port": broker.port})
    assert result["type"] == "create_entry", result
    assert result["result"]["state"] == "loaded", result


def ours(ha: HomeAssistant) -> dict[str, dict[str, Any]]:
    """Our device's entities as Home Assistant shows them: friendly name → state object."""
    return {
        s["attributes"]["friendly_name"]: s
        for s in ha.states().values()
        if str(s["attributes"].get("friendly_name", "")).startswith("voxmeter testdev")
    }


def shown(ha: HomeAssistant, name: str) -> str | None:
    state = ours(ha).get(f"voxmeter testdev {name}")
    return None if state is None else str(state["state"])


def test_entities_appear_update_and_vanish_without_a_log_line(
    home_assistant: HomeAssistant, mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    ha = home_assistant
    connect_mqtt(ha, mosquitto)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def until(name: str, value: str | None, timeout: float = 60.0) -> None:
            await loop.run_in_executor(
                None, wait_until, lambda: shown(ha, name) == value, timeout, f"{name} = {value}"
            )

        with household(tmp_path / "v.db") as store:
            async with exporters(mosquitto, store, prefix=PREFIX) as pair:
                await handle(pair, started())
                await handle(pair, scored("member-a", combined_bits=4.2, state="warning"))
                await handle(pair, scored("unknown-3", unknown=True, combined_bits=5.6))
                await until("Unrecognised voice 1 disclosure now", "5.6")
                await until("member-a budget", "Nearly used")
                await until("Reference voices", str(N_TEMPLATES))
                await until("Speech heard this period", "0.1")  # two windows of 3 s, in minutes
                await until("Online", "on")
                assert shown(ha, "member.b disclosure now") == "unknown"  # a member not heard yet

                await handle(pair, scored("unknown-3", index=1, unknown=True, combined_bits=6.1))
                await until("Unrecognised voice 1 disclosure now", "6.1")
                await until("Speech heard this period", "0.15")

                await handle(pair, TrackExpired("unknown-3", "unknown", 30.0, 1.8e9))
                await until("Unrecognised voice 1 disclosure now", None)
                await until("Unrecognised voice 1 budget", None)
                await asyncio.sleep(2.0)  # anything HA would log about late messages, logged
            # the daemon stops: HA shows it offline, entities unavailable
            await until("Online", "off")
            await until("member-a disclosure now", "unavailable")

            # member.b leaves the household; the next run clears its entities
            store.remove_local_profile("member.b")
            async with exporters(mosquitto, store, prefix=PREFIX) as pair:
                await handle(pair, started())
                await until("member.b disclosure now", None)
                await until("member.b budget", None)
                await until("member-a disclosure now", "4.2")
                await asyncio.sleep(2.0)

    run(scenario)
    assert ha.problems(*SYMPTOMS) == []
