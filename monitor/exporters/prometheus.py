"""Every Prometheus instrument of voxmeter, on a registry passed in.

:class:`Metrics` creates the instruments; :class:`PrometheusExporter` turns daemon events into
``set``/``inc``/``observe`` calls and serves ``/metrics`` (HTTP or HTTPS with client
certificates) from prometheus_client's server thread. Figures that live in SQLite (alerts
waiting in the outbox) are read at scrape time by :class:`OutboxCollector`, so they are never
stale. Label values are aliases only; the series of an expired track are removed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monitor.errors import ConfigError
from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    Figures,
    PipelineStats,
    SourceCounts,
    StateChanged,
    TrackExpired,
    TrackRestored,
    WindowScored,
)
from monitor.exporters.prometheus_population import PopulationMetrics
from monitor.exporters.prometheus_received import ReceivedMetrics
from monitor.load import cpu
from monitor.load.shedding import SHED_ORDER
from monitor.settings.config import is_loopback
from monitor.settings.sections import PrometheusSettings
from monitor.store.database import open_store
from monitor.vocabulary import BUDGET_STATES

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 39217

STAGE_BUCKETS_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Fine around the 0.25 s target, so histogram_quantile can tell
#: 0.2 from 0.3 s.
LATENCY_BUCKETS_SECONDS = (
    0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


SOURCE_COUNTERS = {
    "audio_seconds": "Seconds of the source's audio that reached the measuring side.",
    "speech_seconds": "Seconds of the source's audio the VAD kept as speech.",
    "dropped_seconds": "Seconds of the source's audio lost: the measuring side was behind, a "
    "chunk could not be decoded, a gap.",
    "refused_streams": "Streams of the source not measured: audio.max_streams were already "
    "(relayed all the same).",
    "refused_seconds": "Seconds of audio of the refused streams.",
    "unattributed_seconds": "Seconds of the source's speech in windows the tracker gave to no "
    "one (two voices, near a member but not close enough, too short to open a track): counted, "
    "never in a person's figure.",
    "media_seconds": "Seconds of the source's speech given to its media track: a television or "
    "a radio talking on in many voices (tracker.media), never scored nor counted as strangers.",
}
"""``voxmeter_source_<field>_total{source}``: a field of ``SourceCounts`` each."""


def _instrument(kind: Any, registry: Any, name: str, doc: str, labels: Any = ()) -> Any:
    """A ``kind`` (Gauge, Counter) on ``registry``: the one way every instrument is declared."""
    return kind(name, doc, list(labels), registry=registry)


_Make = Callable[..., Any]  # declares one instrument on the metrics' registry


class Metrics:
    """Every instrument except those read at scrape time (see OutboxCollector)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # family by family, in this order: the exposition lists them as registered
        gauge = partial(_instrument, Gauge, registry)
        counter = partial(_instrument, Counter, registry)
        self._declare_disclosure(gauge)
        self._declare_audio(gauge, counter, registry)
        self._declare_health(gauge, counter)
        zeros = {self.frames: ("total", "speech"), self.shed_seconds: SHED_ORDER}
        zeros |= {self.alerts: BUDGET_STATES, self.cpu_seconds: cpu.STAGES}
        for instrument, labels in zeros.items():  # 0 before the first stats, so rate() works
            for label in labels:
                instrument.labels(label)

    def _declare_disclosure(self, gauge: _Make) -> None:
        """What a speaker disclosed, its bounds and budget: the figures the product is for."""
        self.disclosure_bits = gauge(
            "voxmeter_disclosure_bits",
            "Cumulative disclosure of the speaker's pooled speech this period, in bits.",
            ("speaker", "feature", "measure"),
        )
        self.window_disclosure_bits = gauge(
            "voxmeter_window_disclosure_bits",
            "Disclosure of the speaker's last window alone, in bits.",
            ("speaker", "feature", "measure"),
        )
        self.composition_bound_bits = gauge(
            "voxmeter_composition_bound_bits",
            "DP composition bound on the speaker's cumulative disclosure, in bits.",
            ("speaker", "bound"),
        )
        self.disclosure_ceiling_bits = gauge(
            "voxmeter_disclosure_ceiling_bits",
            "Largest possible disclosure, log2 N_pop (population.size), in bits.",
        )
        self.budget_bits = gauge(
            "voxmeter_budget_bits",
            "Disclosure budget of the speaker per period, in bits.",
            ("speaker",),
        )
        self.budget_state = gauge(
            "voxmeter_budget_state",
            "1 for the speaker's current budget state, 0 otherwise.",
            ("speaker", "state"),
        )
        self.information_gain_bits = gauge(
            "voxmeter_information_gain_bits",
            "Information gain log2 N - H(P) about an unknown voice, in bits.",
            ("track", "top_candidate"),
        )

    def _declare_audio(self, gauge: _Make, counter: _Make, registry: CollectorRegistry) -> None:
        """The audio heard and how fast the stages got through it."""
        self.speech_seconds = counter(
            "voxmeter_speech_seconds",
            "Seconds of speech attributed to the speaker since the daemon started.",
            ("speaker",),
        )
        self.frames = counter("voxmeter_frames", "VAD frames: total seen, speech.", ("kind",))
        self.audio_seconds = counter(
            "voxmeter_audio_seconds", "Seconds of audio read from the source."
        )
        self.audio_dropped_seconds = counter(
            "voxmeter_audio_dropped_seconds",
            "Seconds of audio lost before scoring: a full queue, a gap in the input, a chunk "
            "that could not be decoded, a second Wyoming client.",
        )
        self.stage_seconds = Histogram(
            "voxmeter_stage_seconds",
            "Processing time of one item by one pipeline stage.",
            ["stage"],
            buckets=STAGE_BUCKETS_SECONDS,
            registry=registry,
        )
        self.window_latency_seconds = Histogram(
            "voxmeter_window_latency_seconds",
            "Time from the end of a window to its metrics.",
            buckets=LATENCY_BUCKETS_SECONDS,
            registry=registry,
        )
        self.realtime_factor = gauge(
            "voxmeter_realtime_factor", "Busy CPU seconds of the heavy stages per audio second."
        )
        self.queue_depth = gauge(
            "voxmeter_queue_depth", "Items waiting in a pipeline queue.", ("queue",)
        )
        self.templates = gauge(
            "voxmeter_templates",
            "Identity templates measured against, per feature.",
            ("feature",),
        )
        self.calibration_extrapolated = gauge(
            "voxmeter_calibration_extrapolated",
            "1 when the evidence is longer than the last calibration bucket.",
            ("feature",),
        )

    def _declare_health(self, gauge: _Make, counter: _Make) -> None:
        """Alerts, the broker, the device, the measuring side's failures and lag; then per named
        source (audio.sources; a daemon of one source has one), from PipelineStats."""
        self.alerts = counter(
            "voxmeter_alerts", "Budget alerts raised, by the state entered.", ("state",)
        )
        self.mqtt_connected = gauge(
            "voxmeter_mqtt_connected", "1 while the MQTT broker connection is up."
        )
        self.mqtt_enabled = gauge(
            "voxmeter_mqtt_enabled",
            "1 when this daemon publishes to MQTT (alerts rules on the outbox need it).",
        )
        self.audio_device_errors = counter(
            "voxmeter_audio_device_errors", "Audio device failures since the daemon started."
        )
        self.measuring_restarts = counter(
            "voxmeter_measuring_restarts",
            "Failures of the measuring stages survived by restarting them (Wyoming proxy: the "
            "relay goes on); the audio in flight at each is unmeasured.",
        )
        self.shed_seconds = counter(
            "voxmeter_shed_seconds",
            "Seconds of speech measured without a feature because the measuring side lagged "
            "behind live audio (phone decoding shed first, then turn splitting; never the "
            "embedding).",
            ("feature",),
        )
        self.cpu_seconds = counter("voxmeter_cpu_seconds", cpu.HELP, ("stage",))
        self.measuring_lag = gauge(
            "voxmeter_measuring_lag_seconds",
            "How far the measuring side is behind live audio now (shedding starts at "
            "load.shed_lag_seconds).",
        )
        self.source_counters = {
            field: counter(f"voxmeter_source_{field}", doc, ("source",))
            for field, doc in SOURCE_COUNTERS.items()
        }
        self.source_streams = gauge(
            "voxmeter_source_streams",
            "Streams of the source measured now (a Wyoming proxy: one per client).",
            ("source",),
        )
        self.source_windows = counter(
            "voxmeter_source_windows", "Windows scored from the source's speech.", ("source",)
        )

    @property
    def per_speaker(self) -> tuple[Gauge | Counter, ...]:
        """Instruments with a ``speaker`` label: cleared when a track expires."""
        return (
            self.disclosure_bits,
            self.window_disclosure_bits,
            self.composition_bound_bits,
            self.budget_bits,
            self.budget_state,
            self.speech_seconds,
        )


