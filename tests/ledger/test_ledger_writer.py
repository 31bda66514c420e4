"""Ledger stage: window records, budget transitions written with their alerts, new periods."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from monitor.events.messages import (
    FEATURES,
    MEASURES,
    CompositionBounds,
    Disclosure,
    FeatureWindow,
    StateChanged,
    TrackedWindow,
    WindowScored,
)
from monitor.features.base import Observation
from monitor.ledger.budget import BudgetMachine
from monitor.ledger.writer import LedgerWriter
from monitor.scoring.evidence import ScoredWindow, TrackEvidence
from monitor.scoring.scorer import TrackScore
from monitor.settings.sections import BudgetSettings
from monitor.store.database import open_store
from monitor.vocabulary import FigureKey

DAY = 86400.0
PERIOD = 20_000 * DAY


def scored(index: int, bits: float, closed_unix: float) -> ScoredWindow:
    window = FeatureWindow(
        index=index,
        start_seconds=3.0 * index,
        end_seconds=3.0 * index + 3.2,
        speech_seconds=3.0,
        observations={"embedding": Observation("embedding", np.eye(4)[0], 3.0)},
        closed_monotonic=0.0,
        closed_unix=closed_unix,
        feature_seconds=0.1,
    )
    tracked = TrackedWindow(window, "home-1", "local", "0007", 0.9, False)
    evidence = TrackEvidence(
        "home-1",
        "local",
        "0007",
        {"embedding": Observation("embedding", np.eye(4)[1], 3.0 * (index + 1))},
        windows=index + 1,
        speech_seconds=3.0 * (index + 1),
    )
    score = TrackScore(
        disclosures=tuple(Disclosure(f, m, bits, bits / 2) for f in FEATURES for m in MEASURES),
        bounds=CompositionBounds(index + 1, 0.5, 1e-5, 1.0, 0.9, 0.8),
        subject="0007",
        information_gain_bits=None,
        top_candidate=None,
        top_candidate_bits=None,
        extrapolated=dict.fromkeys(FEATURES, False),
        window_bits=bits / 2,
    )
    period = math.floor(closed_unix / DAY) * DAY
    return ScoredWindow(tracked, evidence, score, period, 0.01)


@pytest.fixture
def writer(tmp_path: Path):
    store = open_store(tmp_path / "v.db")
    budget = BudgetMachine(BudgetSettings(bits=4.0, warn_fraction=0.5, hysteresis_bits=0.25))
    yield (
        LedgerWriter(
            store,
            budget,
            budget_bits=4.0,
            measure=FigureKey("combined", "lid"),
            templates=32,
            alert_topic="voxmeter/dev/alerts",
            device_id="dev",
        ),
        store,
    )
    store.close()


def test_windows_recorded_and_transitions_alerted_in_order(writer) -> None:
    ledger, store = writer
    events = []
    for i, bits in enumerate([1.0, 2.5, 4.2, 3.9]):
        events += ledger.process(scored(i, bits, PERIOD + 60.0 * i))
    windows = [e.figures for e in events if isinstance(e, WindowScored)]
    changes = [e for e in events if isinstance(e, StateChanged)]
    assert [w.state for w in windows] == ["ok", "warning", "exceeded", "exceeded"]
    assert [(c.from_state, c.to_state, c.reason) for c in changes] == [
        ("ok", "warning", "window"),
        ("warning", "exceeded", "window"),
    ]
    assert windows[0].ceiling_bits == pytest.approx(5.0) and windows[0].templates == 32
    rows = store.windows("home-1", PERIOD)
    assert len(rows) == 4
    assert rows[2].figures["state"] == "exceeded"
    assert rows[2].figures["disclosures"]["f0.srd"] == [4.2, 2.1]
    assert rows[3].window_bits == pytest.approx(1.95)
    # each row carries the window's place in the stream beside its wall-clock times
    assert [(r.stream_start, r.stream_end) for r in rows[:2]] == [(0.0, 3.2), (3.0, 6.2)]
    assert rows[1].window_end == PERIOD + 60.0
    pending = store.pending()
    assert [m.seq for m in pending] == [c.seq for c in changes]
    assert all(m.topic == "voxmeter/dev/alerts" for m in pending)
    alert = pending[1].payload
    assert (alert["alias"], alert["from"], alert["to"], alert["device"]) == (
        "home-1", "warning", "exceeded", "dev",
    )  # fmt: skip
    assert alert["bits"] == pytest.approx(4.2) and alert["budget"] == 4.0
    assert alert["features"]["combined.lid"] == pytest.approx(4.2)
    assert set(alert["bounds"]) == {"basic", "advanced", "optimal"}
    assert store.budget_state("home-1").state == "exceeded"


def test_a_new_period_steps_down_with_one_alert(writer) -> None:
    ledger, store = writer
    ledger.process(scored(0, 4.5, PERIOD + 10.0))
    events = ledger.process(scored(1, 1.0, PERIOD + DAY + 10.0))
    changes = [e for e in events if isinstance(e, StateChanged)]
    assert [(c.from_state, c.to_state, c.reason) for c in changes] == [("exceeded", "ok", "period")]
    window = next(e.figures for e in events if isinstance(e, WindowScored))
    assert window.state == "ok" and window.period_start_unix == PERIOD + DAY
    assert store.budget_state("home-1").state == "ok"
    assert [m.payload["reason"] for m in store.pending()] == ["window", "period"]
    assert len(store.windows("home-1", PERIOD + DAY)) == 1


def test_periods_beyond_the_kept_ones_are_pruned(writer) -> None:
    ledger, store = writer
    ledger.keep_seconds = DAY  # keep the current period and the one before
    for day in range(3):
        ledger.process(scored(day, 1.0, PERIOD + day * DAY + 5.0))
    assert store.windows("home-1", PERIOD) == []
    assert len(store.windows("home-1", PERIOD + DAY)) == 1
    assert len(store.windows("home-1", PERIOD + 2 * DAY)) == 1
