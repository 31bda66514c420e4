"""The Wyoming proxy between real clients (the ``wyoming`` package's) and real offline upstreams
(pocketsphinx speech-to-text, openWakeWord wake words: tests/realparts/wyoming_upstreams.py),
each conversation run once directly and once through the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.wake import Detect

from monitor.audio.frames import RATE_HZ, AudioFrame
from monitor.errors import InputError
from monitor.sources.spec import parse_source
from monitor.wyoming.proxy import (
    VIA,
    ProxyEndpoint,
    SideTap,
    TapItem,
    WyomingProxySource,
    annotate_info,
    parse_proxy,
)
from tests.realparts.mosquitto import free_port
from tests.realparts.wyoming_upstreams import serve, speech
from tests.wyoming.wyoming_peers import SAMPLES_PER_CHUNK as CHUNK_SAMPLES
from tests.wyoming.wyoming_peers import conversation, talk


def proxy_to(port: int, **options: Any) -> WyomingProxySource:
    endpoint = ProxyEndpoint("127.0.0.1", 0, "127.0.0.1", port)
    return WyomingProxySource(endpoint, **options)


@contextlib.asynccontextmanager
async def upstream(kind: str, records: list[bytearray] | None = None) -> AsyncIterator[int]:
    server, port = await serve(kind, records=records)
    try:
        yield port
    finally:
        await server.stop()


def frames_of(source: WyomingProxySource) -> tuple[list[AudioFrame], asyncio.Task[None]]:
    """A measuring side that collects the source's frames as the daemon's source stage would."""
    frames: list[AudioFrame] = []

    async def collect() -> None:
        async for frame in source.frames():
            frames.append(frame)

    return frames, asyncio.get_running_loop().create_task(collect())


# ---- spec and info ------------------------------------------------------------------------


def test_spec_parses_in_the_one_source_parser_and_errors_name_the_source() -> None:
    spec = "wyoming-proxy://0.0.0.0:10300?upstream=tcp://whisper.local:10301"
    assert parse_source(spec).kind == "wyoming-proxy"
    assert parse_proxy(spec) == ProxyEndpoint("0.0.0.0", 10300, "whisper.local", 10301)
    assert str(parse_proxy(spec)) == spec
    for bad in (
        "wyoming-proxy://0.0.0.0:10300",
        "wyoming-proxy://0.0.0.0:10300?upstream=udp://h:1",
        "wyoming-proxy://0.0.0.0:10300?upstream=tcp://h",
        "wyoming-proxy://0.0.0.0?upstream=tcp://h:1",
        "wyoming-proxy://0.0.0.0:1?upstream=tcp://h:1&upstream=tcp://h:2",
        "wyoming-proxy://0.0.0.0:1?upstream=tcp://h:1&once",
        "wyoming-proxy://0.0.0.0:99999?upstream=tcp://h:1",
    ):
        with pytest.raises(InputError) as caught:
            parse_source(bad)
        assert caught.value.problem.startswith(f"bad Wyoming proxy source {bad!r}")


def test_info_names_every_program_as_passing_through_voxmeter_and_keeps_the_rest() -> None:
    def artifact(name: str, **more: Any) -> dict[str, Any]:
        credit = {"name": "someone", "url": "https://example.org"}
        return {"name": name, "attribution": credit, "installed": True, "version": "1", **more}

    upstream_info = Event(
        "info",
        {
            "asr": [
                artifact(
                    "faster-whisper",
                    models=[artifact("tiny-int8", languages=["en", "de"])],
                    a_future_field=[1, 2],
                )
            ],
            "wake": [artifact("openwakeword", models=[artifact("ok_nabu", languages=["en"])])],
        },
    )
    info = Info.from_event(annotate_info(upstream_info))
    assert [p.name for p in info.asr] == [f"faster-whisper{VIA}"]
    assert [p.name for p in info.wake] == [f"openwakeword{VIA}"]
    assert info.asr[0].models[0].name == "tiny-int8"  # clients send model names back
    assert info.asr[0].models[0].languages == ["en", "de"]
    assert "voxmeter" in (info.asr[0].description or "")
    assert "voxmeter" in (info.asr[0].models[0].description or "")
    assert annotate_info(upstream_info).data["asr"][0]["a_future_field"] == [1, 2]
    assert upstream_info.data["asr"][0]["name"] == "faster-whisper"  # the original is untouched


def _drain(queue: asyncio.Queue[TapItem | None]) -> list[tuple[int, str | None, bool]]:
    items = []
    while not queue.empty():
        item = queue.get_nowait()
        assert item is not None
        items.append((item.connection, None if item.event is None else item.event.type, item.gap))
    return items


def test_the_side_tap_measures_every_connection_and_counts_only_what_does_not_fit() -> None:
    tap = SideTap(4)
    start = AudioStart(rate=16000, width=2, channels=1).event()
    chunk = AudioChunk(rate=16000, width=2, channels=1, audio=b"\0\0" * 4800).event()  # 0.3 s
    stop = AudioStop().event()
    a, b = object(), object()
    for who, event in [(a, start), (b, start), (a, chunk), (b, chunk)]:
        tap.offer(who, event)
    tap.offer(a, Transcribe().event())  # not audio: not measured, not counted
    assert _drain(tap.queue) == [
        (1, "audio-start", False),
        (2, "audio-start", False),
        (1, "audio-chunk", False),
        (2, "audio-chunk", False),
    ]  # overlapping utterances of two clients: both measured
    assert tap.stats.dropped_seconds == 0
    for event in [chunk, chunk, chunk, chunk, chunk, stop]:  # 4 fit, not the rest
        tap.offer(a, event)
    tap.left(b)  # the queue is full: b's end is owed
    assert tap.stats.dropped_seconds == pytest.approx(0.3)
    assert _drain(tap.queue) == [(1, "audio-chunk", False)] * 4
    tap.offer(a, start)  # the owed end first; a's next item says audio was dropped before it
    assert _drain(tap.queue) == [(2, None, False), (1, "audio-start", True)]
    tap.left(a)
    tap.left(a)  # once only
    assert _drain(tap.queue) == [(1, None, False)]


def test_the_proxy_decodes_each_connection_on_its_own_timeline() -> None:
    """Frames of two interleaved connections: each stream keeps its own clock, a gap ends the
    turn before it, and a connection's end ends its stream."""
    fmt = {"rate": 16000, "width": 2, "channels": 1}
    chunk = AudioChunk(audio=np.ones(960, dtype="<i2").tobytes(), **fmt).event()  # 2 frames
    source = WyomingProxySource(parse_proxy("wyoming-proxy://127.0.0.1:0?upstream=tcp://h:1"))
    items = [
        TapItem(1, AudioStart(**fmt).event()),
        TapItem(2, AudioStart(**fmt).event()),
        TapItem(1, chunk),
        TapItem(2, chunk),
        TapItem(1, chunk, gap=True),
        TapItem(2, None),
        TapItem(1, AudioStop().event()),
    ]

    async def collect() -> list[AudioFrame]:
        for item in items:
            source.tap.queue.put_nowait(item)
        got = []
        async for frame in source.frames():
            got.append(frame)
            if frame.utterance_end and frame.stream.connection == 1 and len(got) > 5:
                source.close()
        return got

    frames = asyncio.run(asyncio.wait_for(collect(), 10))
    by_stream = {
        n: [(f.start_seconds, f.samples.shape[0], f.utterance_end, f.stream_end)
            for f in frames if f.stream.connection == n]
        for n in (1, 2)
    }  # fmt: skip
    assert by_stream[2] == [(0.0, 480, False, False), (0.03, 480, False, False),
                            (0.06, 0, True, False), (0.06, 0, False, True)]  # fmt: skip
    assert by_stream[1] == [(0.0, 480, False, False), (0.03, 480, False, False),
                            (0.06, 0, True, False),  # the gap ends the turn
                            (0.06, 480, False, False), (0.09, 480, False, False),
                            (0.12, 0, True, False)]  # fmt: skip


