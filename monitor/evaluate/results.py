"""What an audit finds: per feature, per length setting and for the whole corpus (the records
``evaluate`` writes into report.json, report.md and its plots)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.disclosure.lid import LidSummary
from monitor.disclosure.srd import RankFit, SrdStats
from monitor.disclosure.zebra import ZebraResult

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


LID_SOURCES = ("calibration", "crossfit")


@dataclass(frozen=True)
class FeatureAudit:
    """Every figure of one feature in one length setting (disclosures in bits, rates in [0, 1])."""

    feature: str
    histogram: np.ndarray  # (N,) rank histogram (fractional ties), trial counts
    histogram_stats: SrdStats
    fits: Mapping[str, RankFit]  # all five losses
    loss: str  # the loss whose fit is "the model"
    EER: float  # threshold sweep
    EER_rocch: float
    lid: np.ndarray  # (T,) LID per trial, bits
    lid_summary: LidSummary
    zebra: ZebraResult
    per_speaker: Mapping[str, float]  # alias -> MeanD of the speaker's LL-fitted model, bits

    @property
    def model(self) -> RankFit:
        return self.fits[self.loss]


@dataclass(frozen=True)
class SettingAudit:
    """One (test seconds, template seconds) setting of the protocol."""

    test_seconds: float
    template_seconds: float | None
    mean_test_seconds: float
    mean_template_seconds: float
    N: int
    T: int
    aliases: tuple[str, ...]
    dropped: tuple[str, ...]
    lid_source: str  # how the LID weights were obtained (printed in the report)
    features: Mapping[str, FeatureAudit]
    fusion: Mapping[str, float] = field(default_factory=dict)  # w_f of combined
    # feature → measured figures beside the population model's (monitor.evaluate.modelled)
    modelled: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Audit:
    """A whole audit: settings (the first is the main one) plus provenance."""

    settings: tuple[SettingAudit, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    skipped: tuple[tuple[str, str], ...] = ()  # (file, reason) never used
    protected: ProtectedAudit | None = None  # when --protected (or --protect) was given
    protection: ProtectionAudit | None = None  # when --protect was given

    @property
    def main(self) -> SettingAudit:
        return self.settings[0]


def composition_curves(
    lengths: np.ndarray, disclosure: np.ndarray, ceiling: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Shape curves anchored at the shortest length: D(L0)·(L/L0) and D(L0)·√(L/L0),
    capped at ``ceiling`` (log2 N per length) when given: no disclosure exceeds log2 N."""
    lengths = np.asarray(lengths, dtype=np.float64)
    disclosure = np.asarray(disclosure, dtype=np.float64)
    order = np.argsort(lengths)
    L0, D0 = lengths[order[0]], disclosure[order[0]]
    steps = lengths / L0
    curves = {"basic": D0 * steps, "advanced": D0 * np.sqrt(steps)}
    if ceiling is not None:
        cap = np.asarray(ceiling, dtype=np.float64)
        curves = {name: np.minimum(curve, cap) for name, curve in curves.items()}
    return curves


def finite_or_none(value: float) -> float | None:
    """JSON-friendly number: NaN becomes None (inf stays, JSON writer spells it)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


@dataclass(frozen=True)
class ProtectedAudit:
    """Paper 002: speaker similarity matrices of originals (O) and protected versions (P)."""

    corpus: str
    feature: str
    aliases: tuple[str, ...]
    segments: int
    M_OO: np.ndarray  # (N, N) sigmoid of mean PAV-calibrated LLRs
    M_OP: np.ndarray
    M_PP: np.ndarray
    D_diag_OO: float
    D_diag_OP: float
    D_diag_PP: float
    DeID: float  # fraction
    GVD_dB: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus,
            "feature": self.feature,
            "N": len(self.aliases),
            "segments": self.segments,
            "aliases": list(self.aliases),
            "D_diag_OO": self.D_diag_OO,
            "D_diag_OP": self.D_diag_OP,
            "D_diag_PP": self.D_diag_PP,
            "DeID": self.DeID,
            "GVD_dB": self.GVD_dB,
            "M_OO": self.M_OO.tolist(),
            "M_OP": self.M_OP.tolist(),
            "M_PP": self.M_PP.tolist(),
        }


CONDITIONS = ("original", "ignorant", "lazy-informed", "semi-informed")
"""The attackers of ``evaluate --protect`` (VoicePrivacy terms): templates and tests both clean;
clean templates against anonymised tests; templates anonymised the same way as the tests; the
same trials scored through a back-end trained on speech anonymised the same way
(:mod:`monitor.protect.backend`; measured when one is shipped or given)."""


@dataclass(frozen=True)
class WordErrors:
    """Word error rate of a real ASR on the corpus prompts, before and after anonymisation."""

    asr: str  # which recogniser
    utterances: int
    words: int  # reference words
    before: float  # fraction
    after: float


@dataclass(frozen=True)
class CommandAccuracy:
    """Share of utterances a recogniser restricted to the corpus's prompts transcribes exactly,
    before and after anonymisation, and its word error rate (the closed-set assistant's view)."""

    asr: str
    prompts: int  # distinct sentences the grammar allows
    utterances: int
    before: float  # fraction exactly right
    after: float
    wer_before: float
    wer_after: float


@dataclass(frozen=True)
class ProtectionAudit:
    """``evaluate --protect``: the main setting's audit under each attacker (:data:`CONDITIONS`),
    on the utterances present in both versions, and the word error rates."""

    method: str
    alpha: str  # "0.8" or "U[0.5, 0.9]" (drawn per utterance)
    seed: int
    conditions: Mapping[str, SettingAudit]
    wer: WordErrors | None
    attacker: Mapping[str, Any] | None = None  # the semi-informed back-end's training facts
    commands: CommandAccuracy | None = None
