"""The one parser of an audio source's spelling (command line and config), and the factory that
opens the source it names."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from monitor.audio.file import FileSource
from monitor.audio.frames import RATE_HZ, AudioSource
from monitor.audio.microphone import MicrophoneSource
from monitor.audio.stdin import StdinSource
from monitor.errors import InputError
from monitor.numerals import ascii_digits
from monitor.sources.several import SourceSet
from monitor.userfiles import not_utf8
from monitor.wyoming.endpoint import ProxyEndpoint, parse_endpoint, parse_proxy, parse_wyoming
from monitor.wyoming.proxy import WyomingProxySource
from monitor.wyoming.source import WyomingSource

SOURCE_SPELLINGS = (
    "mic, mic:DEVICE, file:PATH[?fast], stdin, stdin:RATE[:CHANNELS], "
    "wyoming://HOST:PORT, wyoming-listen://HOST:PORT or "
    "wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT, each optionally NAME=SPEC"
)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""A source's name (its room): shown in log lines and as the ``source`` label of its metrics."""
NAME_RULE = "a letter or digit, then letters, digits, - or _, at most 64 characters"


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
    name: str = ""  # ``NAME=`` before the spec, else the kind (and port: ``wyoming-proxy-10300``)
    listen_port: int | None = None  # wyoming-listen, wyoming-proxy: the port we serve on


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
    with the first connection (monitor/wyoming/source.py);
    ``wyoming-proxy://HOST:PORT?upstream=tcp://HOST:PORT`` (we relay a Wyoming service and
    measure what passes, monitor/wyoming/proxy.py). Any of them may be named, ``NAME=SPEC``
    (``kitchen=wyoming-proxy://…``): the part before the first ``=``, when it holds no ``:``
    or ``/``, is the name (:data:`NAME`); unnamed, a source is called by its kind (and port). A
    bad one raises InputError.
    """
    head, equals, rest = spec.partition("=")
    if equals and not any(c in head for c in ":/"):
        if not NAME.fullmatch(head):
            raise InputError("source", f"bad source name {head!r} in {spec!r} ({NAME_RULE})")
        return replace(_parse_spec(rest), name=head)
    return _parse_spec(spec)


def _parse_spec(spec: str) -> SourceSpec:
    kind, _, arg = spec.partition(":")
    if kind == "mic":
        device: str | int | None = (int(arg) if ascii_digits(arg) else arg) if arg else None
        return SourceSpec("mic", spec, device=device, name="mic")
    if kind == "file" and arg:
        if (problem := not_utf8(arg)) is not None:
            raise InputError("source", f"file {arg.encode(errors='replace').decode()!r}: {problem}")
        fast = arg.endswith("?fast")
        return SourceSpec("file", spec, path=arg.removesuffix("?fast"), fast=fast, name="file")
    if kind == "stdin":
        parts = arg.split(":") if arg else []
        if len(parts) <= 2 and all(ascii_digits(p) for p in parts):
            rate = int(parts[0]) if parts else RATE_HZ
            channels = int(parts[1]) if len(parts) == 2 else 1
            return SourceSpec("stdin", spec, rate_hz=rate, channels=channels, name="stdin")
        raise InputError("stdin", f"bad stream spec {spec!r} (expected stdin[:RATE[:CHANNELS]])")
    if kind in ("wyoming", "wyoming-listen", "wyoming-proxy"):
        endpoint = parse_wyoming(spec)  # checked now; the source parses it again when opened
        proxy = isinstance(endpoint, ProxyEndpoint)
        port = endpoint.port if proxy or endpoint.listen else None
        family = "wyoming-proxy" if proxy else "wyoming"
        return SourceSpec(family, spec, name=f"{kind}-{endpoint.port}", listen_port=port)
    raise InputError("source", f"unknown audio source {spec!r} (must be {SOURCE_SPELLINGS})")


def parse_sources(specs: Sequence[str]) -> tuple[SourceSpec, ...]:
    """Several sources for one daemon: each parsed, no two with one name, no port served twice
    (0, any free port, aside), stdin at most once. A problem raises InputError naming it."""
    if not specs:
        raise InputError("source", "no source given")
    parsed = tuple(parse_source(spec) for spec in specs)
    seen: dict[str, SourceSpec] = {}
    ports: dict[int, SourceSpec] = {}
    for source in parsed:
        if source.name in seen:
            raise InputError(
                "source",
                f"two sources are named {source.name!r} ({seen[source.name].text!r} and "
                f"{source.text!r}): give each its own, NAME=SPEC",
            )
        seen[source.name] = source
        port = source.listen_port
        if port and port in ports:
            raise InputError(
                "source",
                f"port {port} is served by two sources ({ports[port].name} and {source.name}): "
                "one Wyoming server per port",
            )
        if port:
            ports[port] = source
    if sum(source.kind == "stdin" for source in parsed) > 1:
        raise InputError("source", "stdin can feed one source only")
    return parsed


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


def open_sources(
    specs: Sequence[SourceSpec],
    *,
    fast: bool = False,
    retry: Retry | None = None,
    zeroconf: bool = False,
    channel: Path | None = None,
) -> AudioSource:
    """The daemon's sources (:func:`parse_sources`): one is opened as itself, several as a
    :class:`~monitor.sources.several.SourceSet` whose frames carry each one's name (its log
    lines too, where it names itself); ``channel`` as :func:`open_source` takes it."""
    options: dict[str, Any] = {"fast": fast, "retry": retry, "zeroconf": zeroconf}
    options["channel"] = channel
    if len(specs) == 1:
        return open_source(specs[0], **options)
    named: dict[str, AudioSource] = {}
    for spec in specs:
        source = named[spec.name] = open_source(spec, **options)
        if isinstance(getattr(source, "name", None), str):
            source.name = f"{spec.name}: {source.name}"  # type: ignore[attr-defined]
    return SourceSet(named)
