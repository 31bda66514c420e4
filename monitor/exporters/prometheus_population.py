"""The population a figure is stated against, and where the reference cannot vouch for it.

``voxmeter_population_size_identities`` is N_pop (``[population] size``; the templates present
when figures are against them alone). Where a speaker's budget figure lies beyond what the
reference population can validate, ``voxmeter_disclosure_beyond_reference{speaker}`` is 1 and
``voxmeter_disclosure_vouched_bits{speaker}`` holds the lower bound the reference does vouch
for ("at least X bits"); elsewhere the flag is 0 and the vouched figure is the figure itself.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from monitor.events.figures import Figures
from monitor.events.messages import DaemonStarted


class PopulationMetrics:
    """N_pop, and per speaker the "at least" flag and bound of the budget's figure."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.size = Gauge(
            "voxmeter_population_size_identities",
            "N_pop, the population every figure is stated against (identities); the ceiling "
            "is log2 of it.",
            registry=registry,
        )
        self.beyond_reference = Gauge(
            "voxmeter_disclosure_beyond_reference",
            "1 when the speaker's budget figure lies beyond what the reference population can "
            "validate (the figure is the model's estimate; the reference vouches for at least "
            "voxmeter_disclosure_vouched_bits), else 0.",
            ("speaker",),
            registry=registry,
        )
        self.vouched_bits = Gauge(
            "voxmeter_disclosure_vouched_bits",
            "What the reference population vouches for of the speaker's budget figure, in "
            "bits: the figure itself, or its lower bound where it lies beyond the reference.",
            ("speaker",),
            registry=registry,
        )

    def started(self, event: DaemonStarted) -> None:
        self.size.set(event.population or max(event.templates.values(), default=0))

    def figures(self, figures: Figures) -> None:
        bound = figures.budget_at_least_bits
        self.size.set(figures.population_size)
        self.beyond_reference.labels(figures.track).set(0.0 if bound is None else 1.0)
        shown = figures.budget_figure_bits if bound is None else bound
        self.vouched_bits.labels(figures.track).set(shown)

    def expire(self, track: str) -> None:
        for gauge in (self.beyond_reference, self.vouched_bits):
            gauge.remove_by_labels({"speaker": track})
