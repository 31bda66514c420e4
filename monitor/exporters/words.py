"""The figures in words a household reads: "as identifying as 1 in K of N" (N = N_pop, the
population the figures are stated against), the share of the
budget, the budget state, durations, and the names of unrecognised voices.

Pure functions (no network, no clock), shared by the MQTT speaker state (its ``words`` and flat
keys) and the Home Assistant entities, so every place says the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from monitor.vocabulary import BudgetState, FigureKey

BUDGET_WORDS: Final[Mapping[BudgetState, str]] = {
    "ok": "OK",
    "warning": "Nearly used",
    "exceeded": "Over budget",
}
"""The budget states as Home Assistant shows them (the enum's options, in order)."""

FEATURE_WORDS: Final[Mapping[str, str]] = {
    "f0": "pitch",
    "phone": "pronunciation",
    "embedding": "voice print",
    "combined": "voice print, pitch and pronunciation together",
}
MEASURE_WORDS: Final[Mapping[str, str]] = {
    "lid": "likelihood of identity",
    "srd": "similarity rank",
}
STRANGER: Final = "Unrecognised voice"
"""What an ``unknown-N`` track is called in Home Assistant: never "unknown", which is one of
Home Assistant's own states."""


def one_in(bits: float, population: float) -> int:
    """K of "as identifying as 1 in K of N": the population of N_pop the speaker is as hard to
    pick out of as one person among K (N_pop · 2^-bits, rounded, between 1 and N_pop)."""
    if population < 1:
        return 0
    exponent = min(max(-bits, -64.0), 64.0)  # ±1e9 bits stand for ±inf (jsonsafe)
    return int(min(max(round(population * 2.0**exponent), 1), population))


def count_words(population: float) -> str:
    """A population as a person reads it: ``1,000,000``."""
    return f"{round(population):,}"


def one_in_words(bits: float, population: float) -> str:
    """``1 in K of N``, the state Home Assistant shows beside the bits (N = N_pop)."""
    return f"1 in {one_in(bits, population):,} of {count_words(population)}"


def budget_share(bits: float, budget_bits: float) -> float:
    """The share of the budget used, in percent (0 below no disclosure; one decimal)."""
    if budget_bits <= 0:
        return 0.0
    return round(100.0 * max(bits, 0.0) / budget_bits, 1)


def measure_words(key: str) -> str:
    """``combined.lid`` → "likelihood of identity from voice print, pitch and pronunciation
    together"; a key outside the vocabulary is returned as it is."""
    try:
        parsed = FigureKey.parse(key)
    except ValueError:
        return key
    return f"{MEASURE_WORDS[parsed.measure]} from {FEATURE_WORDS[parsed.feature]}"


def duration_words(seconds: float) -> str:
    """Seconds as a duration a person reads: ``45 s``, ``1 min 35 s``, ``2 h 05 min``."""
    total = max(round(seconds), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def bits_words(bits: float) -> str:
    return f"{bits:.2f} bits"


def speaker_words(payload: Mapping[str, Any], highest_bits: float) -> dict[str, Any]:
    """The attributes Home Assistant shows for a speaker: named in words, with units.

    ``payload`` is the speaker state's flat keys (monitor.exporters.mqtt.speaker_state_payload).
    """
    figures = payload["figures"]
    templates = int(figures["templates"])
    population = float(payload.get("population") or figures.get("population") or templates)
    at_least = payload.get("at_least")
    return {
        "Identifying as": one_in_words(payload["bits"], population),
        "Share of budget": f"{budget_share(payload['bits'], payload['budget']):g} %",
        "Budget": bits_words(payload["budget"]),
        "Budget state": BUDGET_WORDS.get(payload["state"], payload["state"]),
        "Highest this period": bits_words(highest_bits),
        "Most it can reach": f"{bits_words(payload['ceiling'])} (1 in 1 of "
        f"{count_words(population)})",
        "Measured by": measure_words(payload["measure"]),
        "Population": count_words(population),
        "Reference voices": templates,
        "The reference vouches for": (
            "the figure" if at_least is None else f"at least {bits_words(at_least)}"
        ),
        "Windows heard": payload["windows"],
        "Speech heard": duration_words(payload["speech_seconds"]),
        "Period started": payload["period_start"],
    }


def stranger_numbers(shown: Mapping[str, int], track: str) -> int:
    """The number a newly shown ``unknown-N`` track gets: the smallest one no shown stranger
    holds, so Home Assistant counts "Unrecognised voice 1, 2, 3" without gaps however the
    tracker numbered its tracks (merged and expired ones leave holes there)."""
    if track in shown:
        return shown[track]
    taken = set(shown.values())
    return next(n for n in range(1, len(taken) + 2) if n not in taken)
