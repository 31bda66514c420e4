"""The figure record: record → JSON → record for every consumer (ledger, alert, MQTT, status),
rows stored before the record still read, and one window's figures identical in the MQTT
payload, the ledger row, the alert and ``voxmeter status`` (real mosquitto, real store)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.errors import StoreError
from monitor.events.messages import (
    FEATURES,
    MEASURES,
    Disclosure,
    Figures,
    StateChanged,
    WindowScored,
)
from monitor.exporters.mqtt import MqttExporter, speaker_state_payload
from monitor.ledger.budget import BudgetMachine
from monitor.ledger.status import current_status
from monitor.ledger.writer import LedgerWriter, alert_figures, restored_track, stored_figures
from monitor.settings.sections import BudgetSettings
from monitor.store.base import dumps
from monitor.store.database import open_store
from monitor.store.ledger import WindowRecord
from monitor.vocabulary import FigureKey
from tests.exporters.exporter_events import scored
from tests.exporters.test_exporter_mqtt import TOPICS, run, running, settings_for, subscribed, until
from tests.ledger import test_ledger_writer
from tests.realparts.mosquitto import MosquittoBroker

LOCAL = scored("home-1", index=2, combined_bits=3.5, state="warning").figures
UNKNOWN = scored(
    "unknown-2", index=4, combined_bits=2.0, unknown=True, top_candidate="spk-9"
).figures


def through_text(data: dict) -> dict:
    """JSON as a consumer receives it: text that NaN-refusing ``dumps`` accepts, parsed back."""
    return json.loads(dumps(data))


def ledger_writer(store) -> LedgerWriter:
    return LedgerWriter(
        store,
        BudgetMachine(BudgetSettings(bits=4.0, warn_fraction=0.5, hysteresis_bits=0.25)),
        budget_bits=4.0,
        measure=FigureKey("combined", "lid"),
        templates=32,
        alert_topic=TOPICS.alerts,
        device_id="testdev",
    )


@pytest.mark.parametrize("figures", [LOCAL, UNKNOWN], ids=["local", "unknown"])
def test_record_json_record_for_every_consumer(figures: Figures, tmp_path: Path) -> None:
    assert Figures.from_json(through_text(figures.to_json())) == figures
    # MQTT speaker state and alert carry the same JSON under "figures"
    state = through_text(speaker_state_payload(figures, updated_unix=1.8e9))
    assert Figures.from_json(state["figures"]) == figures
    alert = through_text(alert_figures(figures))
    assert Figures.from_json(alert["figures"]) == figures
    # the ledger row (its columns agree with the record) and status, which parses it back
    with open_store(tmp_path / "v.db") as store:
        store.record_window(
            figures.track,
            period_start=figures.period_start_unix,
            window_start=figures.window_end_unix - 3.0,
            window_end=figures.window_end_unix,
            speech_seconds=3.0,
            pooled={},
            figures=figures.to_json(),
        )
        (row,) = store.windows(figures.track, figures.period_start_unix)
        assert stored_figures(row, budget_measure="f0.srd", delta=0.5) == figures
        (status,) = current_status(
            store, 1.0, budget_measure="f0.srd", delta=0.5, now=figures.period_start_unix
        )
    assert status.figures == figures
    assert Figures.from_json(through_text(status.to_json())["figures"]) == figures


def test_flat_keys_are_renamings_of_the_record() -> None:
    """Dashboards and HA read the flat keys of MQTT and alerts: the record's numbers, renamed."""
    data = UNKNOWN.to_json()
    state = speaker_state_payload(UNKNOWN, updated_unix=1.8e9)
    assert state["bits"] == UNKNOWN.bits("combined", "lid") == data["budget_figure_bits"]
    assert (state["alias"], state["kind"], state["state"], state["measure"]) == (
        "unknown-2", "unknown", "ok", "combined.lid",
    )  # fmt: skip
    assert state["features"] == {f: {m: UNKNOWN.bits(f, m) for m in MEASURES} for f in FEATURES}
    assert state["bounds"] == UNKNOWN.bounds.bits()
    assert (state["ceiling"], state["windows"], state["speech_seconds"]) == (
        UNKNOWN.ceiling_bits, UNKNOWN.windows, UNKNOWN.pooled_speech_seconds,
    )  # fmt: skip
    assert (state["information_gain"], state["top_candidate"]) == (
        UNKNOWN.information_gain_bits, "spk-9",
    )  # fmt: skip
    assert "information_gain" not in speaker_state_payload(LOCAL, updated_unix=1.8e9)
    alert = alert_figures(LOCAL)
    assert alert["features"] == {d.key: d.cumulative_bits for d in LOCAL.disclosures}
    assert alert["bounds"] == LOCAL.bounds.bits()
    assert alert_figures(None) == {"features": {}, "bounds": {}, "figures": None}


def test_unbounded_figures_stay_numbers() -> None:
    """±inf is clamped to ±1e9 bits (a gauge and a dashboard need a number); NaN-free JSON."""
    infinite = replace(
        LOCAL,
        disclosures=(
            Disclosure("combined", "lid", math.inf, -math.inf),
            *(d for d in LOCAL.disclosures if d.key != "combined.lid"),
        ),
    )
    data = through_text(infinite.to_json())
    assert data["disclosures"]["combined.lid"] == [1e9, -1e9]
    assert data["budget_figure_bits"] == 1e9
    assert Figures.from_json(data).bits("combined", "lid") == 1e9


