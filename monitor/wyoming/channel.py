"""The one local channel from the relay process to the measuring process: a Unix socket.

The relay (``voxmeter relay``, :mod:`monitor.relay.process`) listens on the socket; the measuring
process (``voxmeter run`` with ``relay.socket`` set) connects and subscribes to its sources by
name. For every audio event a proxy passed upstream, the relay's :class:`ChannelTap` writes one
message — the source, the connection's stream key, the event's type, format and samples — to the
subscriber's socket without ever waiting: the write goes to the kernel's socket buffer or, when
that is full, to asyncio's transport buffer, and a chunk that would take that past
``capacity_bytes`` is dropped instead. A chunk with no subscriber (the measuring process is
down, restarting, or was never started) is dropped too. Dropped chunks are counted in seconds of
audio per source ("unmeasured"), and the count travels to the measuring side in the ``hello``
that answers each subscription and in every chunk's message, so the measuring process exports
what was lost while it was gone (``voxmeter_dropped_seconds_total``).

A dropped chunk leaves a gap in its stream: the stream's next message says so (``gap``), and
the measuring side ends the speaker's turn there (as for a drop of its own queue), so audio on
either side of a gap is never glued into one window. Messages without samples (start, stop, the
``left`` of a closed connection) may still be written while the buffer holds less than
``capacity_bytes`` + :data:`CONTROL_SLACK_BYTES`, so turns and streams are seen to end, and the
buffer is bounded all the same. A measuring process that subscribes mid-stream sees the stream
begin with its next message.

The channel is two-way for small state: after its ``subscribe``, the measuring process may send
messages of other kinds (``protect``: what :mod:`monitor.daemon.policy_feed` tells the relay
process's anonymiser, see :mod:`monitor.protect.relay_process`). The relay hands each to
``ChannelServer.on_message`` with the source it concerns and never answers; the measuring side's
:class:`Uplink` keeps the latest message of each kind and sends it again after every
(re)subscription, so a restarted relay learns the state at once. Neither side waits on the other
for them: they are written to the socket like everything else.

Every message read is checked against one schema (:mod:`monitor.wyoming.channel_schema`) by
both ends: one that does not fit is one warning and is ignored.

Wire format: per message an 8-byte header (big-endian lengths of the JSON header and of the
payload), the JSON header, the payload (PCM samples, for chunks). Measuring side: :func:`receive`
reads it, reconnecting with random capped backoff, and hands events to the same tap the in-process
proxy feeds (:class:`~monitor.wyoming.proxy.SideTap`).

Numpy-free: the relay process imports this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wyoming.event import Event

from monitor.audio.retry import backoff_seconds
from monitor.errors import AudioDeviceError
from monitor.logs import PeerWarnings
from monitor.userfiles import socket_problem
from monitor.wyoming.channel_schema import message_problem
from monitor.wyoming.wire import MAX_DATA_BYTES, MAX_PAYLOAD_BYTES, audio_seconds

logger = logging.getLogger(__name__)
warnings = PeerWarnings(logger)
"""Warnings the other end can trigger, rate-limited per end and kind."""
MEASURING = "the measuring process"

CAPACITY_BYTES = 1 << 20
"""Default bound of what waits for the measuring process: 1 MiB, 33 s of 16 kHz 16-bit mono."""
CONTROL_SLACK_BYTES = 64 << 10
"""How far past the capacity messages without samples (start, stop, left) may still go."""
_LENGTHS = struct.Struct(">II")
_AUDIO = ("audio-start", "audio-chunk", "audio-stop")


def encode(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """One message: lengths, JSON header, payload."""
    text = json.dumps(header, separators=(",", ":")).encode()
    return _LENGTHS.pack(len(text), len(payload)) + text + payload


async def read_message(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes] | None:
    """The next message, or None at the end of the stream; ValueError for a frame over the
    limits or cut short. A header that is not a JSON object reads as ``{"kind": None}``, which
    :func:`~monitor.wyoming.channel_schema.message_problem` refuses."""
    try:
        lengths = await reader.readexactly(_LENGTHS.size)
    except asyncio.IncompleteReadError as error:
        if error.partial:
            raise ValueError("channel cut in the middle of a message") from error
        return None
    size, payload_size = _LENGTHS.unpack(lengths)
    if size > MAX_DATA_BYTES or payload_size > MAX_PAYLOAD_BYTES:
        raise ValueError(f"channel message of {size} + {payload_size} bytes is over the limits")
    text = await reader.readexactly(size)
    payload = await reader.readexactly(payload_size) if payload_size else b""
    try:
        header = json.loads(text)
    except ValueError:  # the frame was whole: the next message is read as usual
        header = None
    if not isinstance(header, dict):  # the schema's to refuse (monitor/wyoming/channel_schema.py)
        return {"kind": None}, payload
    return header, payload


# ---- the relay's side ----------------------------------------------------------------------


class _Subscriber:
    """One measuring process's connection: its transport and how much waits in it."""

    def __init__(self, writer: asyncio.StreamWriter, capacity_bytes: int) -> None:
        self.writer = writer
        self.capacity_bytes = capacity_bytes

    @property
    def gone(self) -> bool:
        return self.writer.is_closing()

    def waiting_bytes(self) -> int:
        """Bytes written but not yet taken by the peer: asyncio's buffer plus the kernel's."""
        transport = self.writer.transport
        kernel = 0
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                kernel = _outq(sock.fileno())
        return transport.get_write_buffer_size() + kernel

    def send(self, message: bytes, *, samples: bool) -> bool:
        """Write ``message`` if it fits (see the module docstring); never waits."""
        limit = self.capacity_bytes + (0 if samples else CONTROL_SLACK_BYTES)
        if self.gone or self.waiting_bytes() + len(message) > limit:
            return False
        self.writer.write(message)
        return True


