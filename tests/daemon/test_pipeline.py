"""The whole pipeline on real corpus speech, file source read as fast as possible."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from monitor.daemon.config import load_config
from monitor.daemon.events import (
    FEATURES,
    MEASURES,
    DaemonEvent,
    DaemonStarted,
    DaemonStopping,
    WindowScored,
)
from monitor.daemon.pipeline import build_pipeline
from monitor.store.database import open_store

pytestmark = pytest.mark.corpus


class Recorder:
    """An exporter that keeps every event (a hand-written fake, not a mock)."""

    name = "recorder"

    def __init__(self) -> None:
        self.events: list[DaemonEvent] = []

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def handle(self, event: DaemonEvent) -> None:
        self.events.append(event)

    def scored(self) -> list[WindowScored]:
        return [e for e in self.events if isinstance(e, WindowScored)]


def run_file(db: Path, stream: Path, *overrides: str) -> tuple[Recorder, object]:
    config = load_config(
        None,
        [
            f"daemon.source=file:{stream}",
            "audio.pace=fast",
            f"daemon.db={db}",
            "prometheus.enabled=false",
            *overrides,
        ],
    )
    recorder = Recorder()
    with open_store(db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[recorder])
        summary = asyncio.run(pipeline.run())
    return recorder, summary


def test_known_speaker_windows_reach_the_ledger(daemon_corpus, daemon_db) -> None:
    recorder, summary = run_file(daemon_db, daemon_corpus.known_stream)
    assert summary.stop_reason == "end of input"
    assert isinstance(recorder.events[0], DaemonStarted)
    assert isinstance(recorder.events[-1], DaemonStopping)
    scored = recorder.scored()
    assert len(scored) >= 2
    assert summary.windows == len(scored)
    local = [e for e in scored if e.kind == "local"]
    assert local, "the enrolled speaker's voice should match the local profile"
    for event in local:
        assert event.track == "home-1"
        assert event.identity == daemon_corpus.profile_identity
        pairs = {(d.feature, d.measure) for d in event.disclosures}
        assert pairs == {(f, m) for f in FEATURES for m in MEASURES}
        assert event.ceiling_bits == pytest.approx(3.0)
        assert all(d.cumulative_bits <= 3.0 + 1e-9 for d in event.disclosures)
    assert [e.windows for e in local] == list(range(1, len(local) + 1))
    with open_store(daemon_db) as store:
        period = scored[0].period_start_unix
        rows = store.windows("home-1", period)
        assert len(rows) == len(local)
        kept = store.track_period("home-1", period)
        assert kept.windows == len(local)
        assert kept.speech_seconds == pytest.approx(sum(e.window_speech_seconds for e in local))
        assert set(kept.pooled) == {"f0", "phone", "embedding"}
        last = rows[-1].figures["disclosures"]["combined.lid"][0]
        assert last == pytest.approx(local[-1].bits("combined", "lid"))
