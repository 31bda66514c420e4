"""The received view's Prometheus instruments, beside the original figures.

The original series (``voxmeter_disclosure_bits`` …) are unchanged: they measure the audio as
it was spoken. What a protected upstream received has its own series, labelled
``view="received"`` and ``attacker="ignorant"`` (clean templates) or ``"lazy"`` (templates
anonymised the same way), set only for a track whose audio was protected this period. Which
figure the budget compared is ``voxmeter_budget_figure_bits{speaker, view}``: ``received``
(the stronger attacker) once the track was protected this period, ``original`` otherwise.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from monitor.events.figures import Figures

VIEW = "received"
_LABELS = ("speaker", "feature", "measure", "view", "attacker")


class ReceivedMetrics:
    """Instruments of the received view; every one has a ``speaker`` label (expired with it)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.disclosure_bits = Gauge(
            "voxmeter_received_disclosure_bits",
            "Cumulative disclosure of what the upstream received from the speaker this period "
            "(protected windows anonymised, clear ones as spoken), per attacker, in bits.",
            _LABELS,
            registry=registry,
        )
        self.window_disclosure_bits = Gauge(
            "voxmeter_received_window_disclosure_bits",
            "Disclosure of the speaker's last window as the upstream received it, in bits.",
            _LABELS,
            registry=registry,
        )
        self.speech_seconds = Counter(
            "voxmeter_received_speech_seconds",
            "Seconds of the speaker's speech the upstream received anonymised (protected).",
            ("speaker", "view"),
            registry=registry,
        )
        self.budget_figure_bits = Gauge(
            "voxmeter_budget_figure_bits",
            "The figure the speaker's budget compares, in bits: of what the upstream received "
            "(view=received, the stronger attacker) once protected this period, else original.",
            ("speaker", "view"),
            registry=registry,
        )
        self._views: dict[str, str] = {}  # speaker → view of its budget figure series

    def figures(self, figures: Figures, *, scored_seconds: float = 0.0) -> None:
        """A track's latest figures; ``scored_seconds``: speech of a window just scored."""
        speaker, received = figures.track, figures.received
        view = "original" if received is None else VIEW
        if self._views.get(speaker, view) != view:
            self.budget_figure_bits.remove(speaker, self._views[speaker])
        self._views[speaker] = view
        self.budget_figure_bits.labels(speaker, view).set(figures.budget_figure_bits)
        if received is None:
            return
        for attacker, items in received.attackers.items():
            for d in items:
                labels = (speaker, d.feature, d.measure, VIEW, attacker)
                self.disclosure_bits.labels(*labels).set(d.cumulative_bits)
                self.window_disclosure_bits.labels(*labels).set(d.window_bits)
        counter = self.speech_seconds.labels(speaker, VIEW)  # exported from the first one on
        if received.window_protected and scored_seconds > 0:
            counter.inc(scored_seconds)

    def expire(self, speaker: str) -> None:
        for instrument in (
            self.disclosure_bits,
            self.window_disclosure_bits,
            self.speech_seconds,
            self.budget_figure_bits,
        ):
            instrument.remove_by_labels({"speaker": speaker})
        self._views.pop(speaker, None)
