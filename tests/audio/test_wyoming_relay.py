"""The relay's one seam for changing audio on its way upstream (``ProxyServer(transform=)``):
what the upstream receives and what the tap is offered are the transformed chunk; every other
event passes byte for byte."""

from __future__ import annotations

import asyncio
import json

from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.audio.wyoming_relay import ProxyEndpoint, ProxyServer
from monitor.audio.wyoming_wire import encode_event
from tests.audio.wyoming_peers import talk


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
            ProxyEndpoint("127.0.0.1", 0, "127.0.0.1", port), tap, transform=silence
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
    assert chunk.payload == bytes(1024)
