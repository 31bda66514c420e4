"""Real Wyoming peers from the ``wyoming`` package that stream a WAV file, for the source tests.

``stream_to(host, port, path)`` is a client (``AsyncTcpClient``) pushing audio-start, chunks and
audio-stop to a ``wyoming-listen://`` source; ``microphone_service(path)`` is a server
(``AsyncTcpServer``) that streams the file to each client that connects, as a Wyoming
microphone service does, for a ``wyoming://`` source; ``conversation`` and ``talk`` are a
request/response client (transcribe or detect, then audio), for the proxy tests.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import soundfile as sf
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.server import AsyncEventHandler, AsyncTcpServer

from tests.realparts.mosquitto import free_port

SAMPLES_PER_CHUNK = 1024  # wyoming-satellite's default chunk


def wav_events(path: Path) -> list[Event]:
    """audio-start, the 16-bit file's PCM in chunks (its own rate and channels), audio-stop."""
    data, rate = sf.read(str(path), dtype="int16", always_2d=True)
    channels = data.shape[1]
    raw = data.astype("<i2").tobytes()
    step = SAMPLES_PER_CHUNK * 2 * channels
    events = [AudioStart(rate=rate, width=2, channels=channels).event()]
    events += [
        AudioChunk(rate=rate, width=2, channels=channels, audio=raw[i : i + step]).event()
        for i in range(0, len(raw), step)
    ]
    return [*events, AudioStop().event()]


async def stream_to(host: str, port: int, path: Path, *, timeout_seconds: float = 60.0) -> None:
    """Connect (retrying until the listener is up) and stream ``path``, then hang up."""
    deadline = asyncio.get_running_loop().time() + timeout_seconds
    while True:
        try:
            async with AsyncTcpClient(host, port) as client:
                for event in wav_events(path):
                    await client.write_event(event)
                return
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


class _Streamer(AsyncEventHandler):
    """Streams the service's file to the client that connected, then closes."""

    events: ClassVar[list[Event]] = []

    async def handle_event(self, event: Event) -> bool:
        return False  # a microphone service does not listen

    async def run(self) -> None:
        try:
            for event in self.events:
                await self.write_event(event)
        finally:
            self.writer.close()


@contextlib.asynccontextmanager
async def microphone_service(path: Path) -> AsyncIterator[int]:
    """A Wyoming server on a free loopback port streaming ``path`` to every client; its port."""
    port = free_port()
    handler = type("Streamer", (_Streamer,), {"events": wav_events(path)})
    server = AsyncTcpServer("127.0.0.1", port)
    await server.start(handler)
    try:
        yield port
    finally:
        await server.stop()


# ---- request/response conversations, for the proxy tests ---------------------------------


def conversation(audio: np.ndarray, first: Event, *, rate: int = 16000) -> list[Event]:
    """``first`` (transcribe / detect), audio-start, the audio in chunks, audio-stop."""
    raw = audio.astype("<i2").tobytes()
    step = SAMPLES_PER_CHUNK * 2
    chunks = [
        AudioChunk(rate=rate, width=2, channels=1, audio=raw[i : i + step]).event()
        for i in range(0, len(raw), step)
    ]
    return [first, AudioStart(rate=rate, width=2, channels=1).event(), *chunks, AudioStop().event()]


async def talk(port: int, events: list[Event], *, answers: int = 1) -> list[Event]:
    """Send ``events`` and read ``answers`` events back (None = the connection ended)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
        replies = []
        async with asyncio.timeout(120):
            for _ in range(answers):
                reply = await client.read_event()
                if reply is None:
                    break
                replies.append(reply)
        return replies