# ---- relay against a real speech-to-text service --------------------------------------------


@pytest.mark.slow
def test_a_60_event_conversation_reaches_the_upstream_byte_identical_and_is_measured() -> None:
    audio = speech("turn on the kitchen lights please", pad_seconds=0.6)
    events = conversation(audio[: 57 * CHUNK_SAMPLES], Transcribe(language="en").event())
    assert len(events) == 60

    async def main() -> None:
        records: list[bytearray] = []
        async with upstream("asr", records) as port:
            direct = await talk(port, events)
            source = proxy_to(port)
            frames, measuring = frames_of(source)
            while not source.port:  # serving
                await asyncio.sleep(0.01)
            proxied = await talk(source.port, events)
            await asyncio.sleep(0.2)  # the measuring side catches up
            source.close()
            await measuring
        assert len(records) == 2
        assert bytes(records[0]) == bytes(records[1])  # what the upstream received: the same
        assert proxied == direct
        assert direct[0].type == "transcript" and direct[0].data["text"]
        measured = np.concatenate([f.samples for f in frames])
        assert measured.shape[0] == 57 * CHUNK_SAMPLES  # 16 kHz in, no resampling loss
        np.testing.assert_array_equal(measured, audio[: 57 * CHUNK_SAMPLES])
        assert [f.utterance_end for f in frames].count(True) == 1
        assert frames[-2].utterance_end  # at the audio-stop, then the connection's end:
        assert frames[-1].stream_end and not frames[-1].samples.shape[0]
        assert {f.stream for f in frames} == {frames[0].stream}  # one connection, one stream
        assert source.dropped_seconds == 0.0

    asyncio.run(main())


