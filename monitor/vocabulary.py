"""The words the daemon, the store and the exporters share: one place to spell them.

Feature names, the fused ``combined`` feature, the two measures, the budget states and the
composition bounds. Below every other module (it imports nothing from monitor), so the store and
the daemon can both use it without an upward import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

EXTRACTORS: Final[tuple[str, ...]] = ("f0", "phone", "embedding")
"""The three feature extractors (monitor.features), in their canonical order."""

COMBINED: Final = "combined"
"""The calibrated fusion of the extractors."""

FEATURES: Final[tuple[str, ...]] = (*EXTRACTORS, COMBINED)
"""Feature labels of the disclosure figures: the three extractors and their fusion."""

TRACKING_FEATURE: Final = "embedding"
"""The feature the speaker tracker follows voices by; a daemon always extracts it."""

Measure = Literal["srd", "lid"]
MEASURES: Final[tuple[Measure, ...]] = get_args(Measure)
"""Measures: SRD log2(N·γ_r) and LID log2(N·P(l|s))."""

BudgetState = Literal["ok", "warning", "exceeded"]
BUDGET_STATES: Final[tuple[BudgetState, ...]] = get_args(BudgetState)
"""Budget states, in increasing order."""

Bound = Literal["basic", "advanced", "optimal"]
BOUNDS: Final[tuple[Bound, ...]] = get_args(Bound)
"""Composition bounds (basic, advanced as min(basic, Thm 3.4), optimal)."""

SimilarityKind = Literal["histogram", "embedding"]
"""How a feature's observations are compared: −Jensen-Shannon divergence of histograms, or the
cosine of embeddings (monitor.features.similarity)."""


@dataclass(frozen=True)
class FigureKey:
    """One (feature, measure) pair, e.g. the budget measure ``combined.lid``."""

    feature: str  # one of FEATURES
    measure: Measure

    @classmethod
    def parse(cls, text: str) -> FigureKey:
        """``FEATURE.MEASURE`` → FigureKey; ValueError naming the accepted words otherwise."""
        feature, _, measure = text.partition(".")
        if feature not in FEATURES or measure not in MEASURES:
            raise ValueError(
                f"must be FEATURE.MEASURE ({', '.join(FEATURES)}; {' or '.join(MEASURES)})"
            )
        return cls(feature, measure)  # type: ignore[arg-type]  # checked against MEASURES

    def __str__(self) -> str:
        return f"{self.feature}.{self.measure}"


PROTECT_KEY: Final = "voxmeter_protect"
"""The key the relay's transform (monitor.protect.relay) sets in a PROTECTED utterance's
``audio-start`` data — ``{"method": "mcadams", "alpha": α}`` — on the event object the tap is
then offered, never in the bytes sent upstream; the measuring side reads it to reproduce what
the upstream received (monitor.scoring.received). Absent: the utterance passed clear."""
