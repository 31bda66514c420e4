"""The daemon as built from config, with Home Assistant discovery on a real mosquitto: real corpus
speech of the household member makes their entities appear with the daemon's own figures; and a
Wyoming service that is not there is one line and exit status 2 through the real entry point."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from monitor.audio.file import FileSource
from monitor.daemon.build import build_pipeline
from monitor.daemon.pipeline import Pipeline
from monitor.exporters.words import BUDGET_WORDS
from monitor.settings.config import load_config
from monitor.store.database import open_store
from tests.daemon_corpus import PROFILE, DaemonCorpus, reference_count
from tests.exporters.test_exporter_homeassistant import configs, render, retained
from tests.exporters.test_exporter_mqtt import Subscriber, subscribed
from tests.realparts.mosquitto import MosquittoBroker, free_port

REPO = Path(__file__).resolve().parents[2]
DEVICE = "lounge"


def finished(pipeline: Pipeline, sub: Subscriber) -> bool:
    """All audio read, every queue empty, and the retained topics show the last figures."""
    if pipeline.audio_seconds < pipeline_duration(pipeline) - 0.05 or PROFILE not in pipeline.last:
        return False
    if any(not queue.empty() for queue in pipeline.queues.values()):
        return False
    state = retained(sub, f"voxmeter/{DEVICE}/speakers/{PROFILE}/state")
    device = retained(sub, f"voxmeter/{DEVICE}/device")
    if state is None or device is None:
        return False
    speech = sum(e.pooled_speech_seconds for e in pipeline.last.values())
    return bool(
        json.loads(state)["windows"] == pipeline.last[PROFILE].windows
        and json.loads(device)["speech_seconds"] == pytest.approx(speech, abs=1e-3)
    )


def pipeline_duration(pipeline: Pipeline) -> float:
    assert isinstance(pipeline.source, FileSource)
    return float(sf.info(pipeline.source.path).duration)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.mosquitto
def test_daemon_publishes_entities_carrying_its_figures(
    daemon_corpus: DaemonCorpus, daemon_db: Path, mosquitto: MosquittoBroker
) -> None:
    config = load_config(
        None,
        [
            f"daemon.source=file:{daemon_corpus.known_stream}",
            "audio.pace=fast",
            "daemon.exit_at_end=false",
            f"daemon.device_id={json.dumps(DEVICE)}",
            "prometheus.enabled=false",
            "mqtt.enabled=true",
            f"mqtt.port={mosquitto.port}",
            "homeassistant.discovery=true",
            "homeassistant.discovery_prefix=ha-test",
        ],
    )
    disclosure = f"ha-test/sensor/{DEVICE}/{PROFILE}_disclosure/config"

    async def scenario() -> None:
        with open_store(daemon_db) as store:
            pipeline = build_pipeline(config, store=store)
            async with subscribed(mosquitto, "#") as sub:
                run = asyncio.create_task(pipeline.run())
                await sub.wait(lambda: disclosure in configs(sub), 300)
                # the whole stream read and scored, and its last figures published
                await sub.wait(lambda: finished(pipeline, sub), 300)
                last = pipeline.last[PROFILE]
                found = configs(sub)
                shown = {}
                for topic, entity in found.items():
                    assert entity is not None and entity["device"]["name"] == f"voxmeter {DEVICE}"
                    if "state_topic" not in entity:  # a button: commands only
                        continue
                    payload = retained(sub, entity["state_topic"])
                    assert payload, entity["state_topic"]
                    shown[topic.split("/")[3]] = render(entity["value_template"], payload)
                assert float(shown[f"{PROFILE}_disclosure"]) == last.budget_figure_bits
                assert shown[f"{PROFILE}_budget"] == BUDGET_WORDS[last.state]
                assert shown["online"] == "online"
                assert int(shown["templates"]) == reference_count(daemon_corpus.aliases)
                pipeline.stop("test")
                assert (await run).stop_reason == "test"

    asyncio.run(asyncio.wait_for(scenario(), 600))


@pytest.mark.slow  # the daemon loads its models before it opens the source
@pytest.mark.corpus
def test_a_missing_wyoming_service_is_one_line_and_exit_2(daemon_db: Path) -> None:
    source = f"wyoming://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--db", str(daemon_db), "--source", source,
         "--set", "prometheus.enabled=false"],
        capture_output=True, text=True, timeout=300, cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("voxmeter: error")]
    assert lines == [f"voxmeter: error: {source}: cannot connect (Connection refused)"], (
        result.stderr[-2000:]
    )
    assert "Traceback" not in result.stderr
