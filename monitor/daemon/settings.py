"""Daemon settings: one frozen dataclass per subsystem, each field documented with its unit and
default, and the check of each value (STYLE §7). Reading ``config.toml`` and ``--set`` overrides
into them is :mod:`monitor.daemon.config`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from monitor.audio.spec import parse_source, parse_sources
from monitor.errors import InputError
from monitor.vocabulary import EXTRACTORS, TRACKING_FEATURE, FigureKey

Check = Callable[[Any], str | None]


def _setting(default: Any, doc: str, check: Check | None = None, *, secret: bool = False) -> Any:
    """A documented field; ``check`` returns a problem string for a bad value, else None.
    A ``secret`` value is never shown in an error (the key is named, the value is not)."""
    return field(
        default=default, repr=not secret, metadata={"doc": doc, "check": check, "secret": secret}
    )


def _positive(value: float) -> str | None:
    return None if value > 0 and math.isfinite(value) else "must be > 0"


def _non_negative(value: float) -> str | None:
    return None if value >= 0 and math.isfinite(value) else "must be >= 0"


def _fraction(value: float) -> str | None:
    return None if 0 < value < 1 else "must be between 0 and 1 (exclusive)"


def _window_length(value: float) -> str | None:
    """A window's audio is held until it closes, and a window shorter than half a second gives
    features next to nothing: 0.5..60 s (the calibration's buckets are 3, 6 and 12 s)."""
    return None if 0.5 <= value <= 60 else "must be between 0.5 and 60 seconds"


def _one_of(*choices: str) -> Check:
    def check(value: str) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check


def _port(value: int) -> str | None:
    """A port to connect to: 0 is no port."""
    return None if 1 <= value <= 65535 else "must be a TCP port 1..65535"


def _listen_port(value: int) -> str | None:
    """A port to listen on: 0 asks the kernel for any free one."""
    return None if 0 <= value <= 65535 else "must be a TCP port 1..65535 (or 0 = any free port)"


def _source(value: str) -> str | None:
    try:
        parse_source(value)
    except InputError as error:
        return error.problem
    return None


def _sources(value: tuple[str, ...]) -> str | None:
    if not value:
        return None  # daemon.source alone
    try:
        parse_sources(value)
    except InputError as error:
        return error.problem
    return None


def _features(value: tuple[str, ...]) -> str | None:
    known = EXTRACTORS
    if not value:
        return "must name at least one feature"
    bad = [v for v in value if v not in known]
    if bad or len(set(value)) != len(value):
        return f"must be distinct names among {', '.join(known)}"
    if TRACKING_FEATURE not in value:
        return "must include embedding (the tracker follows voices by their embedding)"
    return None


def _measure(value: str) -> str | None:
    try:
        FigureKey.parse(value)
    except ValueError as error:
        return str(error)
    return None


def _cosine(value: float) -> str | None:
    return None if -1 <= value <= 1 else "must be a cosine in [-1, 1]"


def _delta(value: float) -> str | None:
    return None if 0 < value < 1 else "must be in (0, 1)"


@dataclass(frozen=True)
class DaemonSettings:
    """The process: where audio comes from, where state lives, when to stop."""

    source: str = _setting(
        "mic",
        "mic, mic:DEVICE, file:PATH or stdin[:RATE[:CHANNELS]] (s16le PCM); NAME=SPEC names it",
        _source,
    )
    db: str = _setting(
        "voxmeter.db",
        "SQLite database (templates, ledger, outbox); one daemon each (flock on the file)",
    )
    device_id: str = _setting("", "name of this device in MQTT topics; empty = host name")
    duration_seconds: float = _setting(
        0.0, "stop after this many wall seconds; 0 = never", _non_negative
    )
    exit_at_end: bool = _setting(True, "stop when a file or stdin source ends")
    stats_interval_seconds: float = _setting(1.0, "period of PipelineStats events", _positive)
    queue_size: int = _setting(256, "capacity of each queue between stages", _positive)


@dataclass(frozen=True)
class AudioSettings:
    """Source pacing, voice activity detection and windowing."""

    pace: str = _setting(
        "realtime", "file sources: realtime (paced) or fast", _one_of("realtime", "fast")
    )
    vad: str = _setting(
        "webrtc", "voice activity detector: webrtc or silero", _one_of("webrtc", "silero")
    )
    vad_aggressiveness: int = _setting(
        2, "webrtcvad aggressiveness 0..3", lambda v: None if 0 <= v <= 3 else "must be 0..3"
    )
    hangover_ms: int = _setting(
        100,
        "speech kept after the VAD says silence (ms); with turn_pause_seconds it sets the "
        "shortest pause that ends a turn (0.15 s: a quick answer still ends the window)",
        _non_negative,
    )
    window_seconds: float = _setting(3.0, "seconds of speech per window", _window_length)
    turn_pause_seconds: float = _setting(
        0.05,
        "a pause this long (after the VAD's hangover) ends the window: a turn may change hands; "
        "0 = windows run across pauses",
        _non_negative,
    )
    min_window_seconds: float = _setting(
        1.0,
        "a window ended early by a turn is scored with ≥ this much speech, else only counted",
        _positive,
    )
    tail_seconds: float = _setting(
        0.0,
        "a full window is cut from a turn only when this much speech follows it, so a turn's "
        "last window holds ≥ this (up to window_seconds + this); 0 = fixed windows",
        _non_negative,
    )
    retry_min_seconds: float = _setting(0.5, "first retry delay after a device error", _positive)
    retry_max_seconds: float = _setting(
        30.0, "largest retry delay (random capped backoff)", _positive
    )
    wait_for_device: bool = _setting(
        False,
        "a microphone or Wyoming service missing at start: false = exit with an error, true = wait",
        None,
    )
    # ---- several sources and streams (monitor/daemon/streams.py) ----
    sources: tuple[str, ...] = _setting(
        (),
        "several sources in one daemon, each NAME=SPEC (a name: letters, digits, - and _); "
        "one tracker and ledger pool a person across them; empty = daemon.source alone",
        _sources,
    )
    max_streams: int = _setting(
        8,
        "streams measured at once (each source; each client of a Wyoming proxy); a stream "
        "beyond is still relayed but not measured, and counted as refused",
        _positive,
    )
    stream_idle_seconds: float = _setting(
        30.0,
        "a stream without audio this long ends (its turn closes, its state is freed)",
        _positive,
    )


@dataclass(frozen=True)
class WyomingSettings:
    """Wyoming servers of ours (``wyoming-listen``, ``wyoming-proxy`` sources)."""

    zeroconf: bool = _setting(
        True, "announce them on mDNS as _wyoming._tcp.local. (Home Assistant discovers them)"
    )


@dataclass(frozen=True)
class FeatureSettings:
    """Which extractors run on every window."""

    enabled: tuple[str, ...] = _setting(
        ("f0", "phone", "embedding"), "features extracted per window", _features
    )
    workers: int = _setting(2, "threads running features (in parallel) and scoring", _positive)
    embedding: str = _setting(
        "ecapa",
        "embedding backend: ecapa (SpeechBrain ECAPA-TDNN), campplus (CAM++) or ge2e "
        "(resemblyzer); ecapa-int8, campplus-int8: the same networks in static int8 (ONNX "
        "Runtime, ~3x less CPU); must be the one the database was enrolled with",
        _one_of("ecapa", "campplus", "ge2e", "ecapa-int8", "campplus-int8"),
    )
    runtime: str = _setting(
        "auto",
        "what runs the ECAPA / CAM++ network: onnx (ONNX Runtime, graphs exported by make "
        "models), torch (the reference port) or auto (onnx where its graph is present)",
        _one_of("auto", "onnx", "torch"),
    )


TRACKER_THRESHOLDS: dict[str, tuple[float, float]] = {
    "ecapa": (0.60, 0.50),
    "campplus": (0.60, 0.55),
    "ge2e": (0.75, 0.70),
    "ecapa-int8": (0.60, 0.50),
    "campplus-int8": (0.60, 0.55),
}
"""(profile, cluster) cosine thresholds per embedding backend: cosines of different models live
on different scales. Measured on 3 s windows of 12 corpus speakers (8 adults, 4 children)
against six-utterance profiles: ECAPA same speaker p5 0.62, other speakers p99 0.66 (window to
window: same median 0.61, others p99 0.51); GE2E's other speakers reach 0.82."""


@dataclass(frozen=True)
class TrackerSettings:
    """Who is speaking: local profiles, else online clustering into unknown-N tracks."""

    profile_threshold: float = _setting(
        0.0,
        "cosine to a local profile's embedding to follow it; 0 = fitted per window length from "
        "the calibration's cosines (false_member_rate), else the backend's (ecapa 0.60, "
        "campplus 0.60, ge2e 0.75)",
        _cosine,
    )
    cluster_threshold: float = _setting(
        0.0,
        "cosine to an unknown-N track's centroid to join it; 0 = fitted per window length from "
        "the calibration's cosines (false_join_rate), else the backend's (ecapa 0.50, "
        "campplus 0.55, ge2e 0.70)",
        _cosine,
    )
    false_member_rate: float = _setting(
        0.002,
        "share of other voices' windows that pass one profile's threshold, read off the "
        "calibration's cosines at the window's length (when profile_threshold = 0)",
        _fraction,
    )
    false_join_rate: float = _setting(
        0.005,
        "share of other voices' windows close enough to join an unknown-N track, from the "
        "calibration (when cluster_threshold = 0)",
        _fraction,
    )
    false_change_rate: float = _setting(
        0.01,
        "share of one voice's adjacent 1 s parts taken for a change of speaker, from the "
        "calibration",
        _fraction,
    )
    merge_seconds: float = _setting(
        6.0, "unknown-N tracks merge only when each holds this much speech", _positive
    )
    min_open_seconds: float = _setting(
        2.0,
        "a window with less speech may join a track but never opens one (too short to know "
        "a new voice from a known one)",
        _non_negative,
    )
    track_idle_seconds: float = _setting(
        300.0, "an unknown-N track with no window for this long expires", _positive
    )
    max_unknown_tracks: int = _setting(
        16, "active unknown-N tracks kept (oldest expires)", _positive
    )


@dataclass(frozen=True)
class ScorerSettings:
    """Scoring against all N templates and the composition comparison."""

    calibration: str = _setting(
        "", "calibration JSON; empty = the store's, else the shipped one for the embedding backend"
    )
    delta: float = _setting(1e-5, "δ of the advanced and optimal composition bounds", _delta)


@dataclass(frozen=True)
class BudgetSettings:
    """Disclosure budget per speaker and period (DESIGN §12 step 6)."""

    bits: float = _setting(5.0, "budget per speaker and period (bits)", _positive)
    warn_fraction: float = _setting(0.8, "warning at this fraction of the budget", _fraction)
    hysteresis_bits: float = _setting(
        0.25, "step down only this far below a threshold", _non_negative
    )
    measure: str = _setting("combined.lid", "figure compared with the budget", _measure)
    period_seconds: float = _setting(
        86400.0, "budget period; periods start at multiples of it since the Unix epoch", _positive
    )

    @cached_property
    def figure(self) -> FigureKey:
        """:attr:`measure` parsed once (already checked when the settings were loaded)."""
        return FigureKey.parse(self.measure)


@dataclass(frozen=True)
class LedgerSettings:
    """Evidence records kept in the database."""

    keep_periods: int = _setting(7, "periods of evidence kept; older ones are pruned", _positive)


@dataclass(frozen=True)
class LoggingSettings:
    """Structured logs, one line per event (aliases only, never audio or names)."""

    level: str = _setting(
        "info", "debug, info, warning or error", _one_of("debug", "info", "warning", "error")
    )
    format: str = _setting("keyvalue", "keyvalue or json", _one_of("keyvalue", "json"))


@dataclass(frozen=True)
class PrometheusSettings:
    """The /metrics endpoint (DESIGN §15)."""

    enabled: bool = _setting(True, "serve /metrics")
    host: str = _setting(
        "127.0.0.1", "address to listen on; anything but loopback is warned about at start"
    )
    port: int = _setting(39217, "TCP port; 0 = any free port", _listen_port)
    certfile: str = _setting("", "TLS certificate (PEM); empty = plain HTTP")
    keyfile: str = _setting("", "TLS private key (PEM) for certfile")
    client_cafile: str = _setting("", "CA file to verify client certificates; empty = none")
    client_auth_required: bool = _setting(False, "refuse clients without a valid certificate")


@dataclass(frozen=True)
class MqttSettings:
    """Alerts and per-speaker state over MQTT (DESIGN §15)."""

    enabled: bool = _setting(False, "publish to a broker")
    host: str = _setting("127.0.0.1", "broker address")
    port: int = _setting(1883, "broker TCP port", _port)
    prefix: str = _setting(
        "", "topic prefix; empty = voxmeter/<device_id>; aliases percent-encoded"
    )
    client_id: str = _setting("", "MQTT client id; empty = voxmeter-<device_id>")
    username: str = _setting("", "broker user; empty = anonymous")
    password: str = _setting("", "broker password (never shown in messages)", secret=True)
    allow_plaintext_password: bool = _setting(
        False,
        "send the password without TLS to a broker that is not on loopback (warned at start)",
    )
    tls: bool = _setting(False, "connect over TLS (brokers usually listen on 8883 for it)")
    cafile: str = _setting(
        "", "CA certificates (PEM) the broker's certificate must chain to; empty = the system's"
    )
    certfile: str = _setting("", "client certificate (PEM) for brokers that ask for one")
    keyfile: str = _setting("", "private key (PEM) of certfile; empty = in certfile")
    verify_hostname: bool = _setting(True, "the broker's certificate must name mqtt.host")
    keepalive_seconds: int = _setting(30, "MQTT keepalive", _positive)
    qos: int = _setting(
        1, "QoS of alerts and states", lambda v: None if v in (0, 1, 2) else "must be 0, 1 or 2"
    )
    reconnect_min_seconds: float = _setting(0.5, "first reconnect delay", _positive)
    reconnect_max_seconds: float = _setting(30.0, "largest reconnect delay", _positive)


def _topic_level(value: str) -> str | None:
    if value and not any(c in value for c in "+#") and not value.startswith("/"):
        return None
    return "must be a non-empty MQTT topic without + or # (and not starting with /)"


def _node_id(value: str) -> str | None:
    return None if re.fullmatch(r"[a-zA-Z0-9_-]*", value) else "must match [a-zA-Z0-9_-]*"


@dataclass(frozen=True)
class HomeAssistantSettings:
    """MQTT discovery of Home Assistant entities (needs ``[mqtt]`` enabled: same broker)."""

    discovery: bool = _setting(False, "publish Home Assistant MQTT discovery configs")
    discovery_prefix: str = _setting(
        "homeassistant", "Home Assistant's discovery prefix", _topic_level
    )
    node_id: str = _setting("", "node in discovery topics; empty = device_id made safe", _node_id)


def _alpha(value: str) -> str | None:
    from monitor.protect.mcadams import parse_alpha

    try:
        parse_alpha(value)
    except ValueError as error:
        return str(error).split(": ", 1)[1]
    return None


@dataclass(frozen=True)
class ProtectSettings:
    """Anonymise what a relayed assistant receives (needs a wyoming-proxy source)."""

    mode: str = _setting(
        "off",
        "off; exceeded = an utterance is anonymised when the stream's last identified speaker "
        "(none yet: any member) is over budget this period; always = every utterance",
        _one_of("off", "exceeded", "always"),
    )
    method: str = _setting("mcadams", "anonymiser: mcadams (VoicePrivacy B2)", _one_of("mcadams"))
    alpha: str = _setting(
        "0.5,0.9", 'McAdams α: fixed ("0.8") or a range drawn per utterance ("0.5,0.9")', _alpha
    )


@dataclass(frozen=True)
class LoadSettings:
    """When the device is busy: the measuring threads' priority and what is shed (issue 27)."""

    measuring_priority: str = _setting(
        "idle",
        "CPU priority of the measuring threads on live audio: idle (SCHED_IDLE: only spare "
        "CPU), nice (nice 19) or normal; the relay of a Wyoming proxy, and a fast replay, keep "
        "normal priority",
        _one_of("idle", "nice", "normal"),
    )
    shed_lag_seconds: float = _setting(
        1.0,
        "measuring this far behind live audio sheds phone decoding, twice this the turn "
        "splitting too (never the embedding); below half, measuring resumes; 0 = never shed",
        _non_negative,
    )


@dataclass(frozen=True)
class Config:
    """All settings of ``voxmeter run``; one attribute per config.toml section."""

    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    audio: AudioSettings = field(default_factory=AudioSettings)
    wyoming: WyomingSettings = field(default_factory=WyomingSettings)
    features: FeatureSettings = field(default_factory=FeatureSettings)
    tracker: TrackerSettings = field(default_factory=TrackerSettings)
    scorer: ScorerSettings = field(default_factory=ScorerSettings)
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    ledger: LedgerSettings = field(default_factory=LedgerSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    prometheus: PrometheusSettings = field(default_factory=PrometheusSettings)
    mqtt: MqttSettings = field(default_factory=MqttSettings)
    homeassistant: HomeAssistantSettings = field(default_factory=HomeAssistantSettings)
    protect: ProtectSettings = field(default_factory=ProtectSettings)
    load: LoadSettings = field(default_factory=LoadSettings)


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in fields(Config)}  # type: ignore[misc]
