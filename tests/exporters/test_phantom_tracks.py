"""Phantom-track control against a real mosquitto: an ``unknown-N`` track appears in
Home Assistant only once it holds ``[tracker] show_seconds`` of speech in ``show_windows``
windows; a short fragment that expires, or merges into another track, never shows — while its
figures still reach MQTT (and the ledger), so its disclosure is counted, never lost."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry as Registry

from monitor.errors import ConfigError
from monitor.events.messages import TrackExpired
from monitor.exporters import build_exporters
from monitor.settings.config import load_config
from tests.exporters.exporter_events import scored, started
from tests.exporters.test_exporter_homeassistant import PREFIX, configs, household, retained
from tests.exporters.test_exporter_mqtt import DEVICE, TOPICS, run, subscribed
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = pytest.mark.mosquitto


#: The entities of one track: disclosure now, highest this period, 1 in K, budget used, budget.
PER_TRACK = 5


def _entities(found: dict[str, object], track: str) -> list[str]:
    """Config topics of ``track``'s entities ever published (a clearing one included)."""
    return sorted(t for t in found if f"/{track}_" in t)


def test_a_short_unknown_fragment_never_shows_and_a_lasting_track_does(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    config = load_config(
        None,
        [
            "mqtt.enabled=true",
            f'mqtt.host="{mosquitto.host}"',
            f"mqtt.port={mosquitto.port}",
            "homeassistant.discovery=true",
            f'homeassistant.discovery_prefix="{PREFIX}"',
            "tracker.show_seconds=6.0",
            "tracker.show_windows=2",
        ],
    )

    async def scenario() -> None:
        with household(tmp_path / "v.db") as store:
            built = build_exporters(
                config, store=store, db_path=tmp_path / "v.db", device_id=DEVICE,
                registry=Registry(),
            )  # fmt: skip
            pair = [e for e in built if e.name in ("mqtt", "homeassistant")]
            assert len(pair) == 2
            tasks = [asyncio.create_task(e.run()) for e in pair]  # type: ignore[attr-defined]
            try:
                async with subscribed(mosquitto, "#") as sub:

                    async def handle(event: object) -> None:
                        for exporter in pair:
                            await exporter.handle(event)  # type: ignore[arg-type]

                    await handle(started())
                    # a member shows at once; a fragment of one 3 s window expires unseen
                    await handle(scored("member-a", combined_bits=1.0))
                    await handle(scored("unknown-1", unknown=True, combined_bits=4.0))
                    fragment_state = TOPICS.speaker_state("unknown-1")
                    await sub.wait(lambda: retained(sub, fragment_state) is not None)
                    await handle(TrackExpired("unknown-1", "unknown", 30.0, 1.8e9))
                    # another fragment (2.5 s) merges into unknown-2 before it shows
                    await handle(scored("unknown-4", unknown=True, speech_seconds=2.5))
                    await handle(
                        TrackExpired("unknown-4", "unknown", 33.0, 1.8e9, merged_into="unknown-2")
                    )
                    # unknown-2: 3 s (held back), then 6 s over two windows (shows)
                    await handle(scored("unknown-2", unknown=True, combined_bits=2.0))
                    assert not _entities(configs(sub), "unknown-2")
                    await handle(scored("unknown-2", unknown=True, index=1, combined_bits=2.5))
                    await sub.wait(lambda: len(_entities(configs(sub), "unknown-2")) == PER_TRACK)
                    await sub.wait(lambda: retained(sub, fragment_state) == b"")
                    found = configs(sub)
                    assert all(found[t] is not None for t in _entities(found, "unknown-2"))
                    assert len(_entities(found, "member-a")) == PER_TRACK
                    # the fragments never had an entity, not even an empty (clearing) config
                    assert _entities(found, "unknown-1") == _entities(found, "unknown-4") == []
                    # yet the fragment's figures reached MQTT before it expired
                    states = [m.payload for m in sub.messages if m.topic.value == fragment_state]
                    assert states[0] and b"4.0" in states[0]  # type: ignore[operator]
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    run(scenario)


def test_show_settings_are_checked() -> None:
    assert load_config(None, []).tracker.show_seconds == 6.0
    with pytest.raises(ConfigError, match=r"tracker\.show_windows"):
        load_config(None, ["tracker.show_windows=0"])
    with pytest.raises(ConfigError, match=r"tracker\.false_inconsistent_rate"):
        load_config(None, ["tracker.false_inconsistent_rate=0.5"])
