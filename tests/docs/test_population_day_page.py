"""The population benchmark's day figure: its summary of the ledger's rows, the rule of the
defaults it checks, and the page and plot it gives (one panel per embedding backend)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from bench.common import Run
from bench.population_day import DAY_POPULATIONS, rule, summary

ROOT = Path(__file__).resolve().parents[2]


def _rows(spoken: list[list[float]], protected: list[list[float]]) -> list[dict[str, Any]]:
    """Rows as the ledger gives them: per speaker, its windows in day order."""
    rows = []
    for s, (bits, hidden) in enumerate(zip(spoken, protected, strict=True)):
        for k, (b, h) in enumerate(zip(bits, hidden, strict=True), start=1):
            attacker = "lazy" if k % 2 else "semi"
            rows.append({"speaker": f"s{s}", "window": k, "seconds": 3.0 * k, "spoken": b,
                         "protected": h, "beyond": b > 10, "attacker": attacker})  # fmt: skip
    return rows


def _day() -> dict[float, list[dict[str, Any]]]:
    # three speakers, the third with one command only: the day ends at each one's last window
    spoken = [[9.0, 13.0, 16.0], [12.5, 14.0, 20.0], [11.0]]
    protected = [[3.0, 4.0, 5.0], [2.0, 3.0, 9.0], [1.0]]
    return {
        N: _rows([[b * (i + 1) / 3 for b in s] for s in spoken], protected)
        for i, N in enumerate(DAY_POPULATIONS)
    }


def test_the_summary_reads_each_place_in_the_day_and_each_speakers_day() -> None:
    figures = summary(_day(), budget=12.0, default=8e9)
    first, third = figures["windows"][0], figures["windows"][2]
    assert first["speakers"] == 3 and third["speakers"] == 2
    assert first["spoken_8e+09"] == pytest.approx(11.0)
    assert first["spoken_1000"] == pytest.approx(11.0 / 3, rel=1e-3)
    assert third["protected_8e+09"] == pytest.approx(7.0)
    assert first["median_seconds"] == pytest.approx(3.0)
    world = figures["N_pop 8e+09"]
    # days: 16 and 20 bits spoken (3 commands), 11 (one command); protected 5, 9, 1
    assert world["day_spoken_median_bits"] == pytest.approx(16.0)
    assert world["day_protected_median_bits"] == pytest.approx(5.0)
    assert world["day_spoken_over_budget_share"] == pytest.approx(2 / 3, rel=1e-2)
    assert world["day_protected_over_budget_share"] == 0.0
    assert world["command_spoken_median_bits"] == pytest.approx(11.0)
    assert world["protected_above_spoken_share"] == 0.0
    shares = figures["strongest_attacker_share"]
    assert shares == {"lazy": pytest.approx(5 / 7, rel=0.01), "semi": pytest.approx(2 / 7, 0.01)}


def test_the_rule_is_the_typical_command_within_the_days_range() -> None:
    found = rule(summary(_day(), budget=12.0, default=8e9), 8e9)
    assert found["budget_bits_by_the_rule"] == 11  # the command's 11 bits: within 6 to 16
    assert (found["typical_day_spoken_bits"], found["typical_day_protected_bits"]) == (16.0, 5.0)
    assert found["budgets_meeting_the_rule"] == "6 to 16 bits"
    low = {N: [{**r, "spoken": r["spoken"] / 2} for r in rows] for N, rows in _day().items()}
    found = rule(summary(low, budget=12.0, default=8e9), 8e9)
    assert found["budget_bits_by_the_rule"] == 6  # the command's 5 bits lie below the range
    swapped = {
        N: [{**r, "spoken": r["protected"], "protected": r["spoken"]} for r in rows]
        for N, rows in _day().items()
    }  # protection above the spoken figure: no budget meets the rule
    found = rule(summary(swapped, budget=12.0, default=8e9), 8e9)
    assert found["budget_bits_by_the_rule"] is None and found["budgets_meeting_the_rule"] == "none"


def test_a_day_of_several_backends_has_a_panel_and_a_table_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_benchmarks
    from render_plots import population_day

    run = Run("population-day", command="python -m bench population --day-only")
    run.figures = {"default_population": 8e9, "default_budget_bits": 12.0}
    for backend in ("campplus-int8", "ecapa-int8"):
        run.figures[backend] = summary(_day(), budget=12.0, default=8e9)
    run.write(path=tmp_path / "population-day.json")
    monkeypatch.setattr(render_benchmarks, "RESULTS", tmp_path)
    picture = tmp_path / "day.png"
    population_day(render_benchmarks.load("population-day"), picture)
    assert picture.stat().st_size > 1000
    result = next(
        r for p in render_benchmarks.PAGES for r in p.results if r.name == "population-day"
    )
    text = "\n".join(render_benchmarks.render_result(result, {}))
    assert "**ecapa-int8 › windows**" in text and "**campplus-int8 › N_pop 8e+09**" in text
    assert "protected_8e+09" in text


def test_a_results_file_of_the_release_before_still_renders(tmp_path: Path) -> None:
    """Pages re-rendered before the benchmark is re-run: the plot says what to run."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from render_plots import population_day

    before = {"figures": {"windows": [{"windows": 1, "1000_median_bits": 9.9}], "speakers": 3}}
    population_day(before, tmp_path / "day.png")
    assert (tmp_path / "day.png").stat().st_size > 1000
