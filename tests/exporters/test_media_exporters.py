"""A room's television or radio in the exporters: one Home Assistant entity per source on a real
mosquitto (never an "Unrecognised voice"), and its speech in Prometheus, scraped over HTTP."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from monitor.events.messages import SourceCounts
from monitor.exporters.discovery import source_state_topic
from tests.exporters.exporter_events import started, stats
from tests.exporters.test_exporter_homeassistant import (
    check_config,
    configs,
    exporters,
    handle,
    household,
    render,
    retained,
)
from tests.exporters.test_exporter_mqtt import TOPICS, run, subscribed
from tests.exporters.test_exporter_prometheus import make_exporter
from tests.realparts.mosquitto import MosquittoBroker

ROOM = "living-room"


def playing(seconds: float, on: bool) -> SourceCounts:
    return SourceCounts(600.0, 500.0, 0.0, streams=1, media_seconds=seconds, media_playing=on)


@pytest.mark.mosquitto
def test_a_rooms_television_is_one_entity_playing_and_its_speech_this_period(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    state = source_state_topic(TOPICS, ROOM)

    def shown(sub: object) -> dict[str, str]:
        found = {t: c for t, c in configs(sub).items() if c and "_media" in t}  # type: ignore[arg-type]
        payload = retained(sub, state) or b"{}"  # type: ignore[arg-type]
        return {t.split("/")[1]: render(c["value_template"], payload) for t, c in found.items()}

    async def scenario() -> None:
        with household(tmp_path / "v.db") as store:
            async with (
                subscribed(mosquitto, "#") as sub,
                exporters(mosquitto, store, sources={ROOM: "pulse"}) as pair,
            ):
                await handle(pair, started())
                await sub.wait(lambda: len(shown(sub)) == 2)
                for topic, config in configs(sub).items():
                    if config and "_media" in topic:
                        check_config(topic, config)
                        assert config["name"].startswith("Television or radio")
                        assert config["device"]["suggested_area"] == "Living room"
                assert shown(sub) == {"binary_sensor": "OFF", "sensor": "0.0"}
                await handle(pair, replace(stats(100, 90, 0.0), sources={ROOM: playing(90, True)}))
                await handle(
                    pair, replace(stats(200, 180, 0.0), sources={ROOM: playing(180, True)})
                )
                await sub.wait(lambda: shown(sub) == {"binary_sensor": "ON", "sensor": "3.0"})
                await handle(
                    pair, replace(stats(300, 180, 0.0), sources={ROOM: playing(180, False)})
                )
                await sub.wait(lambda: shown(sub)["binary_sensor"] == "OFF")
                assert json.loads(retained(sub, state) or b"{}")["media_speech_seconds"] == 180
                names = {c["name"] for c in configs(sub).values() if c}
                assert not [n for n in names if "Unrecognised" in n]  # no stranger shown

    run(scenario)


def test_a_rooms_television_speech_is_counted_in_prometheus() -> None:
    exporter, registry = make_exporter()
    exporter.apply(replace(stats(100, 90, 0.0), sources={ROOM: playing(12.5, True)}))
    exporter.apply(replace(stats(200, 180, 0.0), sources={ROOM: playing(40.0, True)}))
    server = exporter.start_server()
    try:
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as reply:
            text = reply.read().decode()
    finally:
        exporter.stop_server()
    assert f'voxmeter_source_media_seconds_total{{source="{ROOM}"}} 40.0' in text
    assert (
        registry.get_sample_value("voxmeter_source_unattributed_seconds_total", {"source": ROOM})
        == 0
    )
    assert server.socket.fileno() == -1
