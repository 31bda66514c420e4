"""The daemon: source → vad → windower → features → tracker → scorer → ledger → exporters.

One supervisor (:meth:`Pipeline.run`) owns one ``asyncio.TaskGroup``; every stage is a task named
``voxmeter.<stage>`` reading one bounded queue and writing the next. The
measuring stages (VAD to ledger) run in a group of their own under
:class:`~monitor.daemon.measuring.MeasuringSupervisor`, which restarts them after a failure where
the source relays a conversation (the Wyoming proxy) instead of ending the daemon. This module is
the wiring: the stages' state, their queues, the supervisor, signals and restarts; the stage bodies
are :class:`~monitor.daemon.stages.PipelineStages`. Stages are thin loops around synchronous cores,
each in its own module (:class:`~monitor.scoring.evidence.WindowFeatures`,
:class:`~monitor.tracking.tracker.SpeakerTracker`, :class:`~monitor.scoring.evidence.TrackScorer`,
:class:`~monitor.ledger.writer.LedgerWriter`), so the logic is tested without an event loop. Feature
extraction and scoring run in a thread executor; ledger writes are small SQLite transactions on the
loop thread, so cancelling a task never interrupts one. ``None`` in a queue means end of input.

State survives restarts: every window commits its record and the track's pooled evidence in one
transaction, and a starting daemon resumes the current period's tracks from the ledger, so a
SIGKILL loses at most the window in flight.

Building a pipeline from the config (source, scorer, exporters) and ``voxmeter run`` are in
:mod:`monitor.daemon.build`. BLAS runs on one thread while a pipeline runs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor import __version__
from monitor.audio.frames import AudioSource
from monitor.audio.vad import FrameVad
from monitor.daemon.measuring import MeasuringSupervisor, cancel_until_done, leaves
from monitor.daemon.stages import PipelineStages, one_blas_thread
from monitor.daemon.streams import measured_streams
from monitor.daemon.watchdog import EXIT_DEADLINE_SECONDS as EXIT_DEADLINE_SECONDS
from monitor.daemon.watchdog import ExitWatchdog as ExitWatchdog
from monitor.errors import VoxmeterError
from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    DaemonStopping,
    Exporter,
    Figures,
    TrackExpired,
)
from monitor.exporters.mqtt import topics_for
from monitor.features.base import Feature
from monitor.ledger.budget import BudgetMachine, period_start
from monitor.ledger.writer import LedgerWriter, expired_on_restart, restored_track
from monitor.load.cpu import StageCpu
from monitor.load.shedding import LoadShedder, measuring_executor
from monitor.scoring.evidence import TrackEvidence, WindowFeatures
from monitor.scoring.received import track_scorer_for
from monitor.scoring.scorer import Scorer
from monitor.settings.config import tracker_settings
from monitor.settings.sections import Config
from monitor.store.database import Store
from monitor.tracking.consistency import load_consistency
from monitor.tracking.narrow import NarrowCopies, cohort_of
from monitor.tracking.pauses import load_pause_model
from monitor.tracking.thresholds import tracker_thresholds_for
from monitor.tracking.tracker import EMBEDDING, SpeakerTracker
from monitor.tracking.turns import TurnSplitter

logger = logging.getLogger(__name__)


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
    dropped_seconds: float  # audio lost (queue full, gaps, bad chunks, a second client)
    audio_device_errors: int
    last: dict[str, Figures]  # track → the figures of its last scored window
    alerts: int  # budget state changes (each one alert)


def _unknown(track: str) -> bool:
    return track.startswith("unknown-")


class Pipeline(PipelineStages):
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
        narrow: NarrowCopies | None = None,  # narrow-band copies (build.py loads them)
        exporters: Sequence[Exporter] = (),
        device_id: str = "",
        vad: Callable[[], FrameVad] | None = None,  # a detector per stream (tests)
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
        self.window_features = WindowFeatures(self.features)
        self._build_measuring(config, profiles, narrow=narrow, vad=vad)
        self._build_accounting(config, narrow=narrow)
        self._init_run_state(config)

    def _build_measuring(
        self,
        config: Config,
        profiles: Sequence[Any],
        *,
        narrow: NarrowCopies | None,
        vad: Callable[[], FrameVad] | None,
    ) -> None:
        """Who speaks: turn splitter, load shedder, streams, tracker (calibrated thresholds)."""
        clock, source = self.clock, self.source
        thresholds = tracker_thresholds_for(config, self.scorer.calibration)
        detection = config.tracker.change_detection
        self.turns = TurnSplitter(
            self._embed,
            change_cosine=thresholds.change if thresholds and detection == "band" else -1.0,
            consistency=load_consistency(config.tracker.false_inconsistent_rate),
            pauses=load_pause_model() if detection == "pauses" else None,
        )
        live = getattr(source, "realtime", True)  # a fast file replay has no clock to lag
        self.shedder = LoadShedder(
            config.load, live=live, clock=clock, audio_seconds=lambda: self.audio_seconds
        )
        # a VAD, windower and feature streams per stream (each source, each proxy client)
        self.streams = measured_streams(
            config, self.features, self.turns, vad=vad, clock=clock, shedder=self.shedder
        )
        self.tracker = SpeakerTracker(
            profiles, tracker_settings(config), thresholds=thresholds, narrow=narrow,
            cohort=cohort_of(self.scorer), clock=clock, wall_clock=self.wall_clock,
        )  # fmt: skip

    def _build_accounting(self, config: Config, *, narrow: NarrowCopies | None) -> None:
        """What a track disclosed and what follows: track scorer, budget, ledger, supervisor."""
        store, scorer, clock = self.store, self.scorer, self.clock
        self.track_scorer = track_scorer_for(
            config.protect.mode != "off",
            store,
            scorer,
            self.features,
            config.budget.figure,
            narrow.scorer if narrow else None,
        )
        self.budget = BudgetMachine(config.budget)
        self.ledger = LedgerWriter(
            store,
            self.budget,
            budget_bits=config.budget.bits,
            measure=config.budget.figure,
            templates=scorer.n,
            ceiling_bits=scorer.ceiling_bits,
            population=scorer.population_size if scorer.population else 0.0,
            alert_topic=topics_for(config.mqtt, self.device_id).alerts,
            device_id=self.device_id,
            keep_seconds=(config.ledger.keep_periods - 1) * config.budget.period_seconds,
            clock=clock,
            wall_clock=self.wall_clock,
        )
        self.measuring = MeasuringSupervisor(
            restart=getattr(self.source, "relays", False), reset=self._reset_measuring, clock=clock
        )

    def _init_run_state(self, config: Config) -> None:
        """Counters, queues and the stop signal of one run, all at their start."""
        self._feed_counted = 0.0  # streams.feed_seconds already in _busy
        self._next_index = 0  # the next window's number since start (ClosedWindow.index)
        self._stop = asyncio.Event()
        self._stop_reason = ""
        self._tasks: list[asyncio.Task[Any]] = []
        #: Exits by force if still here past the SIGTERM/SIGINT deadline (run_daemon; tests: None)
        self.watchdog: ExitWatchdog | None = None
        self._windows = 0
        self.period_speech_seconds = 0.0  # restored from the ledger at start (DaemonStarted)
        self._busy: dict[str, float] = {"features": 0.0, "scorer": 0.0, "ledger": 0.0}
        self.cpu = StageCpu()  # the daemon's own CPU per stage (monitor.daemon.cpu)
        self.audio_seconds = 0.0
        self.last: dict[str, Figures] = {}
        self._alerts = 0
        size = config.daemon.queue_size
        self.queues: dict[str, asyncio.Queue[Any]] = {
            name: asyncio.Queue(size)
            for name in ("frames", "windows", "features", "tracked", "scored", "events")
        }

    # ---- control -----------------------------------------------------------------------------

    def restore(self) -> list[DaemonEvent]:
        """Resume the current period from the store: alerts for a period that ended, then one
        :class:`TrackRestored` per resumed track."""
        now = self.wall_clock()
        settings = self.config
        period = period_start(now, settings.budget.period_seconds, settings.budget.zone)
        stored = self.store.budget_states()
        current = {
            alias: s for alias, s in stored.items()
            if datetime.fromisoformat(s.updated).timestamp() >= period
        }  # fmt: skip
        # states stored in an earlier period step down now (one alert each) ...
        for alias, s in stored.items():
            if alias not in current:
                self.budget.restore(alias, s.state)
        events: list[DaemonEvent] = list(self.ledger.start_period(period))
        # ... while this period's states carry on
        for alias, s in current.items():
            self.budget.restore(alias, s.state)
        self.track_scorer.period_start_unix = period
        tracks = self.store.tracks(period)
        self.tracker.skip_numbers(tracks)
        for room in self.store.rooms(self.features[EMBEDDING].version):  # what sources learnt
            self.tracker.domains.restore(room)
        periods = [self.store.track_period(track, period) for track in tracks]
        self.period_speech_seconds = sum(kept.speech_seconds for kept in periods)
        gone = expired_on_restart(
            [kept for kept in periods if _unknown(kept.track)],
            now_unix=now,
            idle_seconds=settings.tracker.track_idle_seconds,
            max_tracks=settings.tracker.max_unknown_tracks,
        )
        for kept in periods:
            track = kept.track
            if track in gone:  # expired while we ran or while we were down: stays expired
                logger.info("ledger track %s expired: not resumed", track)
                events.append(TrackExpired(track, "unknown", 0.0, now))
                continue
            resumed = self._resumable(kept)
            if resumed is None:
                continue
            event = self._resume(kept, *resumed, period=period)
            if event is not None:  # exporters show its figures now, not when it speaks again
                events.append(event)
        return events

    def _resumable(self, kept: Any) -> tuple[str, str | None] | None:
        """(kind, identity) of a ledger track that can carry on; None (why logged) for a local
        one whose profile is gone, or evidence missing a feature or pooled by another model."""
        track = kept.track
        if _unknown(track):
            kind, identity = "unknown", None
        elif track in self.tracker.profile_identities:
            kind, identity = "local", self.tracker.profile_identities[track]
        else:
            logger.warning("ledger track %s has no local profile now: not resumed", track)
            return None
        if set(self.features) - set(kept.pooled):
            logger.warning("ledger track %s lacks a feature: starts afresh", track)
            return None
        if any(
            kept.pooled[k].values.shape[0] != feature.dimension
            for k, feature in self.features.items()
        ):  # pooled by another embedding backend before a re-enrolment
            logger.warning("ledger track %s was pooled by another model: starts afresh", track)
            return None
        return kind, identity

    def _resume(
        self, kept: Any, kind: str, identity: str | None, *, period: float
    ) -> DaemonEvent | None:
        """The track's evidence back (an unknown one's voice too); its last window's figures."""
        track = kept.track
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
        last = self.store.last_window(track, period)
        if last is None:
            return None
        return restored_track(
            last,
            state=self.budget.state(track),
            budget_bits=self.config.budget.bits,
            budget_measure=self.config.budget.measure,
            delta=self.config.scorer.delta,
        )

    def _measuring(self, executor: ThreadPoolExecutor, feeder: ThreadPoolExecutor) -> Any:
        """The measuring stages under their supervisor (:mod:`monitor.daemon.measuring`)."""

        def stages() -> list[tuple[str, Any]]:
            return [
                ("vad", self._vad_stage(executor, feeder)),
                ("features", self._feature_stage(executor, feeder)),
                ("tracker", self._tracker_stage()),
                ("scorer", self._scorer_stage(executor)),
                ("ledger", self._ledger_stage()),
            ]

        return self.measuring.run(stages)

    async def _reset_measuring(self) -> None:
        """After a failure: the speech held by every stream's VAD, windower and features is
        lost (their state is made afresh on their next frame)."""
        self.streams.reset()
        self.shedder.reset()

    async def _supervise(self) -> None:
        duration = self.config.daemon.duration_seconds
        if duration > 0:
            try:
                async with asyncio.timeout(duration):
                    await self._stop.wait()
            except TimeoutError:
                self.stop("duration")
        await self._stop.wait()
        await cancel_until_done([t for t in self._tasks if t is not asyncio.current_task()])
        raise _StopRequestError

    def _check_budget(self) -> None:
        """Warn about a budget no figure can reach: disclosure never exceeds log2 N (N_pop
        with a population model, else the templates present)."""
        bits, ceiling = self.config.budget.bits, self.scorer.ceiling_bits
        if bits > ceiling:
            what = "population.size" if self.scorer.population else f"{self.scorer.n} templates"
            logger.warning(
                "budget.bits = %g bits is above the ceiling log2 N = %.2f bits (N = %s, %s): "
                "no speaker can ever exceed it",
                bits,
                ceiling,
                f"{self.scorer.population_size:g}",
                what,
            )

    def _on_signal(self, name: str) -> None:
        """SIGTERM/SIGINT: stop, and with a :attr:`watchdog` make sure we do."""
        self.stop(name)
        if self.watchdog is not None:
            self.watchdog.arm(name)

    # ---- the run -----------------------------------------------------------------------------

    async def run(self) -> RunSummary:
        """Run until end of input (with ``exit_at_end``), ``duration_seconds``, or a signal."""
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet_cancellation)
        handled = self._handle_signals(loop)
        # at the measuring priority (the loop thread relays); the feeder has one thread: chunks
        # are fed to the streams in order, and a window taken after them
        priority = self.shedder.priority
        executor = measuring_executor(self.config.features.workers, "voxmeter-work", priority)
        feeder = measuring_executor(1, "voxmeter-feed", priority)
        restore_blas = one_blas_thread()
        started_unix = self.wall_clock()
        self._check_budget()
        await loop.run_in_executor(executor, self.window_features.warm_up)
        await loop.run_in_executor(feeder, self.streams.parts()[2].warm_up)
        self.cpu.start()
        startup = self.restore()
        for event in (self._opening(started_unix), *startup):
            await self.queues["events"].put(event)
        try:
            async with asyncio.TaskGroup() as group:
                stages: list[tuple[str, Any]] = [
                    ("source", self._source_stage()),
                    ("measuring", self._measuring(executor, feeder)),
                    ("exporters", self._exporter_stage()),
                    ("stats", self._stats_stage()),
                ]
                stages += [(f"exporter.{e.name}", e.run()) for e in self.exporters]
                stages.append(("supervisor", self._supervise()))
                self._tasks = [
                    group.create_task(coroutine, name=f"voxmeter.{name}")
                    for name, coroutine in stages
                ]
        except BaseExceptionGroup as group:
            _, rest = group.split(_StopRequestError)
            if rest is not None:
                raise _first_user_error(rest) from None
        finally:
            for signum in handled:
                loop.remove_signal_handler(signum)
            self.source.close()
            executor.shutdown(wait=False, cancel_futures=True)
            feeder.shutdown(wait=False, cancel_futures=True)
            restore_blas()
        self._keep_rooms()  # a stop cancels the tracker stage before its end
        await self._goodbye()
        return self._summary()

    def _handle_signals(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        """SIGTERM and SIGINT stop the run: the signals handled (none off the main thread)."""
        handled: list[signal.Signals] = []
        for signum, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
            try:
                loop.add_signal_handler(signum, self._on_signal, name)
                handled.append(signum)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests): callers use stop()
        return handled

    def _opening(self, started_unix: float) -> DaemonStarted:
        """The first event: what this daemon measures against and where its period stands."""
        return DaemonStarted(
            device_id=self.device_id,
            version=__version__,
            started_unix=started_unix,
            templates={name: self.scorer.n for name in self.features},
            ceiling_bits=self.scorer.ceiling_bits,
            period_start_unix=self.track_scorer.period_start_unix,
            states=dict(self.budget.states),
            budget_bits=self.config.budget.bits,
            speech_seconds=self.period_speech_seconds,
            population=self.scorer.population_size if self.scorer.population else 0.0,
        )

    async def _goodbye(self) -> None:
        """Events still queued (a window scored just before the stop), stats, goodbye: in 1 s."""
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

    def _summary(self) -> RunSummary:
        """What the run did, for the command's last lines."""
        stats = self.stats()
        return RunSummary(
            stop_reason=self._stop_reason,
            windows=self._windows,
            audio_seconds=self.audio_seconds,
            frames_total=stats.frames_total,
            frames_speech=stats.frames_speech,
            dropped_seconds=stats.dropped_seconds,
            audio_device_errors=stats.audio_device_errors,
            last=dict(self.last),
            alerts=self._alerts,
        )


def _quiet_cancellation(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: a callback that meets a cancelled future while we stop
    (paho's disconnect callback inside aiomqtt, when the stop lands during the broker's
    handshake) is logged at debug level, not printed to the user as a traceback."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        logger.debug("cancelled while stopping: %s", context.get("message"))
        return
    loop.default_exception_handler(context)


def _first_user_error(group: BaseExceptionGroup) -> BaseException:
    """The error to report: the first VoxmeterError if any (one line in the CLI), else all."""
    for error in leaves(group):
        if isinstance(error, VoxmeterError):
            return error
    return group
