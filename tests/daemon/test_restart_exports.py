"""After a restart every resumed speaker's series are back at once, with the values they had,
before anyone speaks again (``voxmeter_disclosure_bits`` included)."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.audio.stdin import StdinSource
from monitor.daemon.build import build_pipeline
from monitor.events.messages import Disclosure, TrackRestored, WindowScored
from monitor.exporters.prometheus import PrometheusExporter
from monitor.settings.config import load_config
from monitor.settings.sections import PrometheusSettings
from monitor.store.database import open_store
from tests.daemon.test_pipeline import Recorder

pytestmark = pytest.mark.corpus

PER_SPEAKER = (
    "voxmeter_disclosure_bits",
    "voxmeter_window_disclosure_bits",
    "voxmeter_composition_bound_bits",
    "voxmeter_budget_bits",
    "voxmeter_budget_state",
)


def speaker_samples(
    text: str, speaker: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Per-speaker gauge samples of one /metrics text: (name, labels) → value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in PER_SPEAKER and sample.labels.get("speaker") == speaker
    }


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


async def run_and_scrape(config, db: Path, source, *, wait_for: str | None) -> tuple[str, list]:
    """Run a pipeline with a real Prometheus exporter on a free port; scrape it once the
    ``wait_for`` speaker has series (or at end of input when None)."""
    exporter = PrometheusExporter(PrometheusSettings(port=0), db_path=db)
    recorder = Recorder()
    with open_store(db) as store:
        pipeline = build_pipeline(
            config, store=store, source=source, exporters=[exporter, recorder]
        )
        task = asyncio.create_task(pipeline.run())
        if wait_for is None:
            await task
            return generate_latest(exporter.registry).decode(), recorder.events
        deadline = time.monotonic() + 60
        labels = {"speaker": wait_for, "feature": "combined", "measure": "lid"}
        while exporter.registry.get_sample_value("voxmeter_disclosure_bits", labels) is None:
            assert time.monotonic() < deadline and not task.done(), "no restored series"
            await asyncio.sleep(0.05)
        text = await asyncio.to_thread(scrape, exporter.port)
        pipeline.stop("test")
        await task
        return text, recorder.events


def test_restart_exports_the_last_figures_before_new_speech(daemon_corpus, daemon_db) -> None:
    common = [f"daemon.db={daemon_db}", "prometheus.enabled=true"]
    first = load_config(
        None, [*common, f"daemon.source=file:{daemon_corpus.known_stream}", "audio.pace=fast"]
    )
    before, events = asyncio.run(run_and_scrape(first, daemon_db, None, wait_for=None))
    last = [
        e.figures for e in events if isinstance(e, WindowScored) and e.figures.track == "home-1"
    ][-1]
    expected = speaker_samples(before, "home-1")
    assert ("voxmeter_disclosure_bits", (("feature", "combined"), ("measure", "lid"),
            ("speaker", "home-1"))) in expected  # fmt: skip

    read_fd, write_fd = os.pipe()  # stdin that stays open and silent: no new speech
    try:
        second = load_config(None, [*common, "daemon.source=stdin"])
        with os.fdopen(read_fd, "rb", buffering=0) as stream:
            after, events = asyncio.run(
                run_and_scrape(second, daemon_db, StdinSource(stream=stream), wait_for="home-1")
            )
    finally:
        os.close(write_fd)
    assert not [e for e in events if isinstance(e, WindowScored)]
    (restored,) = [e for e in events if isinstance(e, TrackRestored)]

    def by_name(items: tuple[Disclosure, ...]) -> list[Disclosure]:
        return sorted(items, key=lambda d: (d.feature, d.measure))

    assert by_name(restored.figures.disclosures) == by_name(last.disclosures)
    assert restored.figures.windows == last.windows and restored.figures.state == last.state
    assert speaker_samples(after, "home-1") == pytest.approx(expected, rel=1e-12)
