"""Every message that flows between daemon stages, and what exporters consume.

One module so a reader sees the whole protocol at once. All messages are frozen
dataclasses with units in their names: ``*_seconds`` is a duration or a stream position in
seconds of audio, ``*_unix`` is wall-clock time (seconds since the epoch), ``*_monotonic`` is
``time.monotonic()`` of the daemon process, ``*_bits`` is information in bits.

Flow::

    AudioFrame → SpeechChunk → SpeechWindow          (monitor.audio)
    SpeechWindow → ClosedWindow                      (vad stage: numbered and timed)
    ClosedWindow → FeatureWindow                     (features stage)
    FeatureWindow → TrackedWindow                    (tracker stage)
    TrackedWindow → WindowScored (+ StateChanged)    (scorer + ledger stage)
    DaemonStarted, TrackRestored, WindowScored, StateChanged, TrackExpired, PipelineStats,
    DaemonStopping                                   → every exporter, in order

The figures of a scored window are one record, :class:`Figures` (monitor/events/figures.py):
the ledger row, the alert, MQTT and ``voxmeter status`` all carry its ``to_json()``.

Exporters implement :class:`Exporter` (see docs/architecture.md, monitor/daemon).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from monitor.audio.band import Band, band_of
from monitor.audio.frames import ONE_STREAM, RATE_HZ, StreamKey

# The figure record and its parts (monitor/events/figures.py) and the vocabulary are
# re-exported: exporters read the whole protocol from this one module.
from monitor.events.figures import CompositionBounds as CompositionBounds
from monitor.events.figures import Disclosure as Disclosure
from monitor.events.figures import Figures as Figures
from monitor.events.figures import TrackKind as TrackKind
from monitor.vocabulary import BOUNDS as BOUNDS
from monitor.vocabulary import FEATURES as FEATURES
from monitor.vocabulary import MEASURES as MEASURES
from monitor.vocabulary import BudgetState as BudgetState

if TYPE_CHECKING:
    from monitor.audio.windows import SpeechWindow
    from monitor.features.base import Observation

# ---- between stages ------------------------------------------------------------------------


@dataclass(frozen=True)
class ClosedWindow:
    """A window of speech as the windower closed it: the only message that carries audio, and
    only between the vad and the features stage (it is never stored or exported)."""

    index: int  # 0-based window number since the daemon started
    window: SpeechWindow
    closed_monotonic: float  # start of the latency clock
    closed_unix: float  # the same instant, wall clock
    stream: StreamKey = ONE_STREAM  # the stream (named source, connection) it was cut from
    source_rate_hz: int = RATE_HZ  # the rate its source delivered (≤ 8 kHz: narrow band)


@dataclass(frozen=True)
class FeatureWindow:
    """One closed window of speech turned into one observation per feature (never audio)."""

    index: int  # 0-based window number since the daemon started
    start_seconds: float  # stream position of the window's first speech sample
    end_seconds: float  # stream position of its last speech sample
    speech_seconds: float  # seconds of speech in the window (≈ window_seconds)
    observations: Mapping[str, Observation]  # feature name → observation (f0, phone, embedding)
    closed_monotonic: float  # when the windower closed it: start of the latency clock
    closed_unix: float  # the same instant, wall clock
    feature_seconds: float  # CPU wall time spent extracting the features
    mixed: bool = False  # may hold two voices (monitor.tracking.turns): never opens a track
    continues: bool = False  # follows the previous window within one turn (same voice, likely)
    inconsistent: bool = (
        False  # its parts are not one voice (monitor.tracking.consistency): no one's
    )
    stream: StreamKey = ONE_STREAM  # the stream it was cut from (``continues`` is within it)
    received_embedding: Observation | None = None  # of what a protected upstream received
    source_rate_hz: int = RATE_HZ  # the rate its source delivered (≤ 8 kHz: narrow band)

    @property
    def band(self) -> Band:
        """``narrow`` from a source of at most 8 kHz: tracked and scored against the
        narrow-band copies of profiles and templates (:mod:`monitor.audio.band`)."""
        return band_of(self.source_rate_hz)


@dataclass(frozen=True)
class TrackedWindow:
    """A window assigned to one track by the speaker tracker."""

    window: FeatureWindow
    track: str  # local profile alias, "unknown-N", or a source's "media" track
    kind: TrackKind
    identity: str | None  # template alias of a local profile's identity; None for unknown-N
    similarity: float  # cosine of the window's embedding to the track it was assigned to
    new_track: bool  # True when this window opened the track (first window of unknown-N)


# ---- what exporters consume ----------------------------------------------------------------


@dataclass(frozen=True)
class DaemonStarted:
    """Sent once before any window: what the daemon measures against, and restored tracks."""

    device_id: str
    version: str
    started_unix: float
    templates: Mapping[str, int]  # feature → N templates (same N for every feature)
    ceiling_bits: float  # log2 N
    period_start_unix: float  # start of the current budget period
    states: Mapping[str, BudgetState]  # track alias → budget state restored from the store
    budget_bits: float  # the configured budget per speaker
    speech_seconds: float = 0.0  # speech scored in the current period so far (the ledger's)
    population: float = 0.0  # N_pop the figures are stated against (0: the N templates)


@dataclass(frozen=True)
class WindowScored:
    """One track's figures at one window close, with the window's place in
    the stream and the time it took; :class:`Figures` is what the ledger stores and every
    exporter shows."""

    figures: Figures
    window_start_seconds: float  # stream position
    window_end_seconds: float
    window_speech_seconds: float  # speech in this window
    window_closed_monotonic: float  # end of the window: exporters measure latency from here
    scored_unix: float  # when the ledger committed this window
    latency_seconds: float  # window close → ledger commit (the exporter adds its own part)
    stage_seconds: Mapping[str, float] = field(default_factory=dict)  # stage → seconds spent
    stream: StreamKey = ONE_STREAM  # where it was heard: the named source and its connection


@dataclass(frozen=True)
class TrackRestored:
    """Sent after :class:`DaemonStarted` for every track resumed from the ledger: its last
    window's figures (with the budget state and budget of now), so that a restart does not blank
    a speaker's series until they speak again. Exporters set gauges from it but observe no
    histogram and count no speech: no window of this run was scored."""

    figures: Figures


@dataclass(frozen=True)
class StateChanged:
    """A budget transition; the alert is already in the store's outbox (same transaction)."""

    track: str
    from_state: BudgetState
    to_state: BudgetState
    bits: float  # the budget figure at the transition
    budget_bits: float
    seq: int  # the outbox sequence number of the alert
    reason: Literal["window", "period"]  # a window crossed a threshold, or a new period began
    window_end_unix: float
    changed_unix: float


