"""``voxmeter status`` shows what the daemon stored in the current period."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from monitor.cli import app
from monitor.ledger.budget import BudgetMachine
from monitor.ledger.writer import LedgerWriter
from monitor.settings.sections import BudgetSettings
from monitor.store.database import open_store
from monitor.vocabulary import FigureKey
from tests.ledger.test_ledger_writer import scored


def test_status_table_and_json(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    with open_store(db) as store:
        ledger = LedgerWriter(
            store,
            BudgetMachine(BudgetSettings(bits=4.0, warn_fraction=0.5, hysteresis_bits=0.25)),
            budget_bits=4.0,
            measure=FigureKey("combined", "lid"),
            templates=32,
            alert_topic="voxmeter/dev/alerts",
            device_id="dev",
        )
        now = time.time()
        for i, bits in enumerate([1.0, 2.5]):
            ledger.process(scored(i, bits, now - 1.0 + 0.1 * i))
    runner = CliRunner()
    shown = runner.invoke(app, ["status", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert "home-1" in shown.output and "warning" in shown.output and "2.50" in shown.output
    as_json = runner.invoke(app, ["status", "--db", str(db), "--json"])
    rows = json.loads(as_json.output)
    assert [(r["track"], r["state"], r["windows"]) for r in rows] == [("home-1", "warning", 2)]
    assert rows[0]["figures"]["disclosures"]["combined.lid"][0] == 2.5
    missing = runner.invoke(app, ["status", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "none.db" in missing.output


def test_a_composition_bound_above_log2_n_is_shown_at_the_ceiling_and_marked() -> None:
    from monitor.cli.daemon import _bound_cell

    assert _bound_cell(32.9, 3.0) == "3.00*"  # vacuous: no disclosure exceeds log2 N
    assert _bound_cell(2.44, 3.0) == "2.4"
    assert _bound_cell(3.0, 3.0) == "3.0"
