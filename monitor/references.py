"""What the reference set can vouch for, said the same way by every part that speaks of it.

A figure is stated against a population of N_pop identities (``[population] size``) through a
population model fitted on the reference templates (the shipped reference population, plus any
reference speakers the user enrolled). The reference set no longer caps the figure; it limits
what the model can *validate*: a window whose evidence lies beyond the impostors the reference
holds gets the model's estimate as its figure, flagged, beside the lower bound the reference
does vouch for ("at least X bits"). More reference speakers widen that range: enrol them with
``voxmeter enroll DIR`` (without ``--local``). Without the shipped population
(``population.shipped = false``) figures are against the templates present, at most log2 N,
and a window that reaches that ceiling says nothing more than "everything".
"""

from __future__ import annotations

from typing import Final

SATURATION_MARGIN_BITS: Final = 0.05
"""A window this close to the ceiling log2 N has reached it: the set cannot tell more."""

MORE_REFERENCES: Final = "enrol reference speakers of your own with `voxmeter enroll DIR`"
"""The one action that widens what the reference vouches for (a command that exists)."""


def saturated(window_bits: float, ceiling_bits: float) -> bool:
    """Whether one window alone reached the ceiling (only figures against the templates
    present, without a population model, can: log2 N_pop is far above any window)."""
    return ceiling_bits > 0 and window_bits >= ceiling_bits - SATURATION_MARGIN_BITS


def beyond_words(figure_bits: float, at_least_bits: float, templates: int) -> str:
    """One sentence for a figure beyond what the reference can validate."""
    return (
        f"this speech is more identifying than the {templates} reference voices can validate: "
        f"the figure {figure_bits:.2f} bits is the population model's estimate, the reference "
        f"vouches for at least {at_least_bits:.2f} bits; {MORE_REFERENCES} to validate more"
    )


def advice(templates: int, shipped: bool) -> str | None:
    """One sentence for a reference set that cannot state figures against a population
    (None when it can: the shipped population is on)."""
    if shipped:
        return None
    return (
        f"population.shipped is off: figures are against the {templates} templates present, at "
        f"most log2 {templates} bits, and a few seconds of speech reach that; turn it on "
        f"(population.shipped = true) to state them against population.size, or {MORE_REFERENCES}"
    )


def summary(enrolled: int, shipped: int) -> str:
    """``voxmeter enroll``'s line about the reference set."""
    return (
        f"reference set: {enrolled} enrolled + {shipped} shipped voices; figures are stated "
        "against population.size through the population model"
    )