def test_rows_stored_before_the_record_still_read(tmp_path: Path) -> None:
    """A row as the ledger wrote it before the record (no track, budget measure, δ, times)."""
    old = {
        "kind": "unknown",
        "identity": None,
        "subject": "0042",
        "window_index": 7,
        "windows": 3,
        "pooled_speech_seconds": 9.0,
        "disclosures": {"combined.lid": [2.5, 1.0], "f0.srd": [0.5, 0.25]},
        "bounds": {"basic": 6.0, "advanced": 5.0, "optimal": 4.0, "epsilon_nats": 1.39},
        "ceiling_bits": 8.0,
        "templates": 256,
        "budget_bits": 4.0,
        "budget_figure_bits": 2.5,
        "state": "warning",
        "information_gain_bits": 1.75,
        "top_candidate": "0042",
        "top_candidate_bits": 2.5,
        "extrapolated": {"combined": True},
    }
    row = WindowRecord(11, "unknown-1", 86400.0, 86410.0, 86413.0, 3.0, 1.0, old)
    figures = stored_figures(row, budget_measure="combined.lid", delta=1e-5)
    assert (figures.track, figures.period_start_unix, figures.window_end_unix) == (
        "unknown-1", 86400.0, 86413.0,
    )  # fmt: skip
    assert figures.bounds == replace(figures.bounds, windows=3, epsilon_nats=1.39, delta=1e-5)
    assert (figures.bounds.basic_bits, figures.bounds.optimal_bits) == (6.0, 4.0)
    assert figures.budget_figure_bits == 2.5 and figures.bits("f0", "srd", cumulative=False) == 0.25
    assert (figures.top_candidate, figures.information_gain_bits) == ("0042", 1.75)
    assert figures.extrapolated == {"combined": True}
    # a restart shows them with the state, budget and budget measure of now
    restored = restored_track(
        row, state="ok", budget_bits=6.0, budget_measure="f0.srd", delta=1e-5
    ).figures
    assert (restored.state, restored.budget_bits, restored.budget_figure_bits) == ("ok", 6.0, 0.5)
    broken = replace(row, figures={k: v for k, v in old.items() if k != "windows"})
    with pytest.raises(StoreError, match=r"ledger window 11 of track 'unknown-1'.*'windows'"):
        stored_figures(broken, budget_measure="combined.lid", delta=1e-5)
    with pytest.raises(ValueError, match="state 'maybe'"):
        Figures.from_json({**LOCAL.to_json(), "state": "maybe"})


def test_status_names_a_ledger_row_it_cannot_read(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    with open_store(db) as store:
        store.record_window(
            "home-1",
            period_start=math.floor(time.time() / 86400) * 86400.0,
            window_start=time.time() - 4.0,
            window_end=time.time() - 1.0,
            speech_seconds=3.0,
            pooled={},
            figures={"kind": "local"},
        )
    shown = CliRunner().invoke(app, ["status", "--db", str(db)])
    assert shown.exit_code == 2
    assert "ledger window 1 of track 'home-1'" in shown.output
    assert "Traceback" not in shown.output and len(shown.output.strip().splitlines()) == 1


@pytest.mark.mosquitto
def test_mqtt_ledger_alert_and_status_carry_identical_figures(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """One window through the ledger stage and the MQTT exporter to a real broker: the retained
    state, the alert, the ledger row and ``voxmeter status --json`` hold the same figures."""
    db = tmp_path / "v.db"
    now = time.time()

    seen: dict[str, Any] = {}

    async def scenario() -> None:
        with open_store(db) as store:
            ledger = ledger_writer(store)
            events = [
                *ledger.process(test_ledger_writer.scored(0, 1.0, now - 1.0)),
                *ledger.process(test_ledger_writer.scored(1, 2.5, now - 0.5)),  # ok → warning
            ]
            assert [e.to_state for e in events if isinstance(e, StateChanged)] == ["warning"]
            seen["window"] = [e for e in events if isinstance(e, WindowScored)][-1]
            exporter = MqttExporter(settings_for(mosquitto), store=store, device_id="testdev")
            topic = TOPICS.speaker_state("home-1")
            async with subscribed(mosquitto) as sub, running(exporter):
                for event in events:
                    await exporter.handle(event)
                await sub.wait(lambda: len(sub.on(TOPICS.alerts)) == 1)
                await sub.wait(lambda: any(s["windows"] == 2 for s in sub.on(topic)))
                await until(lambda: store.pending_count() == 0)
            seen["state"] = next(s for s in sub.on(topic) if s["windows"] == 2)
            seen["alert"] = sub.on(TOPICS.alerts)[0]

    run(scenario)
    window, state, alert = seen["window"], seen["state"], seen["alert"]
    with open_store(db, create=False) as store:
        row = store.windows("home-1", window.figures.period_start_unix)[-1]
    shown = CliRunner().invoke(app, ["status", "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    (status,) = json.loads(shown.output)

    expected = through_text(window.figures.to_json())
    assert state["figures"] == row.figures == alert["figures"] == status["figures"] == expected
    assert Figures.from_json(state["figures"]) == window.figures
    assert state["bits"] == alert["bits"] == status["figures"]["budget_figure_bits"] == 2.5
    assert (state["state"], alert["to"], status["state"]) == ("warning",) * 3
