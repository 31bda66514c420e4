"""The budget state machine: thresholds, hysteresis, one transition per change, new periods."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from monitor.errors import ConfigError
from monitor.ledger.budget import BudgetMachine, next_period_start, period_start
from monitor.settings.config import load_config
from monitor.settings.sections import BudgetSettings


def machine(**overrides: float) -> BudgetMachine:
    settings = {"bits": 4.0, "warn_fraction": 0.5, "hysteresis_bits": 0.25, **overrides}
    return BudgetMachine(BudgetSettings(**settings))  # type: ignore[arg-type]


def walk(m: BudgetMachine, figures: list[float]) -> list[str]:
    states = []
    for bits in figures:
        m.process("home-1", bits)
        states.append(m.state("home-1"))
    return states


def test_thresholds_going_up() -> None:
    # warning at 0.5 × 4 = 2 bits, exceeded at 4 bits (both inclusive)
    assert walk(machine(), [0.0, 1.99, 2.0, 3.99, 4.0, 9.0]) == [
        "ok",
        "ok",
        "warning",
        "warning",
        "exceeded",
        "exceeded",
    ]


def test_direct_jump_from_ok_to_exceeded_is_one_transition() -> None:
    m = machine()
    assert m.process("home-1", 1.0) is None
    change = m.process("home-1", 5.0)
    assert change is not None
    assert (change.from_state, change.to_state, change.reason) == ("ok", "exceeded", "window")


def test_hysteresis_steps_down_only_below_threshold_minus_margin() -> None:
    m = machine()
    # exceeded at 4; stays exceeded down to 3.75 (= 4 − 0.25), steps down below it
    assert walk(m, [4.2, 3.9, 3.75, 3.74]) == ["exceeded", "exceeded", "exceeded", "warning"]
    # warning at 2; stays warning down to 1.75, back to ok below it
    assert walk(m, [2.1, 1.8, 1.75, 1.7]) == ["warning", "warning", "warning", "ok"]


def test_hovering_at_a_threshold_does_not_flap() -> None:
    m = machine()
    changes = [m.process("home-1", bits) for bits in [3.9, 4.05, 3.95, 4.01, 3.8, 4.1]]
    assert [c.to_state for c in changes if c] == ["warning", "exceeded"]


def test_fall_from_exceeded_far_below_goes_straight_to_ok() -> None:
    m = machine()
    m.process("home-1", 5.0)
    change = m.process("home-1", 0.5)
    assert change is not None and (change.from_state, change.to_state) == ("exceeded", "ok")


def test_speakers_are_independent() -> None:
    m = machine()
    m.process("a", 5.0)
    m.process("b", 2.5)
    assert (m.state("a"), m.state("b"), m.state("c")) == ("exceeded", "warning", "ok")


def test_new_period_resets_everyone_with_one_alert_each() -> None:
    m = machine()
    m.process("a", 5.0)
    m.process("b", 2.5)
    m.process("c", 0.1)
    changes = m.new_period()
    assert [(c.track, c.from_state, c.to_state, c.reason) for c in changes] == [
        ("a", "exceeded", "ok", "period"),
        ("b", "warning", "ok", "period"),
    ]
    assert m.state("a") == "ok" and m.new_period() == []


def test_restore_then_hysteresis_applies() -> None:
    m = machine()
    m.restore("home-1", "exceeded")
    assert m.process("home-1", 3.8) is None  # within the margin: still exceeded
    with pytest.raises(ValueError, match="budget state"):
        m.restore("x", "panic")  # type: ignore[arg-type]


def test_period_start_is_aligned_to_the_epoch() -> None:
    day = 86400.0
    assert period_start(day * 10 + 5.0, day) == day * 10
    assert period_start(day * 10, day) == day * 10
    assert period_start(day * 10 - 0.001, day) == day * 9
    assert period_start(3600 * 5 + 1, 3600.0) == 3600 * 5


def test_a_daily_period_starts_at_local_midnight_all_year() -> None:
    """In Paris a day's budget restarts at 00:00 Paris time (23:00 or 22:00 UTC), also on the
    days the clocks change, when the period is 23 or 25 hours long."""
    paris, day = ZoneInfo("Europe/Paris"), 86400.0

    def at(text: str) -> float:
        return datetime.fromisoformat(text).replace(tzinfo=paris).timestamp()

    for moment, midnight in (
        ("2026-01-15 00:30", "2026-01-15 00:00"),
        ("2026-01-14 23:59", "2026-01-14 00:00"),
        ("2026-07-15 12:00", "2026-07-15 00:00"),
        ("2026-03-29 12:00", "2026-03-29 00:00"),  # clocks go forward at 02:00
        ("2026-10-25 23:30", "2026-10-25 00:00"),  # clocks go back at 03:00
    ):
        assert period_start(at(moment), day, paris) == at(midnight), moment
    assert next_period_start(at("2026-03-29 00:00"), day, paris) == at("2026-03-30 00:00")
    assert at("2026-03-30 00:00") - at("2026-03-29 00:00") == 23 * 3600
    assert next_period_start(at("2026-10-25 00:00"), day, paris) == at("2026-10-26 00:00")
    assert at("2026-10-26 00:00") - at("2026-10-25 00:00") == 25 * 3600
    # hourly periods stay on the hour, and UTC keeps the epoch multiples
    assert period_start(at("2026-07-15 12:40"), 3600.0, paris) == at("2026-07-15 12:00")
    assert period_start(day * 10 + 5.0, day) == day * 10


def test_the_budget_time_zone_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """budget.timezone names the zone; empty, TZ does (what the Supervisor sets in an add-on);
    a name the tz database lacks is one config error naming the key."""
    named = load_config(None, ['budget.timezone="America/New_York"'])
    assert named.budget.zone == ZoneInfo("America/New_York")
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert load_config(None, []).budget.zone == ZoneInfo("Asia/Tokyo")
    with pytest.raises(ConfigError) as raised:
        load_config(None, ['budget.timezone="Mars/Olympus"'])
    assert raised.value.key == "budget.timezone"


def test_the_entities_say_when_the_period_started_on_the_budget_clock() -> None:
    """The speaker's *Period started* attribute: the budget zone's wall clock, zone named."""
    from monitor.exporters.mqtt import speaker_state_payload
    from tests.exporters.exporter_events import scored

    figures = scored("alice").figures  # its period started at 1.8e9 s: 2027-01-15 08:00 UTC
    words = speaker_state_payload(figures, updated_unix=1.8e9, zone=ZoneInfo("Europe/Paris"))
    assert words["words"]["Period started"] == "2027-01-15 09:00 (Europe/Paris)"
    assert speaker_state_payload(figures, updated_unix=1.8e9)["period_start"].startswith(
        "2027-01-15T08:00:00"
    )  # the machine-readable field stays UTC
