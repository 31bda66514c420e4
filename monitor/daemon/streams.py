"""The measuring side's state per stream: every satellite, microphone and file measured on its own.

A daemon hears several streams at once: its sources (``audio.sources``) and, through a Wyoming
proxy, every client connection (:attr:`AudioFrame.stream`). Speech of two streams must never meet
in one window, so each stream gets its own VAD, windower and incremental feature streams
(:class:`StreamState`), made on its first frame and dropped at its end (``stream_end``: a
connection closed, a file ended) or after ``audio.stream_idle_seconds`` without a frame. Their
windows all go, in the order they close, to the one tracker, scorer and ledger: a person's
disclosure pools across every source (the assistant's server hears them all).

At most ``audio.max_streams`` streams are measured at once: a stream beyond it is refused for
as long as it lasts (one warning line; its seconds counted per source as refused, the relay
still relays it), so a flood of connections cannot take the measuring side's CPU and memory.

Counters per named source (:class:`~monitor.events.messages.SourceCounts`) add the live streams
to those already ended; Prometheus exports them with a ``source`` label.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from monitor.audio.frames import RATE_HZ, AudioFrame, AudioSource, SourceStats, StreamKey
from monitor.audio.vad import FrameVad, SileroVad, WebRtcVad
from monitor.audio.windows import Windower
from monitor.daemon.incremental import IncrementalWindows
from monitor.events.messages import SourceCounts
from monitor.features.base import Feature
from monitor.load.shedding import LoadShedder
from monitor.protect.received_audio import ReceivedAudio
from monitor.settings.config import source_specs
from monitor.settings.sections import Config
from monitor.tracking.turns import TurnSplitter

logger = logging.getLogger(__name__)

StreamParts = Callable[[], tuple[FrameVad, Windower, IncrementalWindows]]
"""Makes a fresh VAD, windower and incremental feature streams for one stream."""

FEED_BLOCK_SAMPLES = 4000
"""Speech handed to the feeder in calls of at least this much (0.25 s; less at a window's or
a turn's end): the incremental streams work in blocks of this size anyway."""


@dataclass
class Unfed:
    """Speech chunks the loop holds for the feeder, and when the first of them arrived."""

    chunks: list[np.ndarray] = field(default_factory=list)
    samples: int = 0
    since: float = 0.0  # monotonic arrival of the oldest held chunk (the shedder's lag)

    def hold(self, samples: np.ndarray, now: float) -> None:
        if not self.chunks:
            self.since = now
        self.chunks.append(samples)
        self.samples += samples.shape[0]

    def take(self) -> tuple[np.ndarray | None, float]:
        """The held speech as one array (None: nothing held) and its oldest arrival."""
        if not self.chunks:
            return None, self.since
        held = self.chunks[0] if len(self.chunks) == 1 else np.concatenate(self.chunks)
        self.chunks, self.samples = [], 0
        return held, self.since


@dataclass
class StreamState:
    """One stream's measuring state (see module docstring)."""

    key: StreamKey  # with its source's name
    vad: FrameVad
    windower: Windower
    incremental: IncrementalWindows
    seen_monotonic: float  # when its last frame came
    audio_seconds: float = 0.0
    pending: int = 0  # windows closed and not yet taken by the features stage
    received: ReceivedAudio = field(default_factory=ReceivedAudio)  # protected utterances
    source_rate_hz: int = RATE_HZ  # as its last frame with audio came from the source
    unfed: Unfed = field(default_factory=Unfed)  # speech not yet handed to the feeder

    @property
    def speech_seconds(self) -> float:
        return self.vad.frames_speech * self.vad.frame_seconds


@dataclass
class _Totals:
    """A source's counts of streams that ended (live ones are added when asked)."""

    audio_seconds: float = 0.0
    speech_seconds: float = 0.0
    dropped_seconds: float = 0.0
    frames_total: int = 0
    frames_speech: int = 0
    feed_seconds: float = 0.0
    refused_streams: int = 0
    refused_seconds: float = 0.0
    refused: dict[StreamKey, float] = field(default_factory=dict)  # refused now: last seen


class Streams:
    """The live streams' state, keyed by :class:`StreamKey` with its source's name."""

    def __init__(
        self,
        parts: StreamParts,
        *,
        max_streams: int,
        idle_seconds: float,
        default_source: str,
        clock: Callable[[], float],
    ) -> None:
        self.parts = parts
        self.max_streams = max_streams
        self.idle_seconds = idle_seconds
        self.default_source = default_source  # the name of frames whose key names none
        self.clock = clock
        self.live: dict[StreamKey, StreamState] = {}
        self._ended: list[StreamState] = []  # ended with windows still to take, oldest first
        self._totals: dict[str, _Totals] = {}
        self._unnamed = (StreamKey(), StreamKey(source=default_source))  # key() 's last

    def key(self, frame: AudioFrame) -> StreamKey:
        """The frame's stream key, with the source's name filled in (the last one kept: frames
        come in runs of one stream)."""
        stream = frame.stream
        if stream.source:
            return stream
        if stream != self._unnamed[0]:
            self._unnamed = (stream, stream._replace(source=self.default_source))
        return self._unnamed[1]

    def state(self, frame: AudioFrame) -> StreamState | None:
        """The frame's stream state (made on its first frame), or None: the stream is refused
        (``max_streams`` are measured already) and the frame only counted."""
        key, now = self.key(frame), self.clock()
        state = self.live.get(key)
        if state is None and frame.stream_end and not frame.samples.shape[0]:
            self._source(key.source).refused.pop(key, None)
            return None  # the end of a stream never measured (refused, or ended already)
        if state is None:
            totals = self._source(key.source)
            if key in totals.refused or len(self.live) >= self.max_streams:
                self._refuse(key, totals, frame, now)
                return None
            vad, windower, incremental = self.parts()
            state = self.live[key] = StreamState(key, vad, windower, incremental, now)
            logger.debug("stream %s started", _name(key))
        state.seen_monotonic = now
        state.audio_seconds += frame.duration_seconds
        if frame.samples.shape[0]:
            state.source_rate_hz = frame.source_rate_hz
        return state

    def _refuse(self, key: StreamKey, totals: _Totals, frame: AudioFrame, now: float) -> None:
        if key not in totals.refused:
            totals.refused_streams += 1
            logger.warning(
                "stream %s not measured: %d streams are measured already (audio.max_streams); "
                "it is still relayed, its seconds are counted as refused",
                _name(key),
                len(self.live),
            )
        totals.refused[key] = now
        totals.refused_seconds += frame.duration_seconds
        if frame.stream_end:
            del totals.refused[key]

    def end(self, key: StreamKey) -> StreamState | None:
        """Forget a stream (its end, or idle): its counts go to its source's totals; state with
        windows still to take stays until :meth:`taking` has handed them over."""
        state = self.live.pop(key, None)
        if state is None:
            return None
        totals = self._source(key.source)
        totals.audio_seconds += state.audio_seconds
        totals.speech_seconds += state.speech_seconds
        totals.dropped_seconds += state.vad.dropped_seconds
        totals.frames_total += state.vad.frames_total
        totals.frames_speech += state.vad.frames_speech
        totals.feed_seconds += state.incremental.feed_seconds
        if state.pending:
            self._ended.append(state)
        logger.info(
            "stream %s ended: %.1f s of audio, %.1f s of speech",
            _name(key),
            state.audio_seconds,
            state.speech_seconds,
        )
        return state

    def idle(self) -> list[StreamState]:
        """Streams silent for ``idle_seconds`` (a connection gone without its end): the caller
        closes their turns, then :meth:`end` s them. Refused streams as idle are forgotten."""
        now = self.clock()
        for totals in self._totals.values():
            for key in [k for k, seen in totals.refused.items() if now - seen > self.idle_seconds]:
                del totals.refused[key]
        return [s for s in self.live.values() if now - s.seen_monotonic > self.idle_seconds]

    def closed(self, state: StreamState) -> None:
        """A window of ``state`` went to the features stage (it will ask :meth:`taking`)."""
        state.pending += 1

    def taking(self, key: StreamKey) -> IncrementalWindows:
        """The incremental streams that hold the next window of ``key`` (windows are taken in
        the order they closed); a stream forgotten meanwhile (a measuring restart) gets fresh
        ones, which extract the window whole."""
        for state in (*self._ended, self.live.get(key)):
            if state is not None and state.key == key and state.pending:
                state.pending -= 1
                if not state.pending and state in self._ended:
                    self._ended.remove(state)
                return state.incremental
        return self.parts()[2]

    def reset(self) -> None:
        """After a failure of the measuring side: every stream's state is forgotten (what they
        held is lost); the counts are kept."""
        for key in list(self.live):
            self.end(key)
        self._ended.clear()

    def __iter__(self) -> Iterator[StreamState]:
        return iter(list(self.live.values()))

    def _source(self, name: str) -> _Totals:
        return self._totals.setdefault(name, _Totals())

    # ---- totals ------------------------------------------------------------------------------

    @property
    def frames_total(self) -> int:
        """VAD frames classified, every stream since start."""
        ended = sum(t.frames_total for t in self._totals.values())
        return ended + sum(s.vad.frames_total for s in self.live.values())

    @property
    def frames_speech(self) -> int:
        ended = sum(t.frames_speech for t in self._totals.values())
        return ended + sum(s.vad.frames_speech for s in self.live.values())

    @property
    def dropped_seconds(self) -> float:
        """Audio missing from the VADs' input (gaps in a stream's timestamps), seconds."""
        ended = sum(t.dropped_seconds for t in self._totals.values())
        return ended + sum(s.vad.dropped_seconds for s in self.live.values())

    @property
    def feed_seconds(self) -> float:
        """CPU seconds the feeder spent on every stream's incremental features."""
        ended = sum(t.feed_seconds for t in self._totals.values())
        return ended + sum(s.incremental.feed_seconds for s in self.live.values())

    def counts(self, sources: Mapping[str, SourceStats]) -> dict[str, SourceCounts]:
        """Per named source: its streams' totals, live and ended, and its own drops."""
        names = [*sources, *(n for n in self._totals if n not in sources)]
        counts = {}
        for name in names:
            totals = self._totals.get(name, _Totals())
            live = [s for s in self.live.values() if s.key.source == name]
            stats = sources.get(name)
            counts[name] = SourceCounts(
                audio_seconds=totals.audio_seconds + sum(s.audio_seconds for s in live),
                speech_seconds=totals.speech_seconds + sum(s.speech_seconds for s in live),
                dropped_seconds=(
                    totals.dropped_seconds
                    + sum(s.vad.dropped_seconds for s in live)
                    + (stats.dropped_seconds if stats is not None else 0.0)
                ),
                streams=len(live),
                refused_streams=totals.refused_streams,
                refused_seconds=totals.refused_seconds,
            )
        return counts


def _name(key: StreamKey) -> str:
    """A stream in log lines: ``kitchen`` or ``kitchen#3`` (its third connection)."""
    return f"{key.source}#{key.connection}" if key.connection else key.source


def named_stats(source: AudioSource, default: str) -> dict[str, SourceStats]:
    """Each named source's own counters: a :class:`~monitor.sources.several.SourceSet`'s by
    name, else the one source's under ``default``."""
    named: Mapping[str, AudioSource] | None = getattr(source, "named", None)
    if named is None:
        return {default: source.stats}
    return {name: each.stats for name, each in named.items()}


def measured_streams(
    config: Config,
    features: Mapping[str, Feature],
    turns: TurnSplitter,
    *,
    vad: Callable[[], FrameVad] | None = None,
    clock: Callable[[], float],
    shedder: LoadShedder | None = None,
) -> Streams:
    """The streams' state as ``[audio]`` configures it (``vad``: a test's own detector)."""
    audio = config.audio
    first: FrameVad
    if vad is not None:
        first = vad()
    elif audio.vad == "silero":
        first = SileroVad(hangover_ms=audio.hangover_ms)
    else:
        first = WebRtcVad(audio.vad_aggressiveness, hangover_ms=audio.hangover_ms)
    made = [first]  # built now: a missing model is an error at start, not at the first frame

    def detector() -> FrameVad:
        return made.pop() if made else (vad() if vad is not None else first.fresh())

    def parts() -> tuple[FrameVad, Windower, IncrementalWindows]:
        windower = Windower(
            audio.window_seconds,
            turn_pause_seconds=audio.turn_pause_seconds,
            min_window_seconds=audio.min_window_seconds,
            tail_seconds=audio.tail_seconds,
        )
        incremental = IncrementalWindows(
            features, max_samples=windower.window_samples, turns=turns, shedder=shedder
        )
        return detector(), windower, incremental

    return Streams(
        parts,
        max_streams=audio.max_streams,
        idle_seconds=audio.stream_idle_seconds,
        default_source=source_specs(config)[0].name,
        clock=clock,
    )
