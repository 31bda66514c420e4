"""The daemon: source → vad → windower → features → tracker → scorer → ledger → exporters.

One supervisor (:meth:`Pipeline.run`) owns one ``asyncio.TaskGroup``; every stage is a task
named ``voxmeter.<stage>`` reading one bounded queue and writing the next (DESIGN §14, STYLE
§3–4). Stages are thin loops around synchronous cores (:class:`WindowFeatures`,
:class:`~monitor.daemon.tracker.SpeakerTracker`, :class:`TrackScorer`, :class:`LedgerWriter`)
so the logic is tested without an event loop. Feature extraction and scoring run in a thread
executor; ledger writes are small SQLite transactions on the loop thread, so cancelling a task
never interrupts one. ``None`` in a queue means end of input.

State survives restarts: every window commits its record and the track's pooled evidence in one
transaction, and a starting daemon resumes the current period's tracks from the ledger, so a
SIGKILL loses at most the window in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from monitor import __version__
from monitor.audio.sources import AudioSource, FileSource, MicrophoneSource, open_source
from monitor.audio.vad import FrameVad, SileroVad, WebRtcVad
from monitor.audio.windows import SpeechWindow, Windower
from monitor.calibration.fit import CalibrationSet, load_default
from monitor.daemon.budget import BudgetMachine, Transition, period_start
from monitor.daemon.config import Config, LoggingSettings
from monitor.daemon.events import (
    DaemonEvent,
    DaemonStarted,
    DaemonStopping,
    Exporter,
    FeatureWindow,
    PipelineStats,
    StateChanged,
    TrackedWindow,
    TrackExpired,
    WindowScored,
)
from monitor.daemon.scorer import Scorer, TrackScore, score_track
from monitor.daemon.tracker import EMBEDDING, SpeakerTracker
from monitor.errors import StoreError
from monitor.features.base import Feature, Observation, get_feature
from monitor.store.database import Store

logger = logging.getLogger(__name__)

RATE_HZ = 16000


# ---- synchronous cores -----------------------------------------------------------------------


class WindowFeatures:
    """One observation per enabled feature for a window of speech (runs in the executor)."""

    def __init__(self, features: Mapping[str, Feature]) -> None:
        self.features = dict(features)

    def observe(self, name: str, samples: np.ndarray) -> Observation:
        return self.features[name].observe(samples, RATE_HZ)

    def warm_up(self) -> None:
        """Load every model now (torch, pocketsphinx) so the first window is not late."""
        noise = np.random.default_rng(0).normal(0.0, 0.05, RATE_HZ).astype(np.float32)
        for feature in self.features.values():
            # noise may hold no voiced frame: the model is loaded anyway
            with contextlib.suppress(ValueError):
                feature.observe(noise, RATE_HZ)


@dataclass
class TrackEvidence:
    """What the daemon holds about one track in the current period."""

    track: str
    kind: str
    identity: str | None
    pooled: dict[str, Observation] = field(default_factory=dict)
    windows: int = 0
    speech_seconds: float = 0.0
    max_window_bits: float = -math.inf


@dataclass(frozen=True)
class ScoredWindow:
    """Scorer → ledger: a tracked window, its track's new evidence and the figures."""

    tracked: TrackedWindow
    evidence: TrackEvidence
    score: TrackScore
    period_start_unix: float
    scorer_seconds: float