@dataclass(frozen=True)
class TrackExpired:
    """An ``unknown-N`` track idle longer than ``track_idle_seconds``, or merged into another
    (``merged_into``): remove its series."""

    track: str
    kind: TrackKind
    last_seen_seconds: float  # stream position of its last window
    expired_unix: float
    merged_into: str | None = None  # the track that took over its evidence (a merge)


@dataclass(frozen=True)
class HouseholdChanged:
    """The household changed while the daemon runs (enrolled or forgotten from Home Assistant):
    the tracker and scorer use the new members already; exporters show or remove them."""

    added: tuple[str, ...]  # new members' aliases
    removed: tuple[str, ...]  # forgotten members' aliases
    templates: int  # N, the identities every window is scored against now
    at_unix: float
    claimed: str | None = None  # the unknown-N track whose speech became the new member's


@dataclass(frozen=True)
class SourceCounts:
    """One named source's totals since start (``PipelineStats.sources``; Prometheus labels them
    ``source``): what it heard, what the measuring side missed, what it refused."""

    audio_seconds: float = 0.0  # audio of its streams that reached the measuring side
    speech_seconds: float = 0.0  # of which the VAD kept as speech
    dropped_seconds: float = 0.0  # lost: the measuring side was behind, bad chunks, gaps
    streams: int = 0  # streams measured now (proxy connections, or 1)
    refused_streams: int = 0  # streams not measured: more than audio.max_streams at once
    refused_seconds: float = 0.0  # their audio (relayed, never measured)
    unattributed_seconds: float = 0.0  # speech of its windows the tracker gave to no track
    media_seconds: float = 0.0  # speech of its windows given to its media track (a television)
    media_playing: bool = False  # a television or radio plays there now (tracking.media)


@dataclass(frozen=True)
class PipelineStats:
    """Periodic health figures (every ``daemon.stats_interval_seconds``); counters are totals."""

    frames_total: int  # audio frames seen by the VAD since start
    frames_speech: int  # of which speech
    dropped_seconds: float  # audio lost before the VAD or missing from its input, seconds
    audio_device_errors: int  # device failures since start (each retried)
    audio_seconds: float  # seconds of audio consumed since start
    windows: int  # windows scored since start
    queue_depths: Mapping[str, int]  # queue name → items waiting now
    stage_seconds: Mapping[str, float]  # stage → total busy seconds since start
    realtime_factor: float  # busy CPU seconds of the heavy stages / audio seconds
    tracks: int  # active tracks
    at_unix: float
    measuring_restarts: int = 0  # failures of the measuring side survived (relays only)
    shed_seconds: Mapping[str, float] = field(default_factory=dict)  # feature → speech shed
    lag_seconds: float = 0.0  # how far the measuring side is behind live audio now
    sources: Mapping[str, SourceCounts] = field(default_factory=dict)  # named source → totals
    cpu_seconds: Mapping[str, float] = field(default_factory=dict)  # stage → thread CPU, total


@dataclass(frozen=True)
class DaemonStopping:
    """Sent last, on a clean stop (end of input, SIGTERM, SIGINT)."""

    reason: str
    at_unix: float


DaemonEvent = (
    DaemonStarted
    | TrackRestored
    | WindowScored
    | StateChanged
    | TrackExpired
    | PipelineStats
    | DaemonStopping
    | HouseholdChanged
)


@runtime_checkable
class Exporter(Protocol):
    """What the pipeline's exporter stage drives (Prometheus, MQTT, logs, tests).

    ``run`` is started as task ``voxmeter.exporter.<name>`` in the pipeline's TaskGroup and does
    the exporter's own I/O (HTTP server, broker connection, outbox drain) until cancelled.
    ``handle`` is awaited for every event, in order, by one task; it must return quickly
    (update in-memory state, wake ``run``), never wait on the network.
    """

    name: str

    async def run(self) -> None: ...

    async def handle(self, event: DaemonEvent) -> None: ...
