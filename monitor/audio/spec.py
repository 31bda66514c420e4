"""The one parser of an audio source's spelling (command line and config), and the factory that
opens the source it names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from monitor.audio.file import FileSource
from monitor.audio.frames import RATE_HZ, AudioSource
from monitor.audio.microphone import MicrophoneSource
from monitor.audio.stdin import StdinSource
from monitor.audio.wyoming import WyomingSource, parse_endpoint
from monitor.audio.wyoming_proxy import WyomingProxySource, parse_proxy
from monitor.errors import InputError

SOURCE_SPELLINGS = (
    "mic, mic:DEVICE, file:PATH[?fast], stdin, stdin:RATE[:CHANNELS], "
    "wyoming://HOST:PORT, wyoming-listen://HOST:PORT or "
    "wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT"
)


@dataclass(frozen=True)
class SourceSpec:
    """A parsed source spelling (see :func:`parse_source`); only the fields of its kind matter."""

    kind: Literal["mic", "file", "stdin", "wyoming", "wyoming-proxy"]
    text: str  # as given
    device: str | int | None = None  # mic: name or index; None = default input
    path: str = ""  # file
    fast: bool = False  # file: ``?fast``, not paced in real time
    rate_hz: int = RATE_HZ  # stdin
    channels: int = 1  # stdin


@dataclass(frozen=True)
class Retry:
    """How a microphone or Wyoming source retries a missing or failing device."""

    initial_seconds: float
    max_seconds: float
    wait_for_device: bool  # False: a device missing at start is an error


def parse_source(spec: str) -> SourceSpec:
    """The one parser of a source's command-line and config spelling.

    ``mic`` (default input), ``mic:NAME`` or ``mic:INDEX``; ``file:PATH`` (paced in real time),
    ``file:PATH?fast`` (as fast as possible); ``stdin`` (16 kHz), ``stdin:RATE`` or
    ``stdin:RATE:CHANNELS`` (raw s16le PCM); ``wyoming://HOST:PORT`` (a Wyoming microphone
    service) or ``wyoming-listen://HOST:PORT`` (Wyoming clients stream to us), ``?once`` to end
    with the first connection (monitor/audio/wyoming.py);
    ``wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT`` (we relay a Wyoming service and
    measure what passes, monitor/audio/wyoming_proxy.py). A bad one raises InputError.
    """
    kind, _, arg = spec.partition(":")
    if kind == "mic":
        device: str | int | None = (int(arg) if arg.isdigit() else arg) if arg else None
        return SourceSpec("mic", spec, device=device)
    if kind == "file" and arg:
        fast = arg.endswith("?fast")
        return SourceSpec("file", spec, path=arg.removesuffix("?fast"), fast=fast)
    if kind == "stdin":
        parts = arg.split(":") if arg else []
        if len(parts) <= 2 and all(p.isdigit() for p in parts):
            rate = int(parts[0]) if parts else RATE_HZ
            channels = int(parts[1]) if len(parts) == 2 else 1
            return SourceSpec("stdin", spec, rate_hz=rate, channels=channels)
        raise InputError("stdin", f"bad stream spec {spec!r} (expected stdin[:RATE[:CHANNELS]])")
    if kind in ("wyoming", "wyoming-listen"):
        parse_endpoint(spec)  # checked now; WyomingSource keeps the parsed endpoint
        return SourceSpec("wyoming", spec)
    if kind == "wyoming-proxy":
        parse_proxy(spec)
        return SourceSpec("wyoming-proxy", spec)
    raise InputError("source", f"unknown audio source {spec!r} (must be {SOURCE_SPELLINGS})")


def open_source(
    spec: str | SourceSpec,
    *,
    fast: bool = False,
    retry: Retry | None = None,
    zeroconf: bool = False,
    channel: Path | None = None,
) -> AudioSource:
    """Build a source from its spelling; ``fast`` also unpaces files, ``retry`` (default: each
    source's own) sets a microphone's or Wyoming source's retries, ``zeroconf`` announces a
    Wyoming server of ours (``wyoming-listen``, ``wyoming-proxy``) on mDNS; with ``channel`` (the
    relay process's socket) a ``wyoming-proxy`` is relayed by ``voxmeter relay`` and measured
    from there."""
    parsed = parse_source(spec) if isinstance(spec, str) else spec
    retries: dict[str, Any] = {}
    if retry is not None:
        retries = {
            "backoff_initial_seconds": retry.initial_seconds,
            "backoff_max_seconds": retry.max_seconds,
            "wait_for_device": retry.wait_for_device,
        }
    match parsed.kind:
        case "mic":
            return MicrophoneSource(parsed.device, **retries)
        case "file":
            return FileSource(parsed.path, realtime=not (parsed.fast or fast))
        case "stdin":
            return StdinSource(parsed.rate_hz, channels=parsed.channels)
        case "wyoming":
            endpoint = parse_endpoint(parsed.text)
            announce = zeroconf and endpoint.listen
            return WyomingSource(endpoint, zeroconf=announce, **retries)
        case "wyoming-proxy":
            retries.pop("wait_for_device", None)  # an upstream down at start is an outage too
            return WyomingProxySource(
                parse_proxy(parsed.text), zeroconf=zeroconf, channel=channel, **retries
            )