class TrackScorer:
    """Pools each track's windows and scores the pooled evidence (runs in the executor)."""

    def __init__(self, scorer: Scorer, features: Mapping[str, Feature], measure: str) -> None:
        self.scorer = scorer
        self.features = dict(features)
        feature, _, name = measure.partition(".")
        self.measure = (feature, name)
        self.tracks: dict[str, TrackEvidence] = {}
        self.period_start_unix = -math.inf

    def restore(self, evidence: TrackEvidence) -> None:
        self.tracks[evidence.track] = evidence

    def process(self, tracked: TrackedWindow, period_start_unix: float) -> ScoredWindow:
        started = time.perf_counter()
        if period_start_unix != self.period_start_unix:
            self.tracks.clear()  # a new period: evidence starts afresh
            self.period_start_unix = period_start_unix
        window = tracked.window
        old = self.tracks.get(tracked.track) or TrackEvidence(
            tracked.track, tracked.kind, tracked.identity
        )
        pooled = {
            name: (
                feature.pool([old.pooled[name], window.observations[name]])
                if name in old.pooled
                else window.observations[name]
            )
            for name, feature in self.features.items()
        }
        speech = old.speech_seconds + window.speech_seconds
        score = score_track(
            self.scorer,
            identity=tracked.identity,
            pooled=pooled,
            pooled_seconds=speech,
            window=window.observations,
            window_seconds=window.speech_seconds,
            windows=old.windows + 1,
            max_window_bits=old.max_window_bits,
            measure=self.measure,
        )
        evidence = TrackEvidence(
            track=tracked.track,
            kind=tracked.kind,
            identity=tracked.identity,
            pooled=pooled,
            windows=old.windows + 1,
            speech_seconds=speech,
            max_window_bits=max(old.max_window_bits, score.window_bits),
        )
        self.tracks[tracked.track] = evidence
        return ScoredWindow(
            tracked, evidence, score, period_start_unix, time.perf_counter() - started
        )

    def expire(self, track: str) -> None:
        self.tracks.pop(track, None)

    def reset(self) -> None:
        self.tracks.clear()


def _finite(bits: float) -> float:
    """JSON and SQLite take no infinities: clamp to ±1e9 bits (never reached by real figures)."""
    return float(np.clip(bits, -1e9, 1e9))


