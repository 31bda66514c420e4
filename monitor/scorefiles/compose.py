"""``voxmeter compose``: composed ε of repeated releases, as rows, JSON and a rich table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.disclosure.composition import (
    MAX_EPSILON_NATS,
    MAX_OPTIMAL_STEPS,
    basic,
    drv,
    kairouz_advanced,
    optimal,
)
from monitor.errors import InputError
from monitor.numerals import ascii_int

if TYPE_CHECKING:
    from rich.console import Console


@dataclass(frozen=True)
class CompositionRow:
    """Composed ε (nats) after ``steps`` releases of an (ε, 0)-DP mechanism at target δ."""

    steps: int
    basic: float
    drv: float
    advanced: float  # Kairouz Thm 3.4 (min of its three terms)
    optimal: float  # Kairouz Thm 3.3, continuous in δ


def parse_steps(tokens: Sequence[str]) -> list[int]:
    """Step counts from the command line; a token that is not an integer >= 1 is an InputError."""
    steps = []
    for token in tokens:
        try:
            value = ascii_int(token)
        except ValueError:
            raise InputError(
                "--steps", f"{token!r} is not an integer number of steps (digits 0-9)"
            ) from None
        steps.append(value)
    return steps


def compose_rows(epsilon: float, delta: float, steps: Sequence[int]) -> list[CompositionRow]:
    """Validate the options (InputError naming the bad one) and compute every bound."""
    if not (math.isfinite(epsilon) and 0 < epsilon <= MAX_EPSILON_NATS):
        raise InputError(
            "--epsilon", f"must be in (0, {MAX_EPSILON_NATS:g}] nats per release, got {epsilon:g}"
        )
    if not (0.0 < delta < 1.0):
        raise InputError("--delta", f"must lie in (0, 1), got {delta}")
    if not steps:
        raise InputError("--steps", "give at least one step count")
    for value in steps:
        if value < 1:
            raise InputError("--steps", f"must be integers >= 1, got {value}")
        if value > MAX_OPTIMAL_STEPS:
            raise InputError(
                "--steps",
                f"{value} is more than the {MAX_OPTIMAL_STEPS} steps the optimal bound allows",
            )
    k = np.asarray(steps, dtype=np.int64)
    columns = (
        basic(epsilon, k),
        drv(epsilon, k, delta),
        kairouz_advanced(epsilon, k, delta),
        optimal(epsilon, k, delta),
    )
    return [
        CompositionRow(int(s), float(b), float(d), float(a), float(o))
        for s, b, d, a, o in zip(k, *columns, strict=True)
    ]


def compose_json(rows: Sequence[CompositionRow]) -> list[dict[str, Any]]:
    """The ``compose --json`` list: {steps, basic, advanced, optimal} per step count (nats)."""
    return [
        {"steps": r.steps, "basic": r.basic, "advanced": r.advanced, "optimal": r.optimal}
        for r in rows
    ]


def render_composition(
    rows: Sequence[CompositionRow], epsilon: float, delta: float, console: Console
) -> None:
    """Composed ε per step count, in nats (and the optimal bound in bits)."""
    from rich.table import Table  # only when a table is printed

    table = Table(title=f"Composition of ε = {epsilon:g} nats per step at δ = {delta:g}")
    table.add_column("steps", justify="right")
    table.add_column("basic k·ε", justify="right")
    table.add_column("DRV", justify="right")
    table.add_column("advanced (Thm 3.4)", justify="right")
    table.add_column("optimal (Thm 3.3)", justify="right")
    table.add_column("optimal in bits", justify="right")
    for r in rows:
        table.add_row(
            str(r.steps),
            f"{r.basic:.3f}",
            f"{r.drv:.3f}",
            f"{r.advanced:.3f}",
            f"{r.optimal:.3f}",
            f"{r.optimal / math.log(2):.3f}",
        )
    console.print(table)
    console.print("ε in nats; a release that is ε-DP discloses at most ε·log2(e) bits.")
