"""The ``[population]`` settings: the reference population a figure is measured against."""

from __future__ import annotations

import math
from dataclasses import dataclass

from monitor.settings.checks import setting

MAX_POPULATION_SIZE = 1e10
"""Largest population a figure is stated against (the world is 8·10⁹, log2 ≈ 33 bits)."""


def population_size(value: float) -> str | None:
    """N_pop: at least 2 identities, finite, at most 10¹⁰ (the templates present are checked
    against it when the daemon has read them)."""
    if not math.isfinite(value) or value < 2 or value > MAX_POPULATION_SIZE:
        return f"must be a number of identities from 2 to {MAX_POPULATION_SIZE:.0e}"
    return None


@dataclass(frozen=True)
class PopulationSettings:
    """Who a voice is told apart from: the population a household lives in (N_pop), through
    the population model fitted on the reference templates, and the shipped reference
    population (train speakers of speechocean762, templates only) the model comes with."""

    size: float = setting(
        8e9,
        "N_pop, the population a household's voices are told apart from (a town 1e3–1e5, a "
        "country 1e7–1e8, the world 8e9, the default: the smallest of 1e3, 1e6, 8e9 at which at "
        "most 5 % of 3-second windows reach the ceiling): every figure is stated against it, at "
        "most log2 N_pop bits; at least the number of templates present, at most 1e10",
        population_size,
        unit="identities",
    )
    shipped: bool = setting(
        True,
        "score against the reference population shipped with voxmeter as well as the "
        "database's templates (the household and any reference speakers enrolled); false = "
        "the database's templates alone, figures against them (at most log2 N bits of N "
        "templates) and size unused",
    )