class LedgerWriter:
    """Writes windows to the ledger and runs the budget machine (on the loop thread)."""

    def __init__(
        self,
        store: Store,
        budget: BudgetMachine,
        *,
        budget_bits: float,
        measure: str,
        templates: int,
        alert_topic: str,
        device_id: str,
        keep_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.budget = budget
        self.keep_seconds = keep_seconds
        self.budget_bits = budget_bits
        self.measure = measure
        self.templates = templates
        self.alert_topic = alert_topic
        self.device_id = device_id
        self.clock = clock
        self.wall_clock = wall_clock
        self.period_start_unix: float | None = None

    def _alert(
        self, change: Transition, scored: ScoredWindow | None, window_end_unix: float
    ) -> StateChanged:
        payload: dict[str, Any] = {
            "alias": change.track,
            "from": change.from_state,
            "to": change.to_state,
            "bits": _finite(change.bits),
            "budget": self.budget_bits,
            "features": {},
            "bounds": {},
            "window_end": window_end_unix,
            "device": self.device_id,
            "reason": change.reason,
        }
        if scored is not None:
            payload["features"] = {
                f"{d.feature}.{d.measure}": _finite(d.cumulative_bits)
                for d in scored.score.disclosures
            }
            b = scored.score.bounds
            payload["bounds"] = {
                "basic": b.basic_bits,
                "advanced": b.advanced_bits,
                "optimal": b.optimal_bits,
            }
        bits = _finite(change.bits)
        seq = self.store.transition(change.track, change.to_state, bits, payload, self.alert_topic)
        return StateChanged(
            track=change.track,
            from_state=change.from_state,
            to_state=change.to_state,
            bits=bits,
            budget_bits=self.budget_bits,
            seq=seq,
            reason=change.reason,  # type: ignore[arg-type]
            window_end_unix=window_end_unix,
            changed_unix=self.wall_clock(),
        )

    def start_period(self, period_start_unix: float) -> list[StateChanged]:
        """Enter a period; everyone not ok steps down to ok with one alert each."""
        self.period_start_unix = period_start_unix
        if self.keep_seconds is not None:  # evidence of periods beyond the kept ones goes
            self.store.prune_ledger(period_start_unix - self.keep_seconds)
        return [self._alert(c, None, self.wall_clock()) for c in self.budget.new_period()]

    def process(self, scored: ScoredWindow) -> list[DaemonEvent]:
        events: list[DaemonEvent] = []
        if scored.period_start_unix != self.period_start_unix:
            events.extend(self.start_period(scored.period_start_unix))
        started = self.clock()
        tracked, score, evidence = scored.tracked, scored.score, scored.evidence
        window = tracked.window
        feature, _, measure = self.measure.partition(".")
        figure = next(
            d.cumulative_bits
            for d in score.disclosures
            if d.feature == feature and d.measure == measure
        )
        previous = self.budget.state(tracked.track)
        change = self.budget.process(tracked.track, figure)
        state = self.budget.state(tracked.track)
        window_end_unix = window.closed_unix
        window_start_unix = window_end_unix - (window.end_seconds - window.start_seconds)
        figures = {
            "kind": tracked.kind,
            "identity": tracked.identity,
            "subject": score.subject,
            "window_index": window.index,
            "windows": evidence.windows,
            "pooled_speech_seconds": evidence.speech_seconds,
            "disclosures": {
                f"{d.feature}.{d.measure}": [_finite(d.cumulative_bits), _finite(d.window_bits)]
                for d in score.disclosures
            },
            "bounds": {
                "basic": score.bounds.basic_bits,
                "advanced": score.bounds.advanced_bits,
                "optimal": score.bounds.optimal_bits,
                "epsilon_nats": score.bounds.epsilon_nats,
            },
            "ceiling_bits": math.log2(self.templates),
            "templates": self.templates,
            "budget_bits": self.budget_bits,
            "budget_figure_bits": _finite(figure),
            "state": state,
            "information_gain_bits": score.information_gain_bits,
            "top_candidate": score.top_candidate,
            "top_candidate_bits": score.top_candidate_bits,
            "extrapolated": score.extrapolated,
        }
        self.store.record_window(
            tracked.track,
            period_start=scored.period_start_unix,
            window_start=window_start_unix,
            window_end=window_end_unix,
            speech_seconds=window.speech_seconds,
            pooled=evidence.pooled,
            figures=figures,
            window_bits=_finite(score.window_bits),
        )
        if change is not None:
            events.append(self._alert(change, scored, window_end_unix))
        elif previous == state:
            self.store.update_budget(tracked.track, state, _finite(figure))
        scored_unix = self.wall_clock()
        ledger_seconds = self.clock() - started
        events.insert(
            0,
            WindowScored(
                track=tracked.track,
                kind=tracked.kind,
                identity=tracked.identity,
                window_index=window.index,
                window_start_seconds=window.start_seconds,
                window_end_seconds=window.end_seconds,
                window_speech_seconds=window.speech_seconds,
                pooled_speech_seconds=evidence.speech_seconds,
                windows=evidence.windows,
                disclosures=score.disclosures,
                bounds=score.bounds,
                ceiling_bits=math.log2(self.templates),
                templates=self.templates,
                budget_bits=self.budget_bits,
                budget_measure=self.measure,
                budget_figure_bits=figure,
                state=state,
                information_gain_bits=score.information_gain_bits,
                top_candidate=score.top_candidate,
                top_candidate_bits=score.top_candidate_bits,
                extrapolated=score.extrapolated,
                period_start_unix=scored.period_start_unix,
                window_closed_unix=window.closed_unix,
                window_closed_monotonic=window.closed_monotonic,
                scored_unix=scored_unix,
                latency_seconds=self.clock() - window.closed_monotonic,
                stage_seconds={
                    "features": window.feature_seconds,
                    "scorer": scored.scorer_seconds,
                    "ledger": ledger_seconds,
                },
            ),
        )
        return events


# ---- logs ------------------------------------------------------------------------------------


class LineFormatter(logging.Formatter):
    """One line per record: ``key=value`` pairs or one JSON object (no audio, aliases only)."""

    def __init__(self, style: str) -> None:
        super().__init__()
        self.json = style == "json"

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created)
            .astimezone()
            .isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields.update(getattr(record, "fields", {}))
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info).replace("\n", " | ")
        if self.json:
            return json.dumps(fields, default=str, separators=(",", ":"))
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items())


