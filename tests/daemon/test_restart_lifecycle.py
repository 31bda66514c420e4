"""What a restart brings back from the ledger: expired ``unknown-N`` tracks stay
expired, this period's speech seconds carry on, and the retained device figures are republished
at start from the ledger rather than zeroed or left stale until the next window."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from monitor.daemon.build import build_pipeline
from monitor.events.messages import TrackExpired, TrackRestored
from monitor.exporters.mqtt import MqttExporter
from monitor.ledger.budget import period_start
from monitor.ledger.writer import expired_on_restart
from monitor.settings.config import load_config
from monitor.store.database import open_store
from monitor.store.ledger import TrackPeriod
from tests.daemon_corpus import DaemonCorpus
from tests.exporters.exporter_events import scored, started
from tests.exporters.test_exporter_homeassistant import exporters, handle, household, retained
from tests.exporters.test_exporter_mqtt import (
    DEVICE,
    TOPICS,
    run,
    running,
    settings_for,
    subscribed,
)
from tests.realparts.mosquitto import MosquittoBroker

NOW = 1_800_000_000.0


def heard(track: str, seconds_ago: float | None) -> TrackPeriod:
    end = None if seconds_ago is None else NOW - seconds_ago
    return TrackPeriod(track, NOW - 3600, 1, 2.0, None, end)


def test_tracks_idle_too_long_or_beyond_the_cap_stay_expired() -> None:
    tracks = [heard("unknown-1", 400), heard("unknown-2", 10), heard("unknown-3", 20)]
    tracks.append(heard("unknown-4", 30))
    tracks.append(heard("unknown-5", None))  # no window end: nothing to resume
    gone = expired_on_restart(tracks, now_unix=NOW, idle_seconds=300, max_tracks=2)
    assert gone == {"unknown-1", "unknown-4", "unknown-5"}  # idle; 3rd newest; never heard
    assert expired_on_restart(tracks[1:4], now_unix=NOW, idle_seconds=300, max_tracks=16) == set()


@pytest.mark.corpus
@pytest.mark.mosquitto
def test_a_restart_keeps_expired_tracks_expired_and_the_period_speech(
    daemon_corpus: DaemonCorpus, daemon_db: Path, mosquitto: MosquittoBroker
) -> None:
    now = time.time()
    period = period_start(now, 86400.0)
    with open_store(daemon_db) as store:
        enrolled = daemon_corpus.aliases[0]
        pooled = {f: store.template(enrolled, f) for f in ("f0", "phone", "embedding")}
        for track, seconds_ago, speech in (("unknown-1", 900.0, 4.0), ("unknown-2", 30.0, 3.5)):
            figures = dataclasses.replace(
                scored(track, unknown=True).figures,
                period_start_unix=period,
                window_end_unix=now - seconds_ago,
            )
            store.record_window(
                track,
                period_start=period,
                window_start=now - seconds_ago - 5,
                window_end=now - seconds_ago,
                speech_seconds=speech,
                pooled=pooled,
                figures=figures.to_json(),
            )
    config = load_config(
        None,
        [f"daemon.db={daemon_db}", "prometheus.enabled=false", "tracker.track_idle_seconds=300"],
    )
    with open_store(daemon_db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[])
        events = pipeline.restore()
        assert [e.track for e in events if isinstance(e, TrackExpired)] == ["unknown-1"]
        assert "unknown-1" not in pipeline.track_scorer.tracks  # not resumed: stays expired
        assert "unknown-2" in pipeline.track_scorer.tracks
        restored = [e.figures.track for e in events if isinstance(e, TrackRestored)]
        assert "unknown-1" not in restored
        assert pipeline.period_speech_seconds == pytest.approx(7.5)  # both tracks' speech

    # On the broker: the last run left unknown-1's retained figures; the restart clears them.
    async def scenario() -> None:
        gone, kept = TOPICS.speaker_state("unknown-1"), TOPICS.speaker_state("unknown-2")
        with open_store(daemon_db) as store:
            plain = MqttExporter(settings_for(mosquitto), store=store, device_id=DEVICE)
            async with running(plain):
                await plain.handle(scored("unknown-1", unknown=True))
                await plain.handle(scored("unknown-2", unknown=True))
                async with subscribed(mosquitto, "#") as sub:
                    await sub.wait(lambda: bool(retained(sub, gone) and retained(sub, kept)))
            # Listening before the restarted exporter connects: its clear deletes the retained
            # message, so a subscriber that came later found nothing to wait for (the suite
            # failed so whenever the exporter's connection won the race, as on a loaded VM).
            restarted = MqttExporter(settings_for(mosquitto), store=store, device_id=DEVICE)
            async with subscribed(mosquitto, "#") as sub:
                await sub.settled()
                assert retained(sub, gone)  # the last run's figures, still retained
                async with running(restarted):
                    for event in events:  # what the restarted daemon sends its exporters
                        await restarted.handle(event)
                    await sub.wait(lambda: retained(sub, gone) == b"")
            async with subscribed(mosquitto, "#") as late:
                await late.settled()
                assert retained(late, gone) is None  # stays gone
                assert retained(late, kept)  # the live one is still shown

    run(scenario)


@pytest.mark.mosquitto
def test_device_figures_are_republished_from_the_ledger_at_start(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    async def scenario() -> None:
        with household(tmp_path / "v.db") as store:
            device = f"{TOPICS.prefix}/device"
            async with subscribed(mosquitto, "#") as sub, exporters(mosquitto, store) as pair:
                await handle(pair, dataclasses.replace(started(), speech_seconds=42.5))
                await sub.wait(lambda: retained(sub, device) is not None)
                assert json.loads(retained(sub, device) or b"")["speech_seconds"] == 42.5
                await handle(pair, scored("member-a", speech_seconds=3.0))
                await sub.wait(
                    lambda: json.loads(retained(sub, device) or b"{}").get("speech_seconds") == 45.5
                )
                later = scored("member-a", index=1, speech_seconds=2.0)
                next_period = dataclasses.replace(
                    later,
                    figures=dataclasses.replace(later.figures, period_start_unix=NOW + 86400),
                )
                await handle(pair, next_period)  # a new budget period counts afresh
                await sub.wait(
                    lambda: json.loads(retained(sub, device) or b"{}").get("speech_seconds") == 2.0
                )

    run(scenario)
