"""The Wyoming wire: events read with limits (and as the exact bytes they came in, for a
relay), written as the ``wyoming`` package writes them, the one-line reasons of a broken
peer, and a server announced on zeroconf. Shared by the Wyoming source (wyoming.py) and the
proxy (wyoming_proxy.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from wyoming.event import Event
from wyoming.server import AsyncTcpServer, HandlerFactory

from monitor.errors import AudioDeviceError
from monitor.vocabulary import PROTECT_KEY
from monitor.wyoming.formats import audio_problem

WYOMING_VERSION = "1.10.2"
"""The protocol version our own events carry (the pinned ``wyoming`` package's)."""


PLAIN_BYTES_PER_SECOND = 32000
"""16 kHz, 16-bit mono: how a chunk whose format fields are unusable is counted."""


def audio_seconds(event: Event) -> float:
    """Seconds of audio in a chunk: what dropped audio is counted in. A chunk whose format fields
    are unusable counts as 16 kHz 16-bit mono (its bytes were audio all the same)."""
    data = event.data if isinstance(event.data, dict) else {}
    return payload_seconds(data, len(event.payload or b""))


def payload_seconds(data: dict[str, Any], payload_bytes: int) -> float:
    """Seconds of ``payload_bytes`` of audio in the format of ``data`` (:func:`audio_seconds`)."""
    try:
        per_second = int(data["rate"]) * int(data["width"]) * int(data["channels"])
    except (KeyError, TypeError, ValueError):
        per_second = PLAIN_BYTES_PER_SECOND
    if per_second <= 0:
        per_second = PLAIN_BYTES_PER_SECOND
    return payload_bytes / per_second


def bound_port(server: AsyncTcpServer) -> int:
    """The port a started server listens on (the one the OS chose when 0 was asked)."""
    listening = server._server  # the package keeps its asyncio server there
    if listening is None:
        raise RuntimeError("the Wyoming server is not started")
    return int(listening.sockets[0].getsockname()[1])  # type: ignore[attr-defined]


def reason(error: OSError) -> str:
    """``Connection refused``, not asyncio's ``Connect call failed ('127.0.0.1', 1)``."""
    return os.strerror(error.errno) if error.errno else str(error)


@contextlib.asynccontextmanager
async def serving(
    name: str, host: str, port: int, handler: HandlerFactory, *, zeroconf: bool
) -> AsyncIterator[int]:
    """A Wyoming server on ``host:port`` (announced on zeroconf when asked) for the block;
    yields the bound port. A port that cannot be bound is one :class:`AudioDeviceError`."""
    server = AsyncTcpServer(host, port)
    try:
        await server.start(handler)
    except OSError as error:
        raise AudioDeviceError(f"{name}: cannot listen ({reason(error)})") from error
    bound = bound_port(server)
    announcement = None
    if zeroconf:  # imported only then: 4 MB the relay process does without when it is off
        from monitor.wyoming.zeroconf import Announcement

        announcement = Announcement(bound, host)
    try:
        if announcement is not None:
            await announcement.start()
        yield bound
    finally:
        if announcement is not None:
            await announcement.stop()
        await server.stop()


MAX_DATA_BYTES = 1 << 20
"""Largest JSON data part of an event accepted (audio formats and info need a few hundred)."""
MAX_PAYLOAD_BYTES = 16 << 20
"""Largest audio payload of one event: 10 s of 8-channel 48 kHz 32-bit PCM is 15.4 MB; a peer
that announces more would otherwise have every byte buffered until it arrives."""


class ProtocolError(ValueError):
    """A Wyoming peer sent something that is not a well-formed event."""


class RefusedAudioError(ProtocolError):
    """A well-formed audio event outside the accepted formats (:mod:`monitor.wyoming.formats`):
    its payload was not read. The peer is told (:func:`refusal`) and let go."""

    def __init__(self, problem: str, seconds: float) -> None:
        super().__init__(problem)
        self.seconds = seconds
        """The audio it announced, in seconds (:func:`payload_seconds`): what is dropped."""


BROKEN_EVENT = (ProtocolError, ValueError, EOFError)
"""A peer that breaks the protocol: see :func:`read_event`; EOFError is asyncio's
IncompleteReadError (cut off in the middle of an event)."""


def _length(header: dict[str, Any], key: str, limit: int) -> int:
    value = header.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ProtocolError(f"event {key} {value!r} is not a byte count in 0..{limit}")
    return value


async def read_event(reader: asyncio.StreamReader, *, peer: bool = False) -> Event | None:
    """The next event, or None at the end of the stream: the ``wyoming`` package's
    ``async_read_event`` with limits. A malformed header (not JSON, no type, lengths that are not
    counts or exceed :data:`MAX_DATA_BYTES` / :data:`MAX_PAYLOAD_BYTES`) raises ProtocolError, a
    header line over 64 KiB ValueError, a stream cut mid-event IncompleteReadError — where the
    package reads garbage as a clean end and buffers any announced payload. With ``peer`` (a
    client or service whose audio we decode or anonymise), audio outside the accepted formats
    raises :class:`RefusedAudioError` before its payload is read."""
    read = await read_event_bytes(reader, peer=peer)
    return None if read is None else read[0]


async def read_event_bytes(
    reader: asyncio.StreamReader, *, peer: bool = False
) -> tuple[Event, bytes] | None:
    """The next event and the exact bytes it came in (header line, data, payload), for a relay
    that must pass events on unchanged; None at the end. Checked as :func:`read_event` says."""
    line = await reader.readline()
    if not line:
        return None
    try:
        header = json.loads(line)
    except ValueError as error:
        raise ProtocolError(f"event header is not JSON ({line[:40]!r})") from error
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise ProtocolError("event without a type")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise ProtocolError("event data is not a JSON object")
    data_length = _length(header, "data_length", MAX_DATA_BYTES)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    raw = [line]
    if data_length:
        raw.append(await reader.readexactly(data_length))
        try:
            extra = json.loads(raw[-1])
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
            raise ProtocolError("event data is not JSON") from error
        if not isinstance(extra, dict):
            raise ProtocolError("event data is not a JSON object")
        data = {**data, **extra}
    if peer and (problem := audio_problem(header["type"], data, payload_length)) is not None:
        raise RefusedAudioError(problem, payload_seconds(data, payload_length))
    payload = await reader.readexactly(payload_length) if payload_length else None
    if payload is not None:
        raw.append(payload)
    return Event(type=header["type"], data=data, payload=payload), b"".join(raw)


def broken(error: Exception) -> str:
    """One line for a broken event, without the package's internals."""
    if isinstance(error, asyncio.IncompleteReadError):
        return f"connection cut in the middle of an event ({len(error.partial)} bytes of it read)"
    return f"malformed event ({error})"


REFUSED_CODE = "unsupported-audio"
"""The ``code`` of the Wyoming ``error`` a peer whose audio is refused gets."""


def refusal(problem: str) -> bytes:
    """The Wyoming ``error`` event that tells a peer why its audio was refused."""
    return encode_event(Event("error", {"text": f"voxmeter: {problem}", "code": REFUSED_CODE}))


async def let_go(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, seconds: float = 5.0
) -> None:
    """After a refusal: the end of what we send, then what the peer still sends is read (in
    pieces, kept nowhere) for at most ``seconds`` so closing does not reset the connection
    before the peer read the error."""
    with contextlib.suppress(OSError, TimeoutError):
        await writer.drain()
        writer.write_eof()
        async with asyncio.timeout(seconds):
            while await reader.read(1 << 16):
                pass


async def refuse(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    problem: str,
    *,
    seconds: float = 5.0,
) -> None:
    """Tell a peer why its audio was refused (:func:`refusal`), then let it go (:func:`let_go`)."""
    with contextlib.suppress(OSError, RuntimeError):  # RuntimeError: already told why (EOF sent)
        writer.write(refusal(problem))
    await let_go(reader, writer, seconds=seconds)


def peer_name(writer: asyncio.StreamWriter) -> str:
    """A peer's host (not its port: one host opening many connections is one peer)."""
    address = writer.get_extra_info("peername")
    return str(address[0]) if isinstance(address, tuple) and address else "a peer"


def encode_event(event: Event) -> bytes:
    """An event as the ``wyoming`` package writes it (header line, data, payload)."""
    header: dict[str, Any] = {"type": event.type, "version": WYOMING_VERSION}
    data = json.dumps(event.data, ensure_ascii=False).encode() if event.data else b""
    if data:
        header["data_length"] = len(data)
    if event.payload:
        header["payload_length"] = len(event.payload)
    line = json.dumps(header, ensure_ascii=False).encode() + b"\n"
    return line + data + (event.payload or b"")


def protected_alpha(start: Event, name: str) -> float | None:
    """The McAdams α the relay's transform marked ``start`` with (``voxmeter_protect``), None
    when it passed clear; a mark this version cannot read is logged and read as clear."""
    mark = start.data.get(PROTECT_KEY) if isinstance(start.data, dict) else None
    if mark is None:
        return None
    alpha = mark.get("alpha") if isinstance(mark, dict) else None
    method = mark.get("method") if isinstance(mark, dict) else None
    if method == "mcadams" and isinstance(alpha, int | float) and 0.0 < float(alpha) <= 1.0:
        return float(alpha)
    logging.getLogger(__name__).warning(
        "%s: unreadable %s mark %r: received view off", name, PROTECT_KEY, mark
    )
    return None
