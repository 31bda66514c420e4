"""The local channel from the relay to the measuring process (monitor/wyoming/channel.py) over real
Unix sockets: every stream keyed, nothing ever waited for, what cannot be handed over counted."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.audio.frames import AudioFrame
from monitor.wyoming.channel import (
    CONTROL_SLACK_BYTES,
    ChannelServer,
    Unmeasured,
    Uplink,
    encode,
    read_message,
    receive,
)
from monitor.wyoming.proxy import ProxyEndpoint, WyomingProxySource
from monitor.wyoming.relay import ProxyServer
from tests.fakes import RecordingTap
from tests.realparts.wyoming_upstreams import serve, speech
from tests.wyoming.wyoming_peers import SAMPLES_PER_CHUNK, conversation, talk

SOURCE = "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:1"
START = AudioStart(rate=16000, width=2, channels=1).event()
STOP = AudioStop().event()


def chunk(seconds: float = 0.064, value: int = 0) -> Event:
    samples = np.full(round(seconds * 16000), value, dtype="<i2")
    return AudioChunk(rate=16000, width=2, channels=1, audio=samples.tobytes()).event()


@contextlib.asynccontextmanager
async def channel(tmp_path: Path, capacity_bytes: int = 1 << 20) -> AsyncIterator[ChannelServer]:
    server = ChannelServer(tmp_path / "relay.sock", capacity_bytes)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def until(condition: object, seconds: float = 10.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)


def test_without_a_measuring_process_audio_is_counted_unmeasured_then_reported(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with channel(tmp_path) as server:
            tap = server.tap(SOURCE)
            a = object()
            for event in (START, chunk(0.5), chunk(0.25), STOP):
                tap.offer(a, event)  # nobody subscribes: returns at once, counted
            assert server.unmeasured[SOURCE] == pytest.approx(0.75)
            recorder, reported = RecordingTap(), list[float]()
            task = asyncio.get_running_loop().create_task(
                receive(server.path, SOURCE, recorder, reported.append)
            )
            await until(lambda: reported)
            assert reported == [pytest.approx(0.75)]  # in the hello
            b = object()
            for event in (START, chunk(), chunk(), STOP):
                tap.offer(b, event)
            tap.left(b)
            await until(lambda: len(recorder.seen) >= 5)
            assert [kind for _, kind in recorder.seen] == [
                "audio-start", "audio-chunk", "audio-chunk", "audio-stop", None
            ]  # fmt: skip
            assert len({key for key, _ in recorder.seen}) == 1
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_interleaved_connections_keep_their_own_stream_keys(tmp_path: Path) -> None:
    async def main() -> None:
        async with channel(tmp_path) as server:
            tap = server.tap(SOURCE)
            recorder = RecordingTap()
            task = asyncio.get_running_loop().create_task(
                receive(server.path, SOURCE, recorder, lambda s: None)
            )
            await until(lambda: SOURCE in server.subscribers)
            a, b = object(), object()
            for who, event in [(a, START), (b, START), (a, chunk()), (b, chunk()), (a, STOP)]:
                tap.offer(who, event)
            tap.left(b)  # b hangs up mid-utterance: its turn ends
            await until(lambda: len(recorder.seen) == 6)
            keys = [key for key, _ in recorder.seen]
            assert keys[0] == keys[2] == keys[4] != keys[1] == keys[3] == keys[5]
            assert recorder.seen[5] == (keys[1], None)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(main())


def test_a_measuring_process_that_reads_nothing_never_holds_the_relay_up(tmp_path: Path) -> None:
    """A subscriber that stops reading (stopped, swapped out, in a GC pause): offers return at
    once, what waits stays within the capacity, the rest is counted, and the stream's next
    message marks the gap so no window spans it."""
    capacity = 64 << 10

    async def main() -> None:
        async with channel(tmp_path, capacity) as server:
            tap = server.tap(SOURCE)
            reader, writer = await asyncio.open_unix_connection(str(server.path))
            writer.write(encode({"kind": "subscribe", "sources": [SOURCE]}))
            await until(lambda: SOURCE in server.subscribers)
            subscriber = server.subscribers[SOURCE]
            a = object()
            tap.offer(a, START)
            sent = 0.0
            for _ in range(400):  # 400 × 64 ms = 25.6 s of audio, 819 kB: far over 64 kB
                tap.offer(a, chunk())
                sent += 0.064
                assert subscriber.waiting_bytes() <= capacity + CONTROL_SLACK_BYTES
            tap.offer(a, STOP)  # no samples: it still fits
            unmeasured = server.unmeasured[SOURCE]
            assert sent * 0.5 < unmeasured < sent
            messages = []
            while subscriber.waiting_bytes() or not reader.at_eof():
                try:
                    async with asyncio.timeout(0.5):
                        message = await read_message(reader)
                except TimeoutError:
                    break
                if message is None:
                    break
                messages.append(message[0])
            writer.close()
        kinds = [(m["kind"], m.get("type")) for m in messages]
        assert kinds[0] == ("hello", None)
        chunks = sum(kind == ("event", "audio-chunk") for kind in kinds)
        assert chunks * 0.064 == pytest.approx(sent - unmeasured)
        assert kinds[-1] == ("event", "audio-stop") and messages[-1]["gap"]  # the gap marked
        assert messages[-1]["unmeasured"] == pytest.approx(unmeasured)

    asyncio.run(main())


def test_unmeasured_counts_become_increments_across_relay_restarts() -> None:
    counts = Unmeasured()
    assert counts.update("relay-1", 2.0) == 2.0
    assert counts.update("relay-1", 2.0) == 0.0
    assert counts.update("relay-1", 3.5) == 1.5
    assert counts.update("relay-2", 0.5) == 0.5  # a restarted relay counts from zero


@pytest.mark.slow
def test_through_the_channel_the_measuring_side_gets_what_the_upstream_got(
    tmp_path: Path,
) -> None:
    """A relay (as ``voxmeter relay`` builds it) in front of a real speech-to-text service, and
    a proxy source subscribed over the channel: the transcript comes back, the frames are the
    audio sent; with the subscriber gone, the next command is relayed all the same and its
    seconds arrive as dropped once a subscriber is back."""
    audio = speech("turn on the kitchen lights please", pad_seconds=0.6)
    samples = 40 * SAMPLES_PER_CHUNK
    events = conversation(audio[:samples], Transcribe(language="en").event())

    async def main() -> None:
        upstream, port = await serve("asr")
        async with channel(tmp_path) as server:
            endpoint = ProxyEndpoint("127.0.0.1", 0, "127.0.0.1", port)
            relay = ProxyServer(endpoint, server.tap(str(endpoint)))
            async with relay.serving():
                source = WyomingProxySource(endpoint, channel=server.path)
                frames: list[AudioFrame] = []

                async def measure() -> None:
                    async for frame in source.frames():
                        frames.append(frame)

                measuring = asyncio.get_running_loop().create_task(measure())
                await until(lambda: str(endpoint) in server.subscribers)
                (first,) = await talk(relay.port, events)
                await until(lambda: sum(f.samples.shape[0] for f in frames) >= samples)
                measuring.cancel()  # the measuring side is gone
                with contextlib.suppress(asyncio.CancelledError):
                    await measuring
                (second,) = await talk(relay.port, events)  # relayed all the same
                assert first == second and first.type == "transcript"
                gone = server.unmeasured[str(endpoint)]
                assert gone == pytest.approx(samples / 16000)
                again = WyomingProxySource(endpoint, channel=server.path)

                async def first_frame() -> None:
                    await anext(aiter(again.frames()))  # subscribes; no audio comes

                measuring = asyncio.get_running_loop().create_task(first_frame())
                await until(lambda: again.stats.dropped_seconds > 0)
                assert again.stats.dropped_seconds == pytest.approx(gone)
                measuring.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await measuring
        await upstream.stop()
        measured = np.concatenate([f.samples for f in frames])
        np.testing.assert_array_equal(measured, audio[:samples])
        assert [f.utterance_end for f in frames].count(True) == 1

    asyncio.run(main())


def test_the_measuring_side_tells_the_relay_and_a_new_relay_hears_the_latest_again(
    tmp_path: Path,
) -> None:
    """Two-way: what the measuring side publishes on a source's uplink reaches the relay's
    ``on_message`` for that source (published before the subscription: sent at it); a relay
    started again hears the latest message of each kind again, without a new publish."""
    heard: list[tuple[str, dict[str, object]]] = []
    other = "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:2"

    async def main() -> None:
        uplink = Uplink()
        uplink.publish({"kind": "protect", "protect": False})
        for run in (1, 2):  # the relay, then the relay started again on the same path
            async with channel(tmp_path) as server:
                server.tap(SOURCE), server.tap(other)
                server.on_message = lambda source, header: heard.append((source, header))
                task = asyncio.create_task(
                    receive(server.path, SOURCE, RecordingTap(), lambda s: None, uplink=uplink)
                )
                if run == 1:
                    await until(lambda: len(heard) == 1)
                    uplink.publish({"kind": "protect", "protect": True})
                    uplink.publish({"kind": "later", "n": 1})
                    await until(lambda: len(heard) == 3)
                else:
                    await until(lambda: len(heard) == 5)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    asyncio.run(main())
    assert [source for source, _ in heard] == [SOURCE] * 5  # never the other source's
    assert [h for _, h in heard] == [
        {"kind": "protect", "protect": False},
        {"kind": "protect", "protect": True},
        {"kind": "later", "n": 1},
        {"kind": "protect", "protect": True},  # the latest of each kind, to the new relay
        {"kind": "later", "n": 1},
    ]
