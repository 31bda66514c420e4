"""Daemon settings: one frozen dataclass per subsystem, each field documented with its unit and
default, and the check of each value. Reading ``config.toml`` and ``--set`` overrides
into them is :mod:`monitor.settings.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import tzinfo
from functools import cached_property

from monitor.settings import checks as check
from monitor.settings.checks import setting
from monitor.settings.population import PopulationSettings
from monitor.settings.tracker import TrackerSettings
from monitor.settings.zones import budget_zone
from monitor.vocabulary import FigureKey


@dataclass(frozen=True)
class DaemonSettings:
    """The process: where audio comes from, where state lives, when to stop."""

    source: str = setting(
        "mic",
        "mic, mic:DEVICE, file:PATH, stdin[:RATE[:CHANNELS]] (s16le PCM), wyoming://HOST:PORT "
        "or wyoming-listen://HOST:PORT (?once: end with the connection), "
        "wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT (relay a Wyoming service, measure "
        "what passes); NAME=SPEC names it (kitchen=mic)",
        check.source,
    )
    db: str = setting(
        "voxmeter.db",
        "SQLite database (templates, ledger, outbox); one daemon each (flock on the file)",
    )
    device_id: str = setting("", "name of this device in MQTT topics; empty = host name")
    duration_seconds: float = setting(
        0.0, "stop after this many wall seconds; 0 = never", check.non_negative
    )
    exit_at_end: bool = setting(True, "stop when a file or stdin source ends")
    stats_interval_seconds: float = setting(1.0, "period of PipelineStats events", check.positive)
    queue_size: int = setting(256, "capacity of each queue between stages", check.positive)


@dataclass(frozen=True)
class AudioSettings:
    """Source pacing, voice activity detection and windowing."""

    pace: str = setting(
        "realtime", "file sources: realtime (paced) or fast", check.one_of("realtime", "fast")
    )
    vad: str = setting(
        "webrtc", "voice activity detector: webrtc or silero", check.one_of("webrtc", "silero")
    )
    vad_aggressiveness: int = setting(
        2, "webrtcvad aggressiveness 0..3", lambda v: None if 0 <= v <= 3 else "must be 0..3"
    )
    hangover_ms: int = setting(
        100,
        "speech kept after the VAD says silence (ms); with turn_pause_seconds it sets the "
        "shortest pause that ends a turn (0.15 s: a quick answer still ends the window)",
        check.non_negative,
    )
    window_seconds: float = setting(
        3.0, "seconds of speech per window (0.5..60)", check.window_length
    )
    turn_pause_seconds: float = setting(
        0.05,
        "a pause this long (after the VAD's hangover) ends the window: a turn may change hands; "
        "0 = windows run across pauses",
        check.non_negative,
    )
    min_window_seconds: float = setting(
        1.0,
        "a window ended early by a turn is scored with ≥ this much speech, else only counted",
        check.positive,
    )
    tail_seconds: float = setting(
        0.0,
        "a full window is cut from a turn only when this much speech follows it, so a turn's "
        "last window holds ≥ this (up to window_seconds + this); 0 = fixed windows",
        check.non_negative,
    )
    retry_min_seconds: float = setting(
        0.5, "first retry delay after a device error", check.positive
    )
    retry_max_seconds: float = setting(
        30.0, "largest retry delay (random capped backoff)", check.positive
    )
    wait_for_device: bool = setting(
        False,
        "a microphone or Wyoming service missing at start: false = exit with an error, true = wait",
        None,
    )
    # ---- several sources and streams (monitor/daemon/streams.py) ----
    sources: tuple[str, ...] = setting(
        (),
        "several sources in one daemon, each NAME=SPEC (a name: letters, digits, - and _); "
        "one tracker and ledger pool a person across them; empty = daemon.source alone",
        check.sources,
        example='sources = ["kitchen=wyoming-proxy://0.0.0.0:10400?upstream=tcp://127.0.0.1:'
        '10400", "stt=wyoming-proxy://0.0.0.0:10300?upstream=tcp://127.0.0.1:10300"]',
    )
    max_streams: int = setting(
        8,
        "streams measured at once (each source; each client of a Wyoming proxy); a stream "
        "beyond is still relayed but not measured, and counted as refused",
        check.positive,
    )
    stream_idle_seconds: float = setting(
        30.0,
        "a stream without audio this long ends (its turn closes, its state is freed)",
        check.positive,
    )


@dataclass(frozen=True)
class WyomingSettings:
    """Wyoming servers of ours (``wyoming-listen``, ``wyoming-proxy`` sources)."""

    zeroconf: bool = setting(
        True, "announce them on mDNS as _wyoming._tcp.local. (Home Assistant discovers them)"
    )


@dataclass(frozen=True)
class RelaySettings:
    """The relay in a process of its own (``voxmeter relay``): the Wyoming proxies there, the
    measuring side in ``voxmeter run``, one local channel between them."""

    socket: str = setting(
        "",
        "Unix socket of the channel from voxmeter relay to voxmeter run; empty = the proxy "
        "relays inside voxmeter run",
        check.socket_path,
    )
    channel_bytes: int = setting(
        1048576,
        "audio that may wait for the measuring process (bytes; 1 MiB = 33 s of 16 kHz speech); "
        "beyond it, or with no measuring process, audio is relayed unmeasured and counted",
        check.positive,
    )


@dataclass(frozen=True)
class FeatureSettings:
    """Which extractors run on every window."""

    enabled: tuple[str, ...] = setting(
        ("f0", "phone", "embedding"), "features extracted per window", check.features
    )
    workers: int = setting(2, "threads running features (in parallel) and scoring", check.positive)
    embedding: str = setting(
        "campplus-int8",
        "embedding backend: ecapa (SpeechBrain ECAPA-TDNN), campplus (CAM++) or ge2e "
        "(resemblyzer); ecapa-int8, campplus-int8: the same networks in static int8 (ONNX "
        "Runtime, less CPU); must be the one the database was enrolled with",
        check.one_of("ecapa", "campplus", "ge2e", "ecapa-int8", "campplus-int8"),
    )
    phone: str = setting(
        "auto",
        "what counts the phones: network (a small phone model of voxmeter's own on CAM++'s "
        "filterbanks, a few thousandths of a core per second of speech), pocketsphinx (its "
        "all-phone decoder, the model's teacher, ~0.04 of a core) or auto (the one the "
        "calibration in use was fitted with: its recorded phone_backend, pocketsphinx when it "
        "records none); another one than the calibration's is refused at start "
        "($VOXMETER_PHONE for the offline commands and voxmeter calibrate)",
        check.one_of("auto", "network", "pocketsphinx"),
    )
    runtime: str = setting(
        "auto",
        "what runs the float ECAPA / CAM++ network: onnx (ONNX Runtime, graphs exported by "
        "make models), torch (the reference port) or auto (whichever took less CPU for a 3 s "
        "window on this CPU model: measured once in a child process the first time a float "
        "backend runs on that CPU, ~10 s, cached in the feature cache folder as "
        "runtime-probe.json; torch where the graph is absent); the -int8 backends always run on "
        "onnx",
        check.one_of("auto", "onnx", "torch"),
    )


@dataclass(frozen=True)
class ScorerSettings:
    """Scoring against all N templates and the composition comparison."""

    calibration: str = setting(
        "", "calibration JSON; empty = the store's, else the shipped one for the embedding backend"
    )
    delta: float = setting(1e-5, "δ of the advanced and optimal composition bounds", check.delta)


@dataclass(frozen=True)
class BudgetSettings:
    """Disclosure budget per speaker and period."""

    bits: float = setting(
        12.0,
        "budget per speaker and period (bits): the median 3-second window's figure against the "
        "default population.size, rounded down (a day of commands exceeds it unprotected)",
        check.positive,
        unit="bits",
    )
    warn_fraction: float = setting(0.8, "warning at this fraction of the budget", check.fraction)
    hysteresis_bits: float = setting(
        0.25, "step down only this far below a threshold", check.non_negative
    )
    measure: str = setting("combined.lid", "figure compared with the budget", check.measure)
    period_seconds: float = setting(
        86400.0,
        "budget period, at multiples of it on budget.timezone's clock (a day: local midnight)",
        check.positive,
    )
    timezone: str = setting(
        "",
        "IANA zone (Europe/Paris) whose midnight starts a day's period; empty = the system's "
        "(TZ, else /etc/localtime; under the add-on, Home Assistant's)",
        check.timezone,
    )

    @cached_property
    def zone(self) -> tzinfo:
        """:attr:`timezone` as a DST-aware zone (the system's when empty)."""
        return budget_zone(self.timezone)

    @cached_property
    def figure(self) -> FigureKey:
        """:attr:`measure` parsed once (already checked when the settings were loaded)."""
        return FigureKey.parse(self.measure)


@dataclass(frozen=True)
class LedgerSettings:
    """Evidence records kept in the database."""

    keep_periods: int = setting(
        7, "periods of evidence kept; older ones are pruned", check.positive
    )


@dataclass(frozen=True)
class LoggingSettings:
    """Structured logs, one line per event (aliases only, never audio or names)."""

    level: str = setting(
        "info", "debug, info, warning or error", check.one_of("debug", "info", "warning", "error")
    )
    format: str = setting("keyvalue", "keyvalue or json", check.one_of("keyvalue", "json"))


@dataclass(frozen=True)
class PrometheusSettings:
    """The /metrics endpoint."""

    enabled: bool = setting(True, "serve /metrics")
    host: str = setting(
        "127.0.0.1", "address to listen on; anything but loopback is warned about at start"
    )
    port: int = setting(39217, "TCP port; 0 = any free port", check.listen_port)
    certfile: str = setting("", "TLS certificate (PEM); empty = plain HTTP")
    keyfile: str = setting("", "TLS private key (PEM) for certfile")
    client_cafile: str = setting("", "CA file to verify client certificates; empty = none")
    client_auth_required: bool = setting(False, "refuse clients without a valid certificate")


@dataclass(frozen=True)
class MqttSettings:
    """Alerts and per-speaker state over MQTT."""

    enabled: bool = setting(False, "publish to a broker")
    host: str = setting("127.0.0.1", "broker address")
    port: int = setting(1883, "broker TCP port", check.port)
    prefix: str = setting("", "topic prefix; empty = voxmeter/<device_id>; aliases percent-encoded")
    client_id: str = setting("", "MQTT client id; empty = voxmeter-<device_id>")
    username: str = setting("", "broker user; empty = anonymous")
    password: str = setting("", "broker password (never shown in messages)", secret=True)
    allow_plaintext_password: bool = setting(
        False,
        "send the password without TLS to a broker that is not on loopback (warned at start)",
    )
    internal_network: bool = setting(
        False,
        "the broker is on a network only this host's containers share (the add-on's Mosquitto): "
        "a password goes without TLS and without a warning; set by the add-on, not by hand",
    )
    tls: bool = setting(False, "connect over TLS (brokers usually listen on 8883 for it)")
    cafile: str = setting(
        "", "CA certificates (PEM) the broker's certificate must chain to; empty = the system's"
    )
    certfile: str = setting("", "client certificate (PEM) for brokers that ask for one")
    keyfile: str = setting("", "private key (PEM) of certfile; empty = in certfile")
    verify_hostname: bool = setting(True, "the broker's certificate must name mqtt.host")
    keepalive_seconds: int = setting(30, "MQTT keepalive", check.positive)
    qos: int = setting(
        1, "QoS of alerts and states", lambda v: None if v in (0, 1, 2) else "must be 0, 1 or 2"
    )
    reconnect_min_seconds: float = setting(0.5, "first reconnect delay", check.positive)
    reconnect_max_seconds: float = setting(30.0, "largest reconnect delay", check.positive)


@dataclass(frozen=True)
class HomeAssistantSettings:
    """MQTT discovery of Home Assistant entities (needs ``[mqtt]`` enabled: same broker)."""

    discovery: bool = setting(False, "publish Home Assistant MQTT discovery configs")
    discovery_prefix: str = setting(
        "homeassistant", "Home Assistant's discovery prefix", check.topic_level
    )
    node_id: str = setting(
        "", "node in discovery topics; empty = device_id made safe", check.node_id
    )
    configuration_url: str = setting(
        "",
        "the devices' Visit link; empty = the documentation (the add-on: its own page, "
        "homeassistant://hassio/addon/<slug>)",
        check.configuration_url,
    )


@dataclass(frozen=True)
class ProtectSettings:
    """Anonymise what a relayed assistant receives (needs a wyoming-proxy source)."""

    mode: str = setting(
        "off",
        "off; exceeded = an utterance is anonymised when the stream's last identified speaker "
        "(none yet: any member) is over budget this period; always = every utterance",
        check.one_of("off", "exceeded", "always"),
    )
    method: str = setting(
        "mcadams", "anonymiser: mcadams (VoicePrivacy B2)", check.one_of("mcadams")
    )
    alpha: str = setting(
        "0.5,0.9",
        'McAdams α: fixed ("0.8") or a range drawn per utterance ("0.5,0.9")',
        check.alpha,
    )


@dataclass(frozen=True)
class LoadSettings:
    """When the device is busy: the measuring threads' priority and what is shed."""

    measuring_priority: str = setting(
        "idle",
        "CPU priority of the measuring threads on live audio: idle (SCHED_IDLE: only spare "
        "CPU), nice (nice 19) or normal; the relay of a Wyoming proxy, and a fast replay, keep "
        "normal priority",
        check.one_of("idle", "nice", "normal"),
    )
    shed_lag_seconds: float = setting(
        1.0,
        "measuring this far behind live audio sheds phone decoding, twice this the turn "
        "splitting too (never the embedding); below half, measuring resumes; 0 = never shed",
        check.non_negative,
    )


@dataclass(frozen=True)
class Config:
    """All settings of ``voxmeter run``; one attribute per config.toml section."""

    daemon: DaemonSettings = field(default_factory=DaemonSettings)
    audio: AudioSettings = field(default_factory=AudioSettings)
    wyoming: WyomingSettings = field(default_factory=WyomingSettings)
    relay: RelaySettings = field(default_factory=RelaySettings)
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
    population: PopulationSettings = field(default_factory=PopulationSettings)


SECTIONS: dict[str, type] = {f.name: f.default_factory for f in fields(Config)}  # type: ignore[misc]
