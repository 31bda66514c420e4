"""Two tracks found to be one voice: the survivor pools both (its next figures are the whole
voice's), the ledger moves the windows and records the merge, and the retired track leaves
Prometheus and Home Assistant (a real mosquitto) as an expired one does."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from monitor.events.messages import TrackExpired
from monitor.features.base import Observation, get_feature
from monitor.ledger.budget import BudgetMachine
from monitor.ledger.writer import LedgerWriter
from monitor.scoring.evidence import TrackEvidence, TrackScorer
from monitor.settings.sections import BudgetSettings
from monitor.store.database import open_store
from tests.exporters.exporter_events import scored, started
from tests.exporters.test_exporter_homeassistant import (
    configs,
    exporters,
    handle,
    household,
    retained,
)
from tests.exporters.test_exporter_mqtt import TOPICS, run, subscribed
from tests.exporters.test_exporter_prometheus import _families, make_exporter
from tests.exporters.test_phantom_tracks import PER_TRACK
from tests.realparts.mosquitto import MosquittoBroker

PERIOD = 1_800_000_000.0
MERGED = TrackExpired("unknown-2", "unknown", 30.0, PERIOD + 40, merged_into="unknown-1")


def embedding(rng: np.random.Generator, seconds: float) -> Observation:
    v = rng.standard_normal(8)
    return Observation("embedding", v / np.linalg.norm(v), seconds)


def test_the_survivor_pools_the_retired_tracks_evidence(rng: np.random.Generator) -> None:
    feature = get_feature("embedding")
    scorer = TrackScorer(None, {"embedding": feature}, BudgetSettings().figure)  # type: ignore[arg-type]
    windows = [embedding(rng, s) for s in (3.0, 2.0, 3.0, 1.0)]
    for track, part, bits in (("unknown-1", windows[:2], 1.0), ("unknown-2", windows[2:], 2.5)):
        scorer.restore(
            TrackEvidence(
                track, "unknown", None, {"embedding": feature.pool(part)}, len(part),
                sum(w.seconds for w in part), bits,
            )
        )  # fmt: skip
    scorer.merge("unknown-2", "unknown-1")
    assert set(scorer.tracks) == {"unknown-1"}
    merged = scorer.tracks["unknown-1"]
    assert (merged.windows, merged.speech_seconds, merged.max_window_bits) == (4, 9.0, 2.5)
    # the two tracks' evidence pooled as the daemon pools a track's windows (seconds-weighted)
    both = feature.pool([feature.pool(windows[:2]), feature.pool(windows[2:])])
    np.testing.assert_allclose(merged.pooled["embedding"].values, both.values, atol=1e-12)
    assert merged.pooled["embedding"].seconds == 9.0


def test_the_ledger_records_the_merge_and_the_budget_forgets_the_track(tmp_path: Path) -> None:
    with open_store(tmp_path / "v.db") as store:
        for track in ("unknown-1", "unknown-2"):
            store.record_window(
                track, period_start=PERIOD, window_start=PERIOD + 1, window_end=PERIOD + 4,
                speech_seconds=3.0, pooled={"embedding": Observation("embedding", np.ones(4), 3)},
            )  # fmt: skip
        budget = BudgetMachine(BudgetSettings())
        budget.restore("unknown-2", "warning")
        writer = LedgerWriter(
            store, budget, budget_bits=5.0, measure=BudgetSettings().figure, templates=10,
            alert_topic="t/alerts", device_id="dev",
        )  # fmt: skip
        writer.period_start_unix = PERIOD
        writer.merge("unknown-2", "unknown-1")
        assert store.tracks(PERIOD) == ["unknown-1"]
        assert [m.retired for m in store.merges(PERIOD)] == ["unknown-2"]
        assert "unknown-2" not in budget.states


def test_prometheus_drops_the_retired_tracks_series() -> None:
    exporter, registry = make_exporter()
    exporter.apply(scored("unknown-1", unknown=True, combined_bits=2.0))
    exporter.apply(scored("unknown-2", unknown=True, index=1, combined_bits=3.0))
    assert any('speaker="unknown-2"' in line for line in _families(registry))
    exporter.apply(MERGED)
    exposition = _families(registry)
    assert not any('"unknown-2"' in line for line in exposition), "retired series left behind"
    series = {"speaker": "unknown-1", "feature": "combined", "measure": "lid"}
    value = registry.get_sample_value("voxmeter_disclosure_bits", series)
    assert value is not None and math.isclose(value, 2.0)


@pytest.mark.mosquitto
def test_home_assistant_empties_the_retired_tracks_entities(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    async def scenario() -> None:
        with household(tmp_path / "v.db") as store:
            async with subscribed(mosquitto, "#") as sub, exporters(mosquitto, store) as pair:
                await handle(pair, started())
                await handle(pair, scored("unknown-1", unknown=True, combined_bits=2.0))
                await handle(pair, scored("unknown-2", unknown=True, index=1, combined_bits=3.0))
                await sub.wait(lambda: retained(sub, TOPICS.speaker_state("unknown-2")) is not None)
                await sub.wait(lambda: sum("unknown-2" in k for k in configs(sub)) == PER_TRACK)
                await handle(pair, MERGED)
                # the configs go first, the state they read a grace second after them
                await sub.wait(
                    lambda: (
                        [k for k, v in configs(sub).items() if v is None and "unknown-2" in k]
                        and sum(v is None for v in configs(sub).values()) == PER_TRACK
                        and retained(sub, TOPICS.speaker_state("unknown-2")) == b""
                    )
                )
                kept = [k for k, v in configs(sub).items() if v is not None and "unknown-1" in k]
                assert len(kept) == PER_TRACK  # the survivor's entities stay
            async with subscribed(mosquitto, "#") as late:
                await late.settled()  # every retained message is in
                assert not [t for t in configs(late) if "unknown-2" in t]
                assert retained(late, TOPICS.speaker_state("unknown-2")) is None
                assert [t for t in configs(late) if "unknown-1" in t]

    run(scenario)