def _outq(fd: int) -> int:
    """Bytes in a socket's send queue not yet read by the peer (``SIOCOUTQ``)."""
    import fcntl
    import termios

    buffer = fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0\0\0\0")
    return int(struct.unpack("i", buffer)[0])


@dataclass
class ChannelServer:
    """The relay's end of the channel: the socket at ``path``, one subscriber per source."""

    path: Path
    capacity_bytes: int = CAPACITY_BYTES
    relay_id: str = field(default_factory=lambda: f"{os.getpid()}-{random.getrandbits(32):08x}")
    unmeasured: dict[str, float] = field(default_factory=dict)
    """Seconds of audio relayed but not handed to a measuring process, per source, since start."""
    subscribers: dict[str, _Subscriber] = field(default_factory=dict)
    on_message: Callable[[str, dict[str, Any]], None] | None = None
    """Hears each message a measuring process sends after its subscription (not ``subscribe``),
    once per source it subscribed to: ``(source, header)``."""
    _server: asyncio.AbstractServer | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    def tap(self, source: str) -> ChannelTap:
        """The tap of one source's proxy: what it relays goes to that source's subscriber."""
        self.unmeasured.setdefault(source, 0.0)
        return ChannelTap(self, source)

    async def start(self) -> None:
        """Listen; a live relay on the path already is one :class:`AudioDeviceError`, a stale
        socket file (a relay that was killed) is replaced; every other problem with the path
        (:func:`~monitor.userfiles.socket_problem`) is one line, and nothing is touched."""
        path = self.path
        if (problem := socket_problem(path, listening=True)) is not None:
            raise AudioDeviceError(f"relay.socket {path}: {problem}")
        try:
            if path.is_symlink() or path.exists():
                try:
                    _, writer = await asyncio.open_unix_connection(str(path))
                except OSError:
                    path.unlink()  # nobody listens: left by a relay that was killed
                else:
                    writer.close()
                    raise AudioDeviceError(f"relay.socket {path}: another relay is listening there")
            path.parent.mkdir(parents=True, exist_ok=True)
            self._server = await asyncio.start_unix_server(self._subscribe, str(path))
            path.chmod(0o660)  # the measuring process runs as the same user (or group)
        except OSError as error:
            why = os.strerror(error.errno) if error.errno else str(error)
            raise AudioDeviceError(f"relay.socket {path}: cannot listen ({why})") from error
        logger.info("relay channel listening on %s", path)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for subscriber in list(self.subscribers.values()):
                subscriber.writer.close()  # its handler reads the end and returns
            if self._handlers:
                await asyncio.wait(self._handlers, timeout=1.0)
            await self._server.wait_closed()
        with contextlib.suppress(OSError):
            self.path.unlink()

    async def _subscribe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A measuring process: its ``subscribe`` names the sources it measures; it gets the
        ``hello`` (the unmeasured seconds so far), then their audio until either side leaves."""
        names: list[str] = []
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            message = await asyncio.wait_for(read_message(reader), 10.0)
            if message is None or message[0].get("kind") != "subscribe":
                raise ValueError("the first message is not a subscription")
            if (problem := message_problem(*message)) is not None:
                raise ValueError(problem)
            names = [n for n in message[0]["sources"] if n in self.unmeasured]
            subscriber = _Subscriber(writer, self.capacity_bytes)
            for name in names:
                old = self.subscribers.get(name)
                if old is not None:
                    old.writer.close()  # the newest measuring process wins
                self.subscribers[name] = subscriber
            hello = {"kind": "hello", "relay": self.relay_id, "unmeasured": self.unmeasured}
            writer.write(encode(hello))
            logger.info("measuring process subscribed to %s", ", ".join(names) or "nothing")
            while (message := await read_message(reader)) is not None:  # until its end
                if (problem := message_problem(*message)) is not None:
                    warnings.warn(MEASURING, "malformed", "relay channel: ignored %s", problem)
                    continue
                self._heard(names, message[0])
        except (OSError, ValueError, TimeoutError, asyncio.IncompleteReadError) as error:
            why = error
            warnings.warn(MEASURING, "dropped", "relay channel: a subscriber was dropped (%s)", why)
        finally:
            for name in names:
                mine = self.subscribers.get(name)
                if mine is not None and mine.writer is writer:
                    del self.subscribers[name]
            writer.close()
            self._handlers.discard(handler)  # type: ignore[arg-type]
            if names:
                logger.warning(
                    "measuring process left: audio of %s is relayed unmeasured until it is back",
                    ", ".join(names),
                )

    def _heard(self, names: list[str], header: dict[str, Any]) -> None:
        if self.on_message is None:
            return
        for name in names:
            try:
                self.on_message(name, header)
            except (KeyError, TypeError, ValueError) as error:  # a peer's mistake, not ours
                kind = header["kind"]
                warnings.warn(
                    MEASURING, "malformed", "relay channel: a %s message was ignored (%s)",
                    kind, error,
                )  # fmt: skip


@dataclass
class _Stream:
    """A relayed connection as the channel sees it."""

    key: str
    subscriber: _Subscriber | None = None  # the one its last message went to
    gap: bool = False  # a message of it was dropped since the last that went


class ChannelTap:
    """:class:`~monitor.wyoming.relay.Tap` of one source into a :class:`ChannelServer`
    (see the module docstring for what is dropped and how a gap is marked)."""

    def __init__(self, server: ChannelServer, source: str) -> None:
        self.server = server
        self.source = source
        self._streams: dict[object, _Stream] = {}
        self._numbers = itertools.count(1)
        self._dropping = False  # logged once per run of drops

    def offer(self, who: object, event: Event) -> None:
        if event.type not in _AUDIO:
            return
        stream = self._streams.get(who)
        if stream is None:
            stream = self._streams[who] = _Stream(f"{self.server.relay_id}.{next(self._numbers)}")
        subscriber = self._subscriber()
        if stream.subscriber is not subscriber:  # a new measuring process: a new stream to it
            stream.subscriber, stream.gap = subscriber, False
        chunk = event.type == "audio-chunk"
        if subscriber is not None:
            data = event.data if isinstance(event.data, dict) else {}
            header = self._header(stream, "event")
            header |= {"type": event.type, "data": data}
            if stream.gap:
                header["gap"] = True
            if subscriber.send(encode(header, event.payload or b""), samples=chunk):
                stream.gap = self._dropping = False
                return
            stream.gap = True
        if chunk:
            self.server.unmeasured[self.source] += audio_seconds(event)
            if not self._dropping:
                self._dropping = True
                why = (
                    "no measuring process" if subscriber is None else "the measuring side is behind"
                )
                logger.warning("%s: audio relayed unmeasured (%s)", self.source, why)

    def left(self, who: object) -> None:
        stream = self._streams.pop(who, None)
        subscriber = self._subscriber()
        if stream is not None and subscriber is not None and stream.subscriber is subscriber:
            subscriber.send(encode(self._header(stream, "left")), samples=False)

    def _subscriber(self) -> _Subscriber | None:
        subscriber = self.server.subscribers.get(self.source)
        return None if subscriber is None or subscriber.gone else subscriber

    def _header(self, stream: _Stream, kind: str) -> dict[str, Any]:
        unmeasured = self.server.unmeasured[self.source]
        return {"kind": kind, "source": self.source, "stream": stream.key, "unmeasured": unmeasured}


# ---- the measuring side --------------------------------------------------------------------


class Inbox(Protocol):
    """What :func:`receive` feeds: :class:`~monitor.wyoming.proxy.SideTap`."""

    def offer(self, who: object, event: Event, *, gap: bool = False) -> None: ...

    def left(self, who: object) -> None: ...


class Uplink:
    """What the measuring process tells the relay about one source: the latest message of each
    kind, written at once to the connected relay (never waited for) and again to each relay it
    subscribes to later (one that restarted, or the first)."""

    def __init__(self) -> None:
        self.latest: dict[str, dict[str, Any]] = {}
        self._writer: asyncio.StreamWriter | None = None

    def publish(self, header: dict[str, Any]) -> None:
        """Keep ``header`` as its kind's latest and send it if a relay is connected."""
        self.latest[str(header["kind"])] = header
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(encode(header))

    def attach(self, writer: asyncio.StreamWriter | None) -> None:
        """A subscription on ``writer`` (None: it ended): send it every latest message."""
        self._writer = writer
        for header in self.latest.values() if writer is not None else ():
            writer.write(encode(header))


