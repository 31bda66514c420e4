"""The relay's one seam for changing audio on its way upstream (``ProxyServer(transform=)``):
the upstream receives the transformed chunk, every other event byte for byte, and the tap is
offered the chunk as the client sent it (the measuring side tracks who speaks from it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.wyoming.relay import ProxyEndpoint, ProxyServer
from monitor.wyoming.wire import encode_event
from tests.wyoming.wyoming_peers import talk


class Offered:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def offer(self, who: object, event: Event) -> None:
        self.events.append(event)

    def left(self, who: object) -> None:
        pass


def test_a_chunk_transform_is_what_the_upstream_and_the_tap_get() -> None:
    fmt = {"rate": 16000, "width": 2, "channels": 1}
    events = [
        Transcribe().event(),
        AudioStart(**fmt).event(),
        AudioChunk(audio=b"\x01\x02" * 512, **fmt).event(),
        AudioStop().event(),
    ]

    def silence(event: Event) -> Event:
        return Event(event.type, event.data, bytes(len(event.payload or b"")))

    def silencing() -> Callable[[Event, bytes], bytes]:
        def transform(event: Event, raw: bytes) -> bytes:
            return encode_event(silence(event)) if event.type == "audio-chunk" else raw

        return transform

    async def main() -> tuple[bytes, Offered]:
        received = bytearray()
        done = asyncio.Event()

        async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while line := await reader.readline():
                received.extend(line)
                header = json.loads(line)
                size = header.get("data_length", 0) + header.get("payload_length", 0)
                received.extend(await reader.readexactly(size))
                if header["type"] == "audio-stop":
                    break
            writer.write(encode_event(Event("transcript", {"text": "ok"})))
            await writer.drain()
            writer.close()
            done.set()

        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tap = Offered()
        relay = ProxyServer(
            ProxyEndpoint("127.0.0.1", 0, "127.0.0.1", port), tap, transform=silencing
        )
        async with relay.serving():
            (reply,) = await talk(relay.port, events)
            await done.wait()
        server.close()
        assert reply.type == "transcript"
        return bytes(received), tap

    received, tap = asyncio.run(main())
    expected = b"".join(
        encode_event(silence(e)) if e.type == "audio-chunk" else encode_event(e) for e in events
    )
    assert received == expected  # the chunk silenced, the rest as the client sent it
    chunk = next(e for e in tap.events if e.type == "audio-chunk")
    assert chunk.payload == b"\x01\x02" * 512  # the original, not what went upstream
