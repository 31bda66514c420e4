"""The bodies of the daemon's stages: each a thin loop from its inbox queue to its outbox around
a synchronous core (:mod:`monitor.scoring.evidence`, :mod:`monitor.tracking.tracker`,
:mod:`monitor.ledger.writer`, the VAD and windower of :mod:`monitor.audio`). How they are wired —
queues, the one TaskGroup, signals, the supervisor — is :mod:`monitor.daemon.pipeline`, whose
:class:`~monitor.daemon.pipeline.Pipeline` builds the state declared here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from threadpoolctl import threadpool_limits

from monitor.audio.frames import RATE_HZ, AudioFrame, AudioSource
from monitor.audio.vad import SpeechChunk
from monitor.audio.windows import SpeechWindow
from monitor.daemon.measuring import MeasuringSupervisor
from monitor.daemon.streams import FEED_BLOCK_SAMPLES, Streams, StreamState, named_stats
from monitor.events.messages import (
    ClosedWindow,
    DaemonEvent,
    Exporter,
    FeatureWindow,
    Figures,
    PipelineStats,
    StateChanged,
    TrackExpired,
    WindowScored,
)
from monitor.features.base import Feature
from monitor.ledger.budget import next_period_start, period_start
from monitor.ledger.writer import LedgerWriter
from monitor.load.cpu import StageCpu
from monitor.load.shedding import LoadShedder
from monitor.scoring.evidence import TrackScorer
from monitor.scoring.received import received_embedding
from monitor.scoring.scorer import Scorer
from monitor.settings.sections import Config
from monitor.store.database import Store
from monitor.tracking.enrolment import EnrolmentSession
from monitor.tracking.tracker import EMBEDDING, SpeakerTracker
from monitor.tracking.turns import TurnSplitter

logger = logging.getLogger(__name__)

_NO_FRAME: Any = object()
"""The vad stage's wake-up without a frame (the stats stage's, each interval while streams
live): time to look for idle streams. A timeout around every frame's wait cost a timer per
frame on the loop."""
IDLE_CHECK_SECONDS = 1.0
"""While frames flow, idle streams are looked for at most this often."""
ROOMS_KEPT_SECONDS = 60.0
"""While sources learn their rooms, the store keeps them at most this often (and at the end)."""


class PipelineStages:
    """Stage bodies over the state a :class:`~monitor.daemon.pipeline.Pipeline` builds."""

    config: Config
    store: Store
    source: AudioSource
    scorer: Scorer
    features: dict[str, Feature]
    exporters: list[Exporter]
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    streams: Streams
    tracker: SpeakerTracker
    turns: TurnSplitter
    track_scorer: TrackScorer
    ledger: LedgerWriter
    queues: dict[str, asyncio.Queue[Any]]
    measuring: MeasuringSupervisor
    shedder: LoadShedder
    cpu: StageCpu
    audio_seconds: float
    last: dict[str, Figures]
    _feed_counted: float
    _busy: dict[str, float]
    _windows: int
    _next_index: int
    _alerts: int
    _stop: asyncio.Event
    _stop_reason: str
    enrolment: EnrolmentSession | None = None  # Home Assistant's (monitor.daemon.household)

    async def _source_stage(self) -> None:
        out = self.queues["frames"]
        async for frame in self.source.frames():
            self.audio_seconds += frame.duration_seconds
            await out.put(frame)
        await out.put(None)

    def _embed(self, samples: Any) -> Any:
        """The tracking embedding of a piece of speech (the turn splitter's parts)."""
        return self.features[EMBEDDING].observe(samples, RATE_HZ).values

    async def _vad_stage(self, executor: ThreadPoolExecutor, feeder: ThreadPoolExecutor) -> None:
        """Frames → speech → windows that hold one voice, per stream (its own VAD, windower and
        incremental features: :mod:`monitor.daemon.streams`); windows of every stream go on in
        the order they close. A stream's end, an idle stream and the end of input close turns."""
        inbox, out = self.queues["frames"], self.queues["windows"]
        streams = self.streams
        checked = self.clock()
        while True:
            frame = await inbox.get()
            if frame is _NO_FRAME or self.clock() - checked >= IDLE_CHECK_SECONDS:
                checked = self.clock()
                for state in streams.idle():  # gone without an end: the turn ends now
                    await self._stream_frames(state, None, executor, feeder)
                    streams.end(state.key)
            if frame is _NO_FRAME:
                continue
            if frame is None:  # end of input: every stream ends
                for state in streams:
                    await self._stream_frames(state, None, executor, feeder)
                    streams.end(state.key)
                await out.put(None)
                return
            measured = streams.state(frame)
            if measured is None:  # refused: more than audio.max_streams at once (counted)
                continue
            await self._stream_frames(measured, frame, executor, feeder)
            if frame.stream_end:
                streams.end(measured.key)

    async def _stream_frames(
        self,
        state: StreamState,
        frame: AudioFrame | None,
        executor: ThreadPoolExecutor,
        feeder: ThreadPoolExecutor,
    ) -> None:
        """One frame of ``state``'s stream (None: it ends) → speech → windows: cut at a turn
        pause or an utterance's end by the windower, then at a change of speaker found on their
        filterbank frames (and two parts' embeddings where that is uncertain); the speech also
        goes, as it arrives, to the stream's incremental features."""
        out = self.queues["windows"]
        ends = frame is None or frame.utterance_end or frame.stream_end
        started = time.thread_time()
        chunks = state.vad.flush() if frame is None else state.vad.process(frame)
        if frame is not None and ends:  # the turn ends: a short window
            chunks = [*chunks, *state.vad.flush()]
        self.cpu.vad += time.thread_time() - started
        chunks = state.received.attach(frame, chunks, ends)  # what a protected upstream got
        windows = []
        for chunk in chunks:
            windows += self._process_chunk(state, chunk, feeder)
            # features work on the speech as it arrives, in order, on the feeder thread
            state.unfed.hold(chunk.samples, self.clock())
            if state.unfed.samples >= FEED_BLOCK_SAMPLES:
                self._feed(state, feeder)
        if ends:  # the turn ends with the utterance/stream
            windows += self._close_turn(state, feeder)
        if windows:  # the window's take (and its split) come after all of its speech
            self._feed(state, feeder)
        windower = state.windower
        for window in windows:
            pieces = await self._split(state, window, executor, feeder)
            for piece in pieces:
                if piece.speech_seconds < windower.min_window_seconds:
                    windower.dropped_seconds += piece.speech_seconds
                    continue
                index, self._next_index = self._next_index, self._next_index + 1
                self.streams.closed(state)
                closed_at = (self.clock(), self.wall_clock())
                self.shedder.window_closed(closed_at[0])
                rate = state.source_rate_hz
                await out.put(ClosedWindow(index, piece, *closed_at, state.key, rate))

    async def _split(
        self,
        state: StreamState,
        window: SpeechWindow,
        executor: ThreadPoolExecutor,
        feeder: ThreadPoolExecutor,
    ) -> list[SpeechWindow]:
        """``window`` cut at changes of speaker, scored on the filterbank frames its embedding
        stream computed while it filled (on the feeder, after every chunk fed before it
        closed); parts are embedded only where the score is uncertain."""
        loop = asyncio.get_running_loop()
        if not self.turns.wants(window):
            return [window]
        if self.shedder.sheds("turns"):  # lagging: the window is scored whole
            self.shedder.count("turns", window.speech_seconds)
            return [window]
        incremental = state.incremental
        if incremental.turns is None:
            return await loop.run_in_executor(executor, self.turns.split, window)
        return await loop.run_in_executor(feeder, incremental.split, window)

    def _feed(self, state: StreamState, feeder: ThreadPoolExecutor) -> None:
        """The speech held for the feeder as one call: a 30 ms frame at a time, each call's
        future, thread hand-over and loop wake-up cost more than the work (the streams push
        blocks of 0.25 s anyway). Submitted as a plain future: nothing on the loop waits for
        it, the feeder keeps order, and :meth:`IncrementalWindows.take` raises what failed."""
        samples, since = state.unfed.take()
        if samples is None:
            return
        self.shedder.submitted(since)
        feeder.submit(state.incremental.feed, samples)

    def _process_chunk(
        self, state: StreamState, chunk: SpeechChunk, feeder: ThreadPoolExecutor
    ) -> list[SpeechWindow]:
        """The windower's windows for ``chunk``; a turn it ended before the chunk (at a pause)
        is told to the incremental features first, in order, so the chunk starts the next
        window's streams instead of running on in the closed one's."""
        windower, incremental = state.windower, state.incremental
        dropped = windower.dropped_seconds
        closed = windower.process(chunk)
        before = [w for w in closed if w.end_seconds <= chunk.start_seconds]
        if before:
            self._feed(state, feeder)
            feeder.submit(incremental.close_window)
        elif windower.dropped_seconds > dropped:
            self._feed(state, feeder)
            feeder.submit(incremental.discard)
        return closed

    def _close_turn(self, state: StreamState, feeder: ThreadPoolExecutor) -> list[SpeechWindow]:
        """The held speech as a short window (or dropped), told to the incremental features."""
        windower, incremental = state.windower, state.incremental
        closed = windower.close_turn(windower.min_window_seconds)
        self._feed(state, feeder)
        feeder.submit(incremental.close_window if closed else incremental.discard)
        return closed

    async def _feature_stage(
        self, executor: ThreadPoolExecutor, feeder: ThreadPoolExecutor
    ) -> None:
        inbox, out = self.queues["windows"], self.queues["features"]
        loop = asyncio.get_running_loop()
        while True:
            item = await inbox.get()
            if item is None:
                await out.put(None)
                return
            assert isinstance(item, ClosedWindow)
            window = item.window
            started = self.clock()
            # after every chunk fed before the window closed (the feeder keeps order)
            incremental = self.streams.taking(item.stream)
            streams = await loop.run_in_executor(feeder, incremental.take, window.samples)
            names = list(streams)
            received = loop.run_in_executor(
                executor, received_embedding, self.features, window.received
            )
            observations = await asyncio.gather(
                *(loop.run_in_executor(executor, streams[n].finish) for n in names)
            )
            received_observation = await received
            spent = self.clock() - started
            self.shedder.window_done()
            fed_total = self.streams.feed_seconds
            fed, self._feed_counted = fed_total - self._feed_counted, fed_total
            self._busy["features"] += spent + fed
            await out.put(
                FeatureWindow(
                    index=item.index,
                    start_seconds=window.start_seconds,
                    end_seconds=window.end_seconds,
                    speech_seconds=window.speech_seconds,
                    mixed=window.mixed,
                    continues=window.continues,
                    inconsistent=window.inconsistent,
                    observations=dict(zip(names, observations, strict=True)),
                    closed_monotonic=item.closed_monotonic,
                    closed_unix=item.closed_unix,
                    feature_seconds=spent,
                    stream=item.stream,
                    received_embedding=received_observation,
                    source_rate_hz=item.source_rate_hz,
                )
            )

    async def _tracker_stage(self) -> None:
        inbox, out = self.queues["features"], self.queues["tracked"]
        domains = self.tracker.domains
        kept_at, kept = self.clock(), domains.taught
        while True:
            window = await inbox.get()
            if window is None:
                self._keep_rooms()
                await out.put(None)
                return
            tracked, expired = self.tracker.process(window)
            if self.enrolment is not None and self.enrolment.listening:
                self.enrolment.heard(window, tracked)  # may enrol: the next window knows them
            if domains.taught != kept and self.clock() - kept_at >= ROOMS_KEPT_SECONDS:
                self._keep_rooms()
                kept_at, kept = self.clock(), domains.taught
            for event in expired:  # expiries and merges go first: the window may need them
                await out.put(event)
            # None: a window no track may take; media: a programme's (only their seconds count)
            if tracked is not None and tracked.kind != "media":
                await out.put(tracked)

    def _keep_rooms(self) -> None:
        """The store keeps what each source learnt of its room (nothing learnt: the stored
        rooms stay as they are)."""
        domains = self.tracker.domains
        if domains.taught:
            self.store.save_rooms(domains.rooms(), self.features[EMBEDDING].version)

    async def _scorer_stage(self, executor: ThreadPoolExecutor) -> None:
        inbox, out = self.queues["tracked"], self.queues["scored"]
        loop = asyncio.get_running_loop()
        period_seconds = self.config.budget.period_seconds
        zone = self.config.budget.zone
        while True:
            item = await inbox.get()
            if item is None:
                await out.put(None)
                return
            if isinstance(item, TrackExpired):
                if item.merged_into is None:
                    self.track_scorer.expire(item.track)
                else:
                    self.track_scorer.merge(item.track, item.merged_into)
                await out.put(item)
                continue
            period = period_start(item.window.closed_unix, period_seconds, zone)
            scored = await loop.run_in_executor(executor, self.track_scorer.process, item, period)
            self._busy["scorer"] += scored.scorer_seconds
            await out.put(scored)

    async def _ledger_stage(self) -> None:
        """Windows to the ledger; at each period boundary the budget reset, on time (a timer:
        a quiet household must not keep last period's ``exceeded`` until someone speaks)."""
        inbox, out = self.queues["scored"], self.queues["events"]
        while True:
            try:
                async with asyncio.timeout(self._seconds_to_next_period()):
                    item = await inbox.get()
            except TimeoutError:
                for change in self.ledger.roll_period(self.wall_clock()):
                    self._alerts += 1
                    await out.put(change)
                continue
            if item is None:
                await out.put(None)
                return
            if isinstance(item, TrackExpired):
                self.last.pop(item.track, None)
                if item.merged_into is not None:
                    self.ledger.merge(item.track, item.merged_into)
                await out.put(item)
                continue
            started = self.clock()
            events = self.ledger.process(item)
            self._busy["ledger"] += self.clock() - started
            for event in events:
                if isinstance(event, WindowScored):
                    self._windows += 1
                    self.last[event.figures.track] = event.figures
                elif isinstance(event, StateChanged):
                    self._alerts += 1
                await out.put(event)

    def _seconds_to_next_period(self) -> float | None:
        current = self.ledger.period_start_unix
        if current is None:
            return None
        budget = self.config.budget
        boundary = next_period_start(current, budget.period_seconds, budget.zone)
        return max(0.0, boundary - self.wall_clock())

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
            frames_total=self.streams.frames_total,
            frames_speech=self.streams.frames_speech,
            dropped_seconds=self.streams.dropped_seconds + source_stats.dropped_seconds,
            audio_device_errors=source_stats.device_errors,
            audio_seconds=audio,
            windows=self._windows,
            queue_depths={name: q.qsize() for name, q in self.queues.items()},
            stage_seconds=dict(self._busy),
            realtime_factor=heavy / audio if audio > 0 else 0.0,
            tracks=len(self.track_scorer.tracks),
            at_unix=self.wall_clock(),
            measuring_restarts=self.measuring.restarts,
            shed_seconds=dict(self.shedder.shed_seconds),
            cpu_seconds=self.cpu.seconds(),
            lag_seconds=self.shedder.lag_seconds,
            sources={
                name: dataclasses.replace(
                    counts,
                    unattributed_seconds=self.tracker.skipped_by_source.get(name, 0.0),
                    media_seconds=self.tracker.media.seconds_by_source.get(name, 0.0),
                    media_playing=self.tracker.media.playing(name),
                )
                for name, counts in self.streams.counts(
                    named_stats(self.source, self.streams.default_source)
                ).items()
            },
        )

    async def _stats_stage(self) -> None:
        interval = self.config.daemon.stats_interval_seconds
        while True:
            await asyncio.sleep(interval)
            self.shedder.update()  # an idle daemon leaves shedding
            for event in self.tracker.expire():
                await self.queues["tracked"].put(event)
            with contextlib.suppress(asyncio.QueueFull):
                self.queues["events"].put_nowait(self.stats())
            if self.streams.live:  # the vad stage looks for idle streams
                with contextlib.suppress(asyncio.QueueFull):
                    self.queues["frames"].put_nowait(_NO_FRAME)

    def stop(self, reason: str) -> None:
        """Ask the pipeline to stop (signal handlers, end of input, duration, tests)."""
        if not self._stop.is_set():
            self._stop_reason = reason
            self._stop.set()


def one_blas_thread() -> Callable[[], None]:
    """BLAS on one thread while the daemon runs (its second OpenBLAS thread only spins on a busy
    small device: 0.235 -> 0.189 of a core per audio second, ``bench_edge profile``); returns
    the function that restores the previous limits (tests share the process)."""
    restore: Callable[[], None] = threadpool_limits(
        limits=1, user_api="blas"
    ).restore_original_limits
    return restore