def _kv(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return json.dumps(text) if (" " in text or "=" in text or not text) else text


def configure_logging(settings: LoggingSettings, stream: Any = None) -> None:
    """Route the ``monitor`` loggers to one structured handler on stderr."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(LineFormatter(settings.format))
    root = logging.getLogger("monitor")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    root.propagate = False


class LogExporter:
    """Every daemon event as one structured log line."""

    name = "log"

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("monitor.daemon.events")

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def handle(self, event: DaemonEvent) -> None:
        match event:
            case WindowScored():
                fields: dict[str, Any] = {
                    "track": event.track,
                    "kind": event.kind,
                    "window": event.window_index,
                    "windows": event.windows,
                    "speech_s": round(event.pooled_speech_seconds, 2),
                    "bits": round(event.budget_figure_bits, 3),
                    "state": event.state,
                    "latency_s": round(event.latency_seconds, 3),
                }
                if event.kind == "unknown":
                    fields["gain_bits"] = round(event.information_gain_bits or 0.0, 3)
                    fields["top"] = event.top_candidate
                self.log.info("window", extra={"fields": fields})
            case StateChanged():
                self.log.warning(
                    "budget",
                    extra={
                        "fields": {
                            "track": event.track,
                            "from": event.from_state,
                            "to": event.to_state,
                            "bits": round(event.bits, 3),
                            "budget": event.budget_bits,
                            "seq": event.seq,
                            "reason": event.reason,
                        }
                    },
                )
            case TrackExpired():
                self.log.info("expired", extra={"fields": {"track": event.track}})
            case PipelineStats():
                self.log.debug(
                    "stats",
                    extra={
                        "fields": {
                            "frames": event.frames_total,
                            "speech": event.frames_speech,
                            "dropped": event.frames_dropped,
                            "device_errors": event.audio_device_errors,
                            "rtf": round(event.realtime_factor, 4),
                            "tracks": event.tracks,
                        }
                    },
                )
            case DaemonStarted():
                self.log.info(
                    "started",
                    extra={
                        "fields": {
                            "device": event.device_id,
                            "version": event.version,
                            "templates": max(event.templates.values(), default=0),
                            "restored": len(event.states),
                        }
                    },
                )
            case DaemonStopping():
                self.log.info("stopping", extra={"fields": {"reason": event.reason}})


# ---- the supervisor --------------------------------------------------------------------------


class _StopRequestError(Exception):
    """Raised by the supervisor task to end the TaskGroup."""


@dataclass
class RunSummary:
    """What a run did (the CLI prints it; tests read it)."""

    stop_reason: str
    windows: int
    audio_seconds: float
    frames_total: int
    frames_speech: int
    frames_dropped: int
    audio_device_errors: int
    last: dict[str, WindowScored]  # track → its last scored window
    alerts: list[StateChanged]


def _unknown(track: str) -> bool:
    return track.startswith("unknown-")


class Pipeline:
    """Owns the stages, their queues and the one TaskGroup (see module docstring)."""

    def __init__(
        self,
        config: Config,
        *,
        store: Store,
        source: AudioSource,
        scorer: Scorer,
        features: Mapping[str, Feature],
        profiles: Sequence[Any] = (),
        exporters: Sequence[Exporter] = (),
        device_id: str = "",
        vad: FrameVad | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store = store
        self.source = source
        self.scorer = scorer
        self.features = dict(features)
        self.exporters = list(exporters)
        self.device_id = device_id or socket.gethostname()
        self.clock = clock
        self.wall_clock = wall_clock
        audio = config.audio
        if vad is None:
            if audio.vad == "silero":
                vad = SileroVad(hangover_ms=audio.hangover_ms)
            else:
                vad = WebRtcVad(audio.vad_aggressiveness, hangover_ms=audio.hangover_ms)
        self.vad = vad
        self.windower = Windower(audio.window_seconds)
        self.window_features = WindowFeatures(self.features)
        self.tracker = SpeakerTracker(profiles, config.tracker, clock=clock, wall_clock=wall_clock)
        self.track_scorer = TrackScorer(scorer, self.features, config.budget.measure)
        self.budget = BudgetMachine(config.budget)
        from monitor.daemon.exporters.mqtt import topics_for

        self.ledger = LedgerWriter(
            store,
            self.budget,
            budget_bits=config.budget.bits,
            measure=config.budget.measure,
            templates=scorer.n,
            alert_topic=topics_for(config.mqtt, self.device_id).alerts,
            device_id=self.device_id,
            keep_seconds=(config.ledger.keep_periods - 1) * config.budget.period_seconds,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self._windows = 0
        self._busy: dict[str, float] = {"features": 0.0, "scorer": 0.0, "ledger": 0.0}
        self.audio_seconds = 0.0
        self.last: dict[str, WindowScored] = {}
        self.alerts: list[StateChanged] = []
        size = config.daemon.queue_size
        self.queues: dict[str, asyncio.Queue[Any]] = {
            name: asyncio.Queue(size)
            for name in ("frames", "windows", "features", "tracked", "scored", "events")
        }

    # ---- control -----------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Ask the pipeline to stop (signal handlers, end of input, duration, tests)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()

    def restore(self) -> list[DaemonEvent]:
        """Resume the current period from the store; returns alerts for a period that ended."""
        now = self.wall_clock()
        settings = self.config
        period = period_start(now, settings.budget.period_seconds)
        stored = self.store.budget_states()
        current = {
            alias: s for alias, s in stored.items()
            if datetime.fromisoformat(s.updated).timestamp() >= period
        }  # fmt: skip
        # states stored in an earlier period step down now (one alert each) ...
        for alias, s in stored.items():
            if alias not in current:
                self.budget.restore(alias, s.state)  # type: ignore[arg-type]
        events: list[DaemonEvent] = list(self.ledger.start_period(period))
        # ... while this period's states carry on
        for alias, s in current.items():
            self.budget.restore(alias, s.state)  # type: ignore[arg-type]
        self.track_scorer.period_start_unix = period
        tracks = self.store.tracks(period)
        self.tracker.skip_numbers(tracks)
        for track in tracks:
            kept = self.store.track_period(track, period)
            if _unknown(track):
                kind, identity = "unknown", None
            elif track in self.tracker.profile_identities:
                kind, identity = "local", self.tracker.profile_identities[track]
            else:
                logger.warning("ledger track %s has no local profile now: not resumed", track)
                continue
            if set(self.features) - set(kept.pooled):
                logger.warning("ledger track %s lacks a feature: starts afresh", track)
                continue
            self.track_scorer.restore(
                TrackEvidence(
                    track,
                    kind,
                    identity,
                    {k: v for k, v in kept.pooled.items() if k in self.features},
                    kept.windows,
                    kept.speech_seconds,
                    -math.inf if kept.max_window_bits is None else kept.max_window_bits,
                )
            )
            if kind == "unknown":
                self.tracker.restore(track, kept.pooled[EMBEDDING].values, kept.speech_seconds)
        return events

    # ---- stages ------------------------------------------------------------------------------

    async def _source_stage(self) -> None:
        out = self.queues["frames"]
        async for frame in self.source.frames():
            self.audio_seconds += frame.duration_seconds
            await out.put(frame)
        await out.put(None)

    async def _vad_stage(self) -> None:
        inbox, out = self.queues["frames"], self.queues["windows"]
        index = 0
        while True:
            frame = await inbox.get()
            chunks = self.vad.flush() if frame is None else self.vad.process(frame)
            for chunk in chunks:
                for window in self.windower.process(chunk):
                    await out.put((index, window, self.clock(), self.wall_clock()))
                    index += 1
            if frame is None:
                self.windower.reset()  # a partial last window is not scored
                await out.put(None)
                return

    async def _feature_stage(self, executor: ThreadPoolExecutor) -> None:
        inbox, out = self.queues["windows"], self.queues["features"]
        loop = asyncio.get_running_loop()
        while True:
            item = await inbox.get()
            if item is None:
                await out.put(None)
                return
            index, window, closed_monotonic, closed_unix = item
            assert isinstance(window, SpeechWindow)
            started = self.clock()
            names = list(self.features)
            observations = await asyncio.gather(
                *(
                    loop.run_in_executor(executor, self.window_features.observe, n, window.samples)
                    for n in names
                )
            )
            spent = self.clock() - started
            self._busy["features"] += spent
            await out.put(
                FeatureWindow(
                    index=index,
                    start_seconds=window.start_seconds,
                    end_seconds=window.end_seconds,
                    speech_seconds=window.speech_seconds,
                    observations=dict(zip(names, observations, strict=True)),
                    closed_monotonic=closed_monotonic,
                    closed_unix=closed_unix,
                    feature_seconds=spent,
                )
            )

    async def _tracker_stage(self) -> None:
        inbox, out = self.queues["features"], self.queues["tracked"]
        while True:
            window = await inbox.get()
            if window is None:
                await out.put(None)
                return
            tracked, expired = self.tracker.process(window)
            for event in expired:
                await out.put(event)
            await out.put(tracked)

    async def _scorer_stage(self, executor: ThreadPoolExecutor) -> None:
        inbox, out = self.queues["tracked"], self.queues["scored"]
        loop = asyncio.get_running_loop()
        period_seconds = self.config.budget.period_seconds
        while True:
            item = await inbox.get()
            if item is None:
                await out.put(None)
                return
            if isinstance(item, TrackExpired):
                self.track_scorer.expire(item.track)
                await out.put(item)
                continue
            period = period_start(item.window.closed_unix, period_seconds)
            scored = await loop.run_in_executor(executor, self.track_scorer.process, item, period)
            self._busy["scorer"] += scored.scorer_seconds
            await out.put(scored)

    async def _ledger_stage(self) -> None:
        inbox, out = self.queues["scored"], self.queues["events"]
        while True:
            item = await inbox.get()
            if item is None:
                await out.put(None)
                return
            if isinstance(item, TrackExpired):
                self.last.pop(item.track, None)
                await out.put(item)
                continue
            started = self.clock()
            events = self.ledger.process(item)
            self._busy["ledger"] += self.clock() - started
            for event in events:
                if isinstance(event, WindowScored):
                    self._windows += 1
                    self.last[event.track] = event
                elif isinstance(event, StateChanged):
                    self.alerts.append(event)
                await out.put(event)

    async def _exporter_stage(self) -> None:
        inbox = self.queues["events"]
        while True:
            event = await inbox.get()
            if event is None:
                if self.config.daemon.exit_at_end:
                    self.stop("end of input")
                continue
            await self._deliver(event)

    async def _deliver(self, event: DaemonEvent) -> None:
        for exporter in self.exporters:
            try:
                await exporter.handle(event)
            except Exception:
                logger.exception("exporter %s failed on %s", exporter.name, type(event).__name__)

    def stats(self) -> PipelineStats:
        audio = self.audio_seconds
        heavy = self._busy["features"] + self._busy["scorer"]
        source_stats = self.source.stats
        return PipelineStats(
            frames_total=self.vad.frames_total,
            frames_speech=self.vad.frames_speech,
            frames_dropped=self.vad.frames_dropped + source_stats.dropped,
            audio_device_errors=source_stats.device_errors,
            audio_seconds=audio,
            windows=self._windows,
            queue_depths={name: q.qsize() for name, q in self.queues.items()},
            stage_seconds=dict(self._busy),
            realtime_factor=heavy / audio if audio > 0 else 0.0,
            tracks=len(self.track_scorer.tracks),
            at_unix=self.wall_clock(),
        )

    async def _stats_stage(self) -> None:
        interval = self.config.daemon.stats_interval_seconds
        while True:
            await asyncio.sleep(interval)
            for event in self.tracker.expire():
                await self.queues["tracked"].put(event)
            with contextlib.suppress(asyncio.QueueFull):
                self.queues["events"].put_nowait(self.stats())

    async def _supervise(self) -> None:
        duration = self.config.daemon.duration_seconds
        if duration > 0:
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=duration)
            except TimeoutError:
                self.stop("duration")
        await self._stop.wait()
        raise _StopRequestError

    # ---- the run -----------------------------------------------------------------------------

    async def run(self) -> RunSummary:
        """Run until end of input (with ``exit_at_end``), ``duration_seconds``, or a signal."""
        loop = asyncio.get_running_loop()
        handled: list[int] = []
        for signum, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
            try:
                loop.add_signal_handler(signum, self.stop, name)
                handled.append(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests): callers use stop()
        executor = ThreadPoolExecutor(
            max_workers=self.config.features.workers, thread_name_prefix="voxmeter-work"
        )
        started_unix = self.wall_clock()
        await loop.run_in_executor(executor, self.window_features.warm_up)
        startup = self.restore()
        opening = DaemonStarted(
            device_id=self.device_id,
            version=__version__,
            started_unix=started_unix,
            templates={name: self.scorer.n for name in self.features},
            ceiling_bits=self.scorer.ceiling_bits,
            period_start_unix=self.track_scorer.period_start_unix,
            states=dict(self.budget.states),
            budget_bits=self.config.budget.bits,
        )
        for event in (opening, *startup):
            await self.queues["events"].put(event)
        try:
            async with asyncio.TaskGroup() as group:
                stages: list[tuple[str, Any]] = [
                    ("source", self._source_stage()),
                    ("vad", self._vad_stage()),
                    ("features", self._feature_stage(executor)),
                    ("tracker", self._tracker_stage()),
                    ("scorer", self._scorer_stage(executor)),
                    ("ledger", self._ledger_stage()),
                    ("exporters", self._exporter_stage()),
                    ("stats", self._stats_stage()),
                ]
                stages += [(f"exporter.{e.name}", e.run()) for e in self.exporters]
                stages.append(("supervisor", self._supervise()))
                for name, coroutine in stages:
                    group.create_task(coroutine, name=f"voxmeter.{name}")
        except BaseExceptionGroup as group:
            _, rest = group.split(_StopRequestError)
            if rest is not None:
                raise _first_user_error(rest) from None
        finally:
            for signum in handled:
                loop.remove_signal_handler(signum)
            self.source.close()
            executor.shutdown(wait=False, cancel_futures=True)
        # events still queued (a window scored just before the stop), then the goodbye
        queued = self.queues["events"]
        final: list[DaemonEvent] = []
        while not queued.empty():
            event = queued.get_nowait()
            if event is not None:
                final.append(event)
        final += [self.stats(), DaemonStopping(self._stop_reason, self.wall_clock())]
        try:
            async with asyncio.timeout(1.0):
                for event in final:
                    await self._deliver(event)
        except TimeoutError:
            logger.warning("exporters did not take the last events within 1 s")
        stats = self.stats()
        return RunSummary(
            stop_reason=self._stop_reason,
            windows=self._windows,
            audio_seconds=self.audio_seconds,
            frames_total=stats.frames_total,
            frames_speech=stats.frames_speech,
            frames_dropped=stats.frames_dropped,
            audio_device_errors=stats.audio_device_errors,
            last=dict(self.last),
            alerts=list(self.alerts),
        )


def _first_user_error(group: BaseExceptionGroup) -> BaseException:
    """The error to report: the first VoxmeterError if any (one line in the CLI), else all."""
    from monitor.errors import VoxmeterError

    for error in _leaves(group):
        if isinstance(error, VoxmeterError):
            return error
    return group


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


# ---- building a pipeline from config ---------------------------------------------------------


def make_source(config: Config) -> AudioSource:
    """The configured source; file pacing and microphone retry delays come from ``[audio]``."""
    spec = config.daemon.source
    if spec.startswith("file:"):
        path = spec[len("file:") :]
        fast = config.audio.pace == "fast" or path.endswith("?fast")
        return FileSource(path.removesuffix("?fast"), realtime=not fast)
    if spec == "mic" or spec.startswith("mic:"):
        arg = spec[4:]
        device: str | int | None = (int(arg) if arg.isdigit() else arg) if arg else None
        return MicrophoneSource(
            device,
            backoff_initial_seconds=config.audio.retry_min_seconds,
            backoff_max_seconds=config.audio.retry_max_seconds,
            wait_for_device=config.audio.wait_for_device,
        )
    return open_source(spec)


def load_calibration(config: Config, store: Store) -> CalibrationSet:
    """``scorer.calibration`` if set, else the store's, else models/calibration.json."""
    if config.scorer.calibration:
        return CalibrationSet.load(config.scorer.calibration)
    stored = store.load_calibration()
    if stored is not None:
        return stored
    return load_default()


def load_scorer(config: Config, store: Store, features: Mapping[str, Feature]) -> Scorer:
    """All templates of the enabled features (same identities for each) and the calibration."""
    aliases: tuple[str, ...] | None = None
    batches = {}
    for name in features:
        names, batch = store.template_batch(name)
        if aliases is not None and names != aliases:
            missing = sorted(set(aliases) ^ set(names))[:5]
            raise StoreError(
                f"{store.path}: identities differ between features (e.g. {', '.join(missing)}): "
                "every identity needs a template of every enabled feature"
            )
        aliases = names
        batches[name] = batch
    assert aliases is not None
    try:
        return Scorer(
            aliases, batches, load_calibration(config, store), features, delta=config.scorer.delta
        )
    except ValueError as error:
        raise StoreError(f"{store.path}: {error}") from error


def build_exporters(config: Config, store: Store, device_id: str) -> list[Exporter]:
    """The log exporter plus Prometheus and MQTT as configured."""
    exporters: list[Exporter] = [LogExporter()]
    try:
        from monitor.daemon import exporters as package

        builder = getattr(package, "build_exporters", None)
    except ImportError:  # pragma: no cover - the package ships with voxmeter
        builder = None
    if builder is not None:
        exporters += builder(config, store=store, db_path=Path(store.path), device_id=device_id)
        return exporters
    if config.prometheus.enabled:
        from monitor.daemon.exporters.prometheus import PrometheusExporter

        exporters.append(PrometheusExporter(config.prometheus, db_path=Path(store.path)))
    if config.mqtt.enabled:
        from monitor.daemon.exporters.mqtt import MqttExporter

        exporters.append(MqttExporter(config.mqtt, store=store, device_id=device_id))
    return exporters


def build_pipeline(
    config: Config,
    *,
    store: Store,
    source: AudioSource | None = None,
    exporters: Sequence[Exporter] | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> Pipeline:
    """A pipeline as ``voxmeter run`` builds it (tests pass their own source or exporters)."""
    device_id = config.daemon.device_id or socket.gethostname()
    features = {name: get_feature(name) for name in config.features.enabled}
    scorer = load_scorer(config, store, features)
    profiles = [p for p in store.local_profiles() if p.identity_alias in scorer.index]
    return Pipeline(
        config,
        store=store,
        source=source if source is not None else make_source(config),
        scorer=scorer,
        features=features,
        profiles=profiles,
        exporters=exporters if exporters is not None else build_exporters(config, store, device_id),
        device_id=device_id,
        clock=clock,
        wall_clock=wall_clock,
    )


def run_daemon(config: Config) -> RunSummary:
    """``voxmeter run``: open the store, build the pipeline, run it to the end."""
    from monitor.store.database import open_store

    configure_logging(config.logging)
    store = open_store(config.daemon.db)
    try:
        pipeline = build_pipeline(config, store=store)
        summary = asyncio.run(pipeline.run())
    finally:
        store.close()
    logger.info(
        "stopped",
        extra={"fields": {"reason": summary.stop_reason, "windows": summary.windows}},
    )
    return summary


# ---- the daemon's state as stored (voxmeter status) ------------------------------------------


@dataclass(frozen=True)
class TrackStatus:
    """The latest figures of one track in the current period, read from the ledger."""

    track: str
    state: str
    windows: int
    speech_seconds: float
    window_end_unix: float
    figures: dict[str, Any]


def current_status(
    store: Store, period_seconds: float, *, now: float | None = None
) -> list[TrackStatus]:
    """Every track of the current period with its last window's figures (oldest track first)."""
    period = period_start(time.time() if now is None else now, period_seconds)
    states = store.budget_states()
    rows = []
    for track in store.tracks(period):
        windows = store.windows(track, period)
        if not windows:
            continue
        last = windows[-1]
        stored = states.get(track)
        rows.append(
            TrackStatus(
                track=track,
                state=stored.state if stored else last.figures.get("state", "ok"),
                windows=len(windows),
                speech_seconds=sum(w.speech_seconds for w in windows),
                window_end_unix=last.window_end,
                figures=last.figures,
            )
        )
    return rows