class OutboxCollector(Collector):
    """``voxmeter_alerts_pending`` read from the store's outbox at scrape time.

    ``pending_count`` runs on the scrape thread, so it must open its own database connection.
    A failure leaves the metric out of that scrape (logged) rather than exporting a false 0.
    """

    name = "voxmeter_alerts_pending"
    documentation = "Alerts in the outbox not yet acknowledged by the MQTT broker."

    def __init__(self, pending_count: Callable[[], int]) -> None:
        self._pending_count = pending_count

    def describe(self) -> list[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation)]

    def collect(self) -> Iterable[Metric]:
        try:
            value = self._pending_count()
        except Exception:
            logger.exception("cannot count pending alerts for %s", self.name)
            return
        yield GaugeMetricFamily(self.name, self.documentation, value=float(value))


class PrometheusExporter:
    """Daemon events → instruments; serves them on ``host:port`` (TLS when certfile is set).

    Clock and registry are arguments so tests drive :meth:`apply` directly and assert through
    ``registry.get_sample_value``.
    """

    name = "prometheus"

    def __init__(
        self,
        settings: PrometheusSettings,
        *,
        db_path: Path | None = None,
        registry: CollectorRegistry | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        tls = _tls_options(settings)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics = Metrics(self.registry)
        self.received = ReceivedMetrics(self.registry)
        self.population = PopulationMetrics(self.registry)
        if db_path is not None:
            self.registry.register(OutboxCollector(partial(_count_pending, Path(db_path))))
        self.host = settings.host
        self.port = settings.port
        self._tls = tls
        self._monotonic = monotonic
        self._top_candidate: dict[str, str] = {}  # unknown track → top candidate label now set
        self._last_stats: PipelineStats | None = None
        self._server: WSGIServer | None = None

    # ---- I/O ----------------------------------------------------------------------------

    def start_server(self) -> WSGIServer:
        """Listen now (prometheus_client's daemon thread); ConfigError names the address."""
        if not is_loopback(self.host):
            logger.warning(
                "prometheus.host = %s: metrics (per-speaker disclosure) are reachable from "
                "other machines%s; use 127.0.0.1 unless that is meant",
                self.host,
                " (TLS with client certificates)"
                if self._tls["client_auth_required"]
                else ", without client certificates",
            )
        try:
            server, _thread = start_http_server(
                self.port, addr=self.host, registry=self.registry, **self._tls
            )
        except OSError as error:
            raise ConfigError(
                "prometheus.port", f"cannot serve metrics on {self.host}:{self.port}: {error}"
            ) from error
        self.port = int(server.server_address[1])  # the real port when 0 was asked for
        self._server = server
        logger.info("serving metrics on %s:%d", self.host, self.port)
        return server

    def stop_server(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    async def run(self) -> None:
        """Serve /metrics until cancelled."""
        if self._server is None:
            self.start_server()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.to_thread(self.stop_server)

    async def handle(self, event: DaemonEvent) -> None:
        self.apply(event)

    def set_mqtt_enabled(self, enabled: bool) -> None:
        """Whether an MQTT exporter drains the outbox: without one, pending alerts are normal."""
        self.metrics.mqtt_enabled.set(1.0 if enabled else 0.0)

    def set_mqtt_connected(self, connected: bool) -> None:
        """Connection listener for the MQTT exporter."""
        self.metrics.mqtt_connected.set(1.0 if connected else 0.0)

    # ---- events → instruments ------------------------------------------------------------

    def apply(self, event: DaemonEvent) -> None:
        """Update the instruments for one event (synchronous: no I/O)."""
        match event:
            case DaemonStarted():
                self._started(event)
            case WindowScored():
                self._scored(event)
            case TrackRestored():
                self._figures(event.figures)
            case StateChanged():
                self.metrics.alerts.labels(event.to_state).inc()
                self._set_state(event.track, event.to_state)
                self.metrics.budget_bits.labels(event.track).set(event.budget_bits)
            case TrackExpired():
                self._expire(event.track)
            case PipelineStats():
                self._stats(event)

    def _started(self, event: DaemonStarted) -> None:
        m = self.metrics
        m.disclosure_ceiling_bits.set(event.ceiling_bits)
        self.population.started(event)
        for feature, count in event.templates.items():
            m.templates.labels(feature).set(count)
        for track, state in event.states.items():
            self._set_state(track, state)
            m.budget_bits.labels(track).set(event.budget_bits)

    def _scored(self, event: WindowScored) -> None:
        """A new window: its figures, plus speech, stage times and latency."""
        self._figures(event.figures, event.window_speech_seconds)
        m = self.metrics
        m.speech_seconds.labels(event.figures.track).inc(max(0.0, event.window_speech_seconds))
        if event.stream.source:
            m.source_windows.labels(event.stream.source).inc()
        for stage, seconds in event.stage_seconds.items():
            m.stage_seconds.labels(stage).observe(seconds)
        latency = self._monotonic() - event.window_closed_monotonic
        m.window_latency_seconds.observe(max(0.0, latency))

    def _figures(self, figures: Figures, scored_seconds: float = 0.0) -> None:
        """The gauges of a track's latest window (also for a track restored from the ledger)."""
        self.received.figures(figures, scored_seconds=scored_seconds)
        self.population.figures(figures)
        m = self.metrics
        speaker = figures.track
        for item in figures.disclosures:
            m.disclosure_bits.labels(speaker, item.feature, item.measure).set(item.cumulative_bits)
            m.window_disclosure_bits.labels(speaker, item.feature, item.measure).set(
                item.window_bits
            )
        for bound, value in figures.bounds.bits().items():
            m.composition_bound_bits.labels(speaker, bound).set(value)
        m.disclosure_ceiling_bits.set(figures.ceiling_bits)
        m.budget_bits.labels(speaker).set(figures.budget_bits)
        self._set_state(speaker, figures.state)
        if figures.information_gain_bits is not None:
            candidate = figures.top_candidate or ""
            previous = self._top_candidate.get(speaker)
            if previous is not None and previous != candidate:
                m.information_gain_bits.remove(speaker, previous)
            m.information_gain_bits.labels(speaker, candidate).set(figures.information_gain_bits)
            self._top_candidate[speaker] = candidate
        for feature, extrapolated in figures.extrapolated.items():
            m.calibration_extrapolated.labels(feature).set(1.0 if extrapolated else 0.0)

    def _set_state(self, speaker: str, current: str) -> None:
        for state in BUDGET_STATES:
            self.metrics.budget_state.labels(speaker, state).set(1.0 if state == current else 0.0)

    def _expire(self, track: str) -> None:
        for instrument in self.metrics.per_speaker:
            instrument.remove_by_labels({"speaker": track})
        self.received.expire(track)
        self.population.expire(track)
        self.metrics.information_gain_bits.remove_by_labels({"track": track})
        self._top_candidate.pop(track, None)

    def _stats(self, event: PipelineStats) -> None:
        m = self.metrics
        last = self._last_stats
        previous = _frame_counts(last)
        for kind, value in _frame_counts(event).items():
            m.frames.labels(kind).inc(max(0, value - previous[kind]))
        m.audio_seconds.inc(max(0.0, event.audio_seconds - (last.audio_seconds if last else 0.0)))
        dropped_before = last.dropped_seconds if last else 0.0
        m.audio_dropped_seconds.inc(max(0.0, event.dropped_seconds - dropped_before))
        previous_errors = last.audio_device_errors if last else 0
        m.audio_device_errors.inc(max(0, event.audio_device_errors - previous_errors))
        previous_restarts = last.measuring_restarts if last else 0
        m.measuring_restarts.inc(max(0, event.measuring_restarts - previous_restarts))
        for name in ("shed_seconds", "cpu_seconds"):  # running totals per label: their growth
            before = getattr(last, name) if last else {}
            for label, total in getattr(event, name).items():
                getattr(m, name).labels(label).inc(max(0.0, total - before.get(label, 0.0)))
        m.measuring_lag.set(event.lag_seconds)
        m.realtime_factor.set(event.realtime_factor)
        for queue, depth in event.queue_depths.items():
            m.queue_depth.labels(queue).set(depth)
        for source, counts in event.sources.items():
            before = last.sources.get(source, SourceCounts()) if last else SourceCounts()
            for field, instrument in m.source_counters.items():
                grown = getattr(counts, field) - getattr(before, field)
                instrument.labels(source).inc(max(0, grown))
            m.source_streams.labels(source).set(counts.streams)
        self._last_stats = event


def _frame_counts(stats: PipelineStats | None) -> dict[str, int]:
    """Frame totals by ``kind`` label (all 0 before the first stats)."""
    if stats is None:
        return {"total": 0, "speech": 0}
    return {"total": stats.frames_total, "speech": stats.frames_speech}


def _count_pending(db_path: Path) -> int:
    """Outbox rows not yet acknowledged, on a connection of the calling (scrape) thread."""
    with open_store(db_path, read_only=True) as store:
        return store.pending_count()


def _tls_options(settings: PrometheusSettings) -> dict[str, Any]:
    """prometheus_client's TLS arguments; ConfigError for half a configuration."""
    certfile = settings.certfile or None
    keyfile = settings.keyfile or None
    client_cafile = settings.client_cafile or None
    client_auth_required = settings.client_auth_required
    if (certfile is None) != (keyfile is None):
        raise ConfigError("prometheus.certfile", "TLS needs both prometheus.certfile and .keyfile")
    if client_auth_required and (certfile is None or client_cafile is None):
        raise ConfigError(
            "prometheus.client_auth_required",
            "needs prometheus.certfile, .keyfile and .client_cafile",
        )
    for key, path in (
        ("certfile", certfile),
        ("keyfile", keyfile),
        ("client_cafile", client_cafile),
    ):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"prometheus.{key}", f"no such file: {path}")
    return {
        "certfile": certfile,
        "keyfile": keyfile,
        "client_cafile": client_cafile,
        "client_auth_required": client_auth_required,
    }
