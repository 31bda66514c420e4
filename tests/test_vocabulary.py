"""The shared vocabulary: one spelling of features, measures, states and bounds."""

from __future__ import annotations

import pytest

from monitor.errors import ConfigError
from monitor.features.base import FEATURE_NAMES, HistogramFeature
from monitor.features.embedding import CampplusEmbedding, EcapaEmbedding, GE2EEmbedding
from monitor.settings.config import load_config
from monitor.store.outbox import BudgetRecord
from monitor.vocabulary import (
    BOUNDS,
    BUDGET_STATES,
    COMBINED,
    EXTRACTORS,
    FEATURES,
    MEASURES,
    FigureKey,
)


def test_words_are_spelled_once_and_agree_with_the_feature_registry() -> None:
    assert EXTRACTORS == FEATURE_NAMES
    assert (*EXTRACTORS, COMBINED) == FEATURES
    assert MEASURES == ("srd", "lid")
    assert BUDGET_STATES == ("ok", "warning", "exceeded")
    assert BOUNDS == ("basic", "advanced", "optimal")
    assert BudgetRecord.__name__ != "BudgetState"  # the row and the literal no longer clash


@pytest.mark.parametrize("text", [f"{f}.{m}" for f in FEATURES for m in MEASURES])
def test_figure_key_round_trips(text: str) -> None:
    key = FigureKey.parse(text)
    assert str(key) == text and key in {FigureKey(*text.split("."))}


@pytest.mark.parametrize("text", ["combined", "combined.", "voice.lid", "f0.eer", "", ".lid"])
def test_figure_key_refuses_other_words(text: str) -> None:
    with pytest.raises(ValueError, match=r"FEATURE\.MEASURE"):
        FigureKey.parse(text)


def test_budget_measure_is_parsed_once_in_config() -> None:
    config = load_config(None, ["budget.measure=f0.srd"])
    assert config.budget.figure == FigureKey("f0", "srd")
    assert config.budget.figure is config.budget.figure  # cached, not parsed per use
    with pytest.raises(ConfigError, match=r"budget\.measure"):
        load_config(None, ["budget.measure=embedding.eer"])


def test_features_declare_their_similarity_kind() -> None:
    assert HistogramFeature.similarity_kind == "histogram"
    for backend in (EcapaEmbedding, CampplusEmbedding, GE2EEmbedding):
        assert backend.similarity_kind == "embedding"