class Unmeasured:
    """The relay's count of unmeasured seconds of one source, turned into increments: a relay
    that restarted counts from zero again."""

    def __init__(self) -> None:
        self._relay = ""
        self._seen = 0.0

    def update(self, relay: str, seconds: float) -> float:
        """Seconds newly unmeasured since the last report."""
        if relay != self._relay:
            self._relay, self._seen = relay, 0.0
        new = max(0.0, seconds - self._seen)
        self._seen = max(self._seen, seconds)
        return new


async def receive(
    path: Path,
    source: str,
    tap: Inbox,
    on_unmeasured: Callable[[float], None],
    *,
    on_connected: Callable[[bool], None] = lambda connected: None,
    uplink: Uplink | None = None,
    initial_seconds: float = 0.1,
    max_seconds: float = 2.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
) -> None:
    """Until cancelled: subscribe to ``source`` at the relay's socket ``path`` and hand its
    events to ``tap`` (each stream by its key); ``on_unmeasured`` gets the seconds the relay
    could not hand over; ``on_connected`` hears True at each ``hello``, False when the channel is
    lost; ``uplink``'s messages go to the relay after each subscription. A lost or refused
    connection is retried with random capped backoff; the streams open then are ended."""
    rng = rng or random.Random()
    unmeasured = Unmeasured()
    relay = ""
    attempt = 0  # failed connection attempts in a row
    while True:
        attempt += 1
        keys: dict[str, str] = {}  # one object per stream key: the tap tells streams by identity
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
        except OSError as error:
            if attempt == 1:  # once per outage
                logger.warning("relay channel %s: %s; retrying", path, error.strerror or error)
            await sleep(backoff_seconds(rng, attempt, initial_seconds, max_seconds))
            continue
        try:
            writer.write(encode({"kind": "subscribe", "sources": [source]}))
            if uplink is not None:
                uplink.attach(writer)
            logger.info("measuring %s through the relay channel %s", source, path)
            while (message := await read_message(reader)) is not None:
                header, payload = message
                if (problem := message_problem(header, len(payload))) is not None:
                    warnings.warn(str(path), "malformed", "relay channel: ignored %s", problem)
                    continue
                kind = header["kind"]
                if kind == "hello":
                    relay = header["relay"]
                    on_connected(True)
                    seconds = float(header["unmeasured"].get(source, 0.0))
                else:
                    seconds = _stream_message(header, payload, keys, tap)
                if (new := unmeasured.update(relay, seconds)) > 0:
                    on_unmeasured(new)
            problem = "the relay closed the channel"
        except (OSError, ValueError) as error:
            problem = f"channel broken ({error})"
        finally:
            _channel_lost(writer, uplink, on_connected, keys, tap)
        logger.warning("relay channel %s: %s; reconnecting", path, problem)
        attempt = 0
        await sleep(backoff_seconds(rng, 1, initial_seconds, max_seconds))