@pytest.mark.slow
def test_describe_answers_with_the_upstreams_info_renamed() -> None:
    async def main() -> None:
        async with upstream("asr") as port:
            (direct,) = await talk(port, [Describe().event()])
            source = proxy_to(port)
            async with source.serving():
                (proxied,) = await talk(source.port, [Describe().event()])
        assert proxied == annotate_info(direct)
        info = Info.from_event(proxied)
        assert info.asr[0].name == f"pocketsphinx{VIA}"
        assert info.asr[0].installed and info.asr[0].models[0].installed
        assert info.asr[0].models[0].languages == ["en"]

    asyncio.run(main())


@pytest.mark.slow
def test_a_stalled_measuring_side_neither_delays_nor_changes_the_relay() -> None:
    audio = speech("what is the weather like tomorrow in the garden")
    events = conversation(audio, Transcribe().event())

    async def main() -> None:
        records: list[bytearray] = []
        async with upstream("asr", records) as port:
            direct = await talk(port, events)
            source = proxy_to(port, tap_events=8)
            stalled = asyncio.Event()

            async def blocked_extractor() -> None:
                async for _ in source.frames():
                    await stalled.wait()  # takes one frame, then never another

            measuring = asyncio.get_running_loop().create_task(blocked_extractor())
            while not source.port:  # serving
                await asyncio.sleep(0.01)
            proxied = await talk(source.port, events)  # completes while the side is stalled
            assert not stalled.is_set() and not measuring.done()
            measuring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await measuring
        assert bytes(records[0]) == bytes(records[1])
        assert proxied == direct and proxied[0].type == "transcript"
        chunks = [e for e in events if e.type == "audio-chunk"]
        total = sum(len(e.payload or b"") for e in chunks) / 2 / RATE_HZ
        assert source.dropped_seconds > total / 2  # most of it could not be measured: counted
        assert source.dropped_seconds < total

    asyncio.run(main())


# ---- an upstream that is down ----------------------------------------------------------------


@pytest.mark.slow
def test_a_down_upstream_gives_an_error_within_a_second_one_log_line_and_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nobody listens: connections are refused
    events = conversation(speech("hello"), Transcribe().event())

    async def main() -> None:
        source = proxy_to(port, backoff_initial_seconds=0.05, backoff_max_seconds=0.2)
        async with source.serving():
            for _ in range(3):
                async with asyncio.timeout(1.0):
                    replies = await talk(source.port, [Describe().event()], answers=2)
                assert [r.type for r in replies] == ["error"]  # then the connection ends
                assert "unavailable" in replies[0].data["text"]
                assert replies[0].data["code"] == "upstream-unavailable"
            server, _ = await serve("asr", port=port)
            try:
                for _ in range(100):  # the prober finds it back (capped backoff of 0.2 s)
                    if not source.upstream.down:
                        break
                    await asyncio.sleep(0.05)
                (reply,) = await talk(source.port, events)
                assert reply.type == "transcript"
            finally:
                await server.stop()
        assert source.stats.device_errors == 1

    with caplog.at_level(logging.INFO, logger="monitor.wyoming.relay"):
        asyncio.run(main())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "unreachable (Connection refused)" in warnings[0].getMessage()
    assert any("is back" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_an_upstream_that_hangs_up_mid_request_is_an_error_to_the_client() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # takes the first event, then closes
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        source = proxy_to(port)
        async with source.serving():
            replies = await talk(source.port, [Transcribe().event()], answers=2)
        server.close()
        assert [r.type for r in replies] == ["error"]
        assert "closed the connection" in replies[0].data["text"]

    asyncio.run(main())


# ---- a real wake-word service ----------------------------------------------------------------


@pytest.mark.slow
def test_wake_word_detections_are_relayed_as_the_service_sends_them() -> None:
    events = conversation(speech("hey jarvis", pad_seconds=1.0), Detect().event())
    others = conversation(speech("good morning everyone", pad_seconds=1.0), Detect().event())

    async def main() -> None:
        records: list[bytearray] = []
        async with upstream("wake", records) as port:
            direct = [await talk(port, e) for e in (events, others)]
            source = proxy_to(port)
            async with source.serving():
                proxied = [await talk(source.port, e) for e in (events, others)]
        assert proxied == direct
        assert [r.type for r in direct[0]] == ["detection"]
        assert direct[0][0].data["name"] == "hey_jarvis"
        assert [r.type for r in direct[1]] == ["not-detected"]
        assert bytes(records[0]) == bytes(records[2]) and bytes(records[1]) == bytes(records[3])

    asyncio.run(main())
