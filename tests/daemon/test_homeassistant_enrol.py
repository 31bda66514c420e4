"""Enrolment as a household does it in a real Home Assistant (2025.4): the alias typed into the
*New member's alias* text and *Enrol the next voice* pressed through Home Assistant's own API
(its ``text.set_value`` and ``button.press`` services, which publish to our command topics), a
Wyoming client streams one corpus speaker's speech through the daemon's proxy (to a real
offline speech-to-text service, as a satellite asks for a transcript), and the new member's entities
appear in Home Assistant's entity registry; in a real headless Chromium, the device page with
the enrolment entities, whose screenshots the documentation shows (docs/images/homeassistant/,
written there only with ``VOXMETER_SCREENSHOTS=docs``)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.daemon.enrol_daemon import DEVICE, enrol_daemon, newcomers, speech_of
from tests.daemon.test_homeassistant_real import connect_mqtt
from tests.daemon_corpus import DaemonCorpus
from tests.realparts.browser import Browser
from tests.realparts.homeassistant import HomeAssistant, wait_until
from tests.realparts.mosquitto import MosquittoBroker
from tests.realparts.wyoming_upstreams import serve

pytestmark = [
    pytest.mark.slow,
    pytest.mark.corpus,
    pytest.mark.mosquitto,
    pytest.mark.homeassistant,
]

REPO = Path(__file__).resolve().parents[2]
DOC_SCREENS = REPO / "docs" / "images" / "homeassistant"
NODE = f"voxmeter_{DEVICE}"
T = TypeVar("T")


async def blocking(function: Callable[..., T], *args: Any) -> T:
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def shows(ha: HomeAssistant, entity_id: str, wanted: str, timeout: float = 120) -> None:
    def there() -> bool:
        found = ha.states().get(entity_id)
        return found is not None and str(found["state"]).startswith(wanted)

    wait_until(there, timeout, f"{entity_id} = {wanted}")


def registered(ha: HomeAssistant) -> set[str]:
    (listed,) = ha.commands({"type": "config/entity_registry/list"})
    return {e["entity_id"] for e in listed if str(e["unique_id"]).startswith(NODE)}


def test_enrol_from_home_assistant_and_the_device_page(
    home_assistant_frontend: HomeAssistant,
    mosquitto: MosquittoBroker,
    chromium: Browser,
    daemon_corpus: DaemonCorpus,
    daemon_db: Path,
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path: Path,
) -> None:
    ha = home_assistant_frontend
    connect_mqtt(ha, mosquitto)
    shots = DOC_SCREENS if os.environ.get("VOXMETER_SCREENSHOTS") == "docs" else tmp_path
    taken = [*daemon_corpus.aliases, daemon_corpus.stranger]
    reader = newcomers(corpus_root, corpus_speakers, taken)[0]
    enrolling = speech_of(corpus_root, reader, 0, 9, tmp_path / "reader.wav")
    progress = f"sensor.{NODE}_enrolment"

    def device_page(name: str, *words: str) -> None:
        (devices,) = ha.commands({"type": "config/device_registry/list"})
        device = next(d for d in devices if d["name"] == f"voxmeter {DEVICE}")
        chromium.home_assistant(ha.url, ha.token, ha.refresh_token)
        chromium.open(f"{ha.url}/config/devices/device/{device['id']}")
        chromium.wait_for_text("New member's alias", "Enrol the next voice", *words)
        chromium.screenshot(shots / name)

    def press() -> None:
        ha.request("POST", "/api/services/text/set_value",
                   {"entity_id": f"text.{NODE}_enrol_alias", "value": "reader"})  # fmt: skip
        shows(ha, f"text.{NODE}_enrol_alias", "reader")
        ha.request(
            "POST", "/api/services/button/press", {"entity_id": f"button.{NODE}_enrol_start"}
        )
        shows(ha, progress, "Listening")

    async def scenario() -> None:
        server, upstream = await serve("asr")  # a real offline speech-to-text service
        proxy = f"wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:{upstream}"
        overrides = ["homeassistant.discovery_prefix=homeassistant", f"daemon.source={proxy}"]
        async with enrol_daemon(daemon_db, mosquitto, overrides) as daemon:
            await daemon.serving()
            await blocking(shows, ha, progress, "1 member enrolled")
            await blocking(press)
            await blocking(device_page, "enrolment-listening.png", "Listening")
            await daemon.speak(enrolling)
            await blocking(shows, ha, progress, "Done: reader enrolled", 300)
            wanted = {f"sensor.{NODE}_reader_disclosure", f"button.{NODE}_reader_forget"}
            await blocking(wait_until, lambda: wanted <= registered(ha), 60, "reader's entities")
            await blocking(device_page, "enrolment-done.png", "Done: reader enrolled")
        await server.stop()

    asyncio.run(scenario())
    assert not ha.problems("voxmeter", "mqtt"), ha.problems("voxmeter", "mqtt")