def _stream_message(
    header: dict[str, Any], payload: bytes | None, keys: dict[str, str], tap: Inbox
) -> float:
    """A stream's event (or its end) handed to the tap under its key; the seconds the relay
    says it could not hand over so far (0 for a kind not meant for this side: ignored).
    ``header`` fits the schema (checked already)."""
    if header["kind"] not in ("left", "event"):
        logger.debug("relay channel: ignored a %s message", header["kind"])
        return 0.0
    if header["kind"] == "left":
        key = keys.pop(header["stream"], None)
        if key is not None:
            tap.left(key)
        return float(header["unmeasured"])
    key = keys.setdefault(header["stream"], header["stream"])
    event = Event(header["type"], header["data"], payload or None)
    tap.offer(key, event, gap=bool(header.get("gap")))
    return float(header["unmeasured"])


def _channel_lost(
    writer: asyncio.StreamWriter,
    uplink: Uplink | None,
    on_connected: Callable[[bool], None],
    keys: dict[str, str],
    tap: Inbox,
) -> None:
    """The channel is gone: the uplink detached, the socket closed, every stream open on it
    ended (the relay cannot resume them on the next connection)."""
    if uplink is not None:
        uplink.attach(None)
    writer.close()
    on_connected(False)
    for key in keys.values():
        tap.left(key)
