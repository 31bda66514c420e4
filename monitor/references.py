"""How many reference voices make a disclosure figure meaningful, and when a set is too small.

A figure is at most log2 N bits (N reference voices, the household included): with a small N,
one window of speech already reaches that ceiling, and every member reads "over budget" from
the first seconds whatever they say. :data:`MEANINGFUL_REFERENCES` is the smallest N at which
the median 3-second window of a corpus speaker stays below the ceiling; it is measured by
``scripts/reference_set_size.py`` (bench/results/reference-set.json: measured up to the corpus's
250 speakers, extrapolated beyond; a test checks the two agree).
"""

from __future__ import annotations

from typing import Final

MEANINGFUL_REFERENCES: Final = 650
"""References (N) from which the median 3-second window stays below the ceiling log2 N."""

SATURATION_MARGIN_BITS: Final = 0.05
"""A window this close to the ceiling log2 N has reached it: the set cannot tell more."""


def saturated(window_bits: float, ceiling_bits: float) -> bool:
    """Whether one window alone reached the ceiling log2 N (the reference set is too small to
    tell how identifying the speech is)."""
    return ceiling_bits > 0 and window_bits >= ceiling_bits - SATURATION_MARGIN_BITS


def advice(templates: int) -> str | None:
    """One sentence for a user whose reference set is too small (None when it is large enough)."""
    if templates >= MEANINGFUL_REFERENCES:
        return None
    return (
        f"{templates} reference voices: a few seconds of speech reach the ceiling of "
        f"log2 {templates} bits; enrol at least {MEANINGFUL_REFERENCES} "
        "(voxmeter enroll REFERENCE_CORPUS --db DB, without --local) for a figure that can "
        "tell more from less"
    )


def summary(templates: int) -> str:
    """``voxmeter enroll``'s line about the reference set."""
    return (
        f"reference set: {templates} voices (a figure is meaningful from "
        f"{MEANINGFUL_REFERENCES} on)"
    )
