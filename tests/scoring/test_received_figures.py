"""The received view's record and series: the stronger attacker is the budget figure, the JSON
form reads back (a restart restores it), and Prometheus switches a speaker's budget-figure
series from view="original" to view="received" and drops every series when it expires."""

from __future__ import annotations

import dataclasses

import pytest
from prometheus_client import CollectorRegistry

from monitor.events.figures import Figures, ReceivedFigures
from monitor.events.messages import Disclosure, TrackExpired
from monitor.exporters.prometheus import PrometheusExporter
from monitor.settings.sections import PrometheusSettings
from monitor.vocabulary import FEATURES, MEASURES, FigureKey
from tests.exporters.exporter_events import scored


def _received(ignorant: float, lazy: float, *, protected: bool = True) -> ReceivedFigures:
    def items(bits: float) -> tuple[Disclosure, ...]:
        return tuple(
            Disclosure(f, m, bits + (0.5 if f == "embedding" else 0.0), bits / 2)
            for f in FEATURES
            for m in MEASURES
        )

    return ReceivedFigures({"ignorant": items(ignorant), "lazy": items(lazy)}, 2, 5.5, protected)


def test_the_budget_compares_the_stronger_attacker_and_the_record_reads_back() -> None:
    figures = dataclasses.replace(scored("home-1", combined_bits=2.0).figures)
    assert figures.budget_figure_bits == 2.0  # not protected: the speech as spoken
    assert "received" not in figures.to_json()  # a clear track's JSON is as before
    protected = dataclasses.replace(figures, received=_received(1.2, 1.5))
    assert protected.budget_figure_bits == 1.5
    assert protected.received is not None
    assert protected.received.bits(FigureKey.parse("embedding.lid")) == 2.0
    assert protected.received.bits(FigureKey.parse("combined.lid"), cumulative=False) == 0.75
    data = protected.to_json()
    assert data["budget_figure_bits"] == 1.5
    assert data["received"]["attackers"]["lazy"]["combined.lid"] == [1.5, 0.75]
    back = Figures.from_json(data)
    assert back == protected


def test_prometheus_moves_the_budget_figure_to_the_received_view() -> None:
    registry = CollectorRegistry()
    exporter = PrometheusExporter(PrometheusSettings(port=0), registry=registry)
    clear = scored("home-1", combined_bits=2.0)
    exporter.apply(clear)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"speaker": "home-1", **labels})

    assert value("voxmeter_budget_figure_bits", view="original") == 2.0
    assert value("voxmeter_received_speech_seconds_total", view="received") is None
    figures = dataclasses.replace(clear.figures, received=_received(1.2, 1.5))
    exporter.apply(dataclasses.replace(clear, figures=figures))
    assert value("voxmeter_budget_figure_bits", view="original") is None
    assert value("voxmeter_budget_figure_bits", view="received") == 1.5
    labels = {"feature": "combined", "measure": "lid", "view": "received"}
    assert value("voxmeter_received_disclosure_bits", attacker="ignorant", **labels) == 1.2
    assert value("voxmeter_received_window_disclosure_bits", attacker="lazy", **labels) == 0.75
    assert value("voxmeter_disclosure_bits", feature="combined", measure="lid") == 2.0
    assert value("voxmeter_received_speech_seconds_total", view="received") == pytest.approx(3.0)
    unprotected = dataclasses.replace(figures, received=_received(1.3, 1.4, protected=False))
    exporter.apply(dataclasses.replace(clear, figures=unprotected))  # a clear window after
    assert value("voxmeter_received_speech_seconds_total", view="received") == pytest.approx(3.0)
    exporter.apply(TrackExpired("home-1", "local", 30.0, 1_800_000_100.0))
    for name in ("voxmeter_received_disclosure_bits", "voxmeter_budget_figure_bits"):
        assert not [
            s
            for m in registry.collect()
            for s in m.samples
            if s.name == name and s.labels.get("speaker") == "home-1"
        ]
