"""The figures in words: "1 in K of N", the share of the budget, durations, and unrecognised
voices numbered without gaps; the reference set's warning, said once."""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import replace

import pytest

from monitor.exporters.log import LogExporter
from monitor.exporters.words import (
    budget_share,
    duration_words,
    measure_words,
    one_in,
    one_in_words,
    stranger_numbers,
)
from monitor.references import advice, beyond_words, saturated, summary
from tests.exporters.exporter_events import CEILING_BITS, N_TEMPLATES, scored


@pytest.mark.parametrize(
    ("bits", "templates", "k"),
    [
        (0.0, 44, 44),  # nothing disclosed: one among all of them
        (math.log2(44), 44, 1),  # the ceiling: picked out alone
        (4.2, 250, 14),  # 250 / 2^4.2 = 13.6
        (-3.0, 44, 44),  # below the prior: still at most N
        (1e9, 44, 1),  # +inf as the JSON writes it
        (-1e9, 44, 44),
    ],
)
def test_one_in_k_of_n(bits: float, templates: int, k: int) -> None:
    assert one_in(bits, templates) == k
    assert one_in_words(bits, templates) == f"1 in {k} of {templates}"
    assert one_in_words(20.0, 1e6) == "1 in 1 of 1,000,000"
    assert one_in_words(10.0, 1e6) == "1 in 977 of 1,000,000"


def test_budget_share_durations_and_measures_in_words() -> None:
    assert budget_share(4.2, 5.0) == 84.0 and budget_share(-1.0, 5.0) == 0.0
    assert budget_share(7.5, 5.0) == 150.0 and budget_share(1.0, 0.0) == 0.0
    assert [duration_words(s) for s in (0.4, 45, 95.34, 3725)] == [
        "0 s",
        "45 s",
        "1 min 35 s",
        "1 h 02 min",
    ]
    assert measure_words("combined.lid").startswith("likelihood of identity from voice print")
    assert measure_words("odd") == "odd"


def test_unrecognised_voices_are_numbered_without_gaps() -> None:
    shown: dict[str, int] = {}
    for track in ("unknown-3", "unknown-7", "unknown-12"):
        shown[track] = stranger_numbers(shown, track)
    assert shown == {"unknown-3": 1, "unknown-7": 2, "unknown-12": 3}
    del shown["unknown-7"]  # expired: the next voice takes the free number
    assert stranger_numbers(shown, "unknown-15") == 2
    assert stranger_numbers(shown, "unknown-3") == 1  # a shown voice keeps its number


def test_messages_about_the_reference_set_name_only_commands_that_exist() -> None:
    assert saturated(CEILING_BITS - 0.01, CEILING_BITS) and not saturated(5.0, CEILING_BITS)
    assert advice(44, shipped=True) is None
    words = [advice(44, shipped=False) or "", beyond_words(14.2, 9.5, 129), summary(4, 125)]
    for text in words:
        assert "--corpus" not in text and "\n" not in text
    assert "`voxmeter enroll DIR`" in words[0] and "population.shipped = true" in words[0]
    assert "at least 9.50 bits" in words[1] and "129 reference voices" in words[1]
    assert words[2].startswith("reference set: 4 enrolled + 125 shipped voices")


def test_a_window_at_the_ceiling_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    exporter = LogExporter(logging.getLogger("tests.words"))
    with caplog.at_level(logging.WARNING, logger="tests.words"):
        asyncio.run(exporter.handle(scored("home-1", combined_bits=3.0)))  # far below
        for _ in range(2):  # one window alone at log2 N, twice
            asyncio.run(exporter.handle(scored("home-1", combined_bits=CEILING_BITS, index=0)))
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "population.shipped is off" in warning.getMessage()
    assert warning.fields["templates"] == N_TEMPLATES  # type: ignore[attr-defined]


def test_a_figure_beyond_the_reference_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    exporter = LogExporter(logging.getLogger("tests.words"))
    event = scored("home-1", combined_bits=15.0)
    beyond = replace(
        event,
        figures=replace(event.figures, population=1e6, at_least={"combined.lid": 9.5}),
    )
    with caplog.at_level(logging.WARNING, logger="tests.words"):
        asyncio.run(exporter.handle(replace(event, figures=replace(event.figures, population=1e6))))
        for _ in range(2):
            asyncio.run(exporter.handle(beyond))
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "vouches for at least 9.50 bits" in warning.getMessage()
    assert "voxmeter enroll DIR" in warning.getMessage()
