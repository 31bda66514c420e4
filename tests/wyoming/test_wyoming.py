"""The Wyoming source: PCM of every width, format changes, specs, and real Wyoming peers from the
``wyoming`` package streaming corpus speech, sample for sample what the file source gives."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.event import Event
from wyoming.info import Describe, Info

from monitor.audio.file import FileSource, read_audio
from monitor.audio.frames import AudioFrame, SourceStats
from monitor.errors import AudioDeviceError, ConfigError, InputError
from monitor.settings.config import load_config
from monitor.sources.spec import open_source
from monitor.wyoming.source import (
    WyomingDecoder,
    WyomingEndpoint,
    WyomingSource,
    decode_frames,
    parse_endpoint,
    pcm_to_float,
)
from monitor.wyoming.wire import MAX_PAYLOAD_BYTES, ProtocolError, read_event
from tests.realparts.mosquitto import free_port
from tests.wyoming.wyoming_peers import microphone_service, stream_to, wav_events


def test_pcm_of_every_width_matches_a_slow_reference(rng: np.random.Generator) -> None:
    for width in (1, 2, 3, 4):
        bits = 8 * width
        values = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), size=(50, 2))
        raw = b"".join(int(v).to_bytes(width, "little", signed=True) for v in values.ravel())
        got = pcm_to_float(raw + b"\x01", width=width, channels=2)  # a stray byte is cut
        assert got.shape == (50, 2) and got.dtype == np.float32
        np.testing.assert_allclose(got, values / 2.0 ** (bits - 1), rtol=1e-6)
    with pytest.raises(ValueError, match="width 5"):
        pcm_to_float(b"", width=5, channels=1)


def chunk(samples: np.ndarray, rate: int, channels: int = 1) -> AudioChunk:
    return AudioChunk(rate=rate, width=2, channels=channels, audio=samples.astype("<i2").tobytes())


def test_decoder_resamples_downmixes_and_restarts_on_a_format_change() -> None:
    t = np.arange(48000) / 48000
    left = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    stereo = np.stack([left, left // 2], axis=1)
    decoder = WyomingDecoder()
    out = [decoder.process(AudioStart(rate=48000, width=2, channels=2).event())]
    for start in range(0, 48000, 1000):
        out.append(decoder.process(chunk(stereo[start : start + 1000], 48000, 2).event()))
    out.append(decoder.process(chunk(left[:16000], 16000).event()))  # new format: old one drained
    out.append(decoder.process(AudioStop().event()))
    samples = np.concatenate(out)
    assert samples.dtype == np.int16 and samples.shape == (16000 + 16000,)
    mono = (stereo.astype(np.float32) / 32768).mean(axis=1)
    expected = soxr.resample(mono, 48000, 16000, quality="HQ")
    np.testing.assert_allclose(samples[:16000] / 32768, expected, atol=2 / 32768)
    np.testing.assert_array_equal(samples[16000:], left[:16000])
    with pytest.raises(ValueError, match="sample rate 100"):
        decoder.process(chunk(left[:10], 100).event())


def test_specs_parse_and_errors_name_the_source() -> None:
    assert parse_endpoint("wyoming://10.0.0.5:10600") == WyomingEndpoint(
        "10.0.0.5", 10600, listen=False, once=False
    )
    assert parse_endpoint("wyoming-listen://0.0.0.0:10700?once") == WyomingEndpoint(
        "0.0.0.0", 10700, listen=True, once=True
    )
    assert isinstance(open_source("wyoming://127.0.0.1:10600"), WyomingSource)
    for bad in ("wyoming://host", "wyoming://:1", "wyoming://h:99999", "wyoming://h:1/x?y"):
        with pytest.raises(InputError, match="bad Wyoming source"):
            parse_endpoint(bad)
    with pytest.raises(ConfigError, match=r"daemon\.source.*wyoming://HOST:PORT"):
        load_config(None, ["daemon.source=wyoming://nowhere"])
    assert load_config(None, ["daemon.source=wyoming-listen://127.0.0.1:1?once"])


def test_a_missing_service_is_one_error_unless_told_to_wait() -> None:
    source = WyomingSource(parse_endpoint(f"wyoming://127.0.0.1:{free_port()}"))

    async def first() -> None:
        async for _ in source.frames():
            pass

    with pytest.raises(AudioDeviceError, match=r"wyoming://127\.0\.0\.1:\d+: cannot connect"):
        asyncio.run(first())


# ------------------------------------------------------------------------ real Wyoming peers
@pytest.fixture
def variants(corpus_root: Path, tmp_path: Path) -> dict[str, Path]:
    """One corpus utterance as 16 kHz mono and 44.1 kHz stereo 16-bit WAVs (temporary)."""
    flac = sorted(next(p for p in sorted(corpus_root.iterdir()) if p.is_dir()).glob("*.flac"))[0]
    mono, _ = read_audio(flac)
    wide = soxr.resample(mono, 16000, 44100, quality="HQ")
    stereo = np.stack([wide, 0.6 * wide + 0.01 * np.sin(np.arange(wide.shape[0]) / 7)], axis=1)
    paths = {"16k-mono": tmp_path / "mono.wav", "44k1-stereo": tmp_path / "stereo.wav"}
    sf.write(paths["16k-mono"], mono, 16000, subtype="PCM_16")
    sf.write(paths["44k1-stereo"], np.clip(stereo, -1, 1), 44100, subtype="PCM_16")
    return paths


async def collect(source: FileSource | WyomingSource) -> tuple[np.ndarray, np.ndarray]:
    frames = [frame async for frame in source.frames()]
    return np.concatenate([f.samples for f in frames]), np.array([f.start_seconds for f in frames])


def file_frames(path: Path) -> tuple[np.ndarray, np.ndarray]:
    return asyncio.run(collect(FileSource(path, realtime=False)))


@pytest.mark.corpus
@pytest.mark.parametrize("variant", ["16k-mono", "44k1-stereo"])
def test_a_wyoming_client_streaming_to_us_gives_the_file_sources_samples(
    variants: dict[str, Path], variant: str
) -> None:
    path = variants[variant]
    port = free_port()
    source = WyomingSource(parse_endpoint(f"wyoming-listen://127.0.0.1:{port}?once"))

    async def scenario() -> tuple[np.ndarray, np.ndarray]:
        received, _ = await asyncio.gather(collect(source), stream_to("127.0.0.1", port, path))
        return received

    samples, starts = asyncio.run(asyncio.wait_for(scenario(), 60))
    expected, expected_starts = file_frames(path)
    np.testing.assert_array_equal(samples, expected)
    np.testing.assert_allclose(starts, expected_starts, atol=1e-9)
    assert source.stats.dropped_seconds == 0


@pytest.mark.corpus
@pytest.mark.parametrize("variant", ["16k-mono", "44k1-stereo"])
def test_a_wyoming_microphone_service_gives_the_file_sources_samples(
    variants: dict[str, Path], variant: str
) -> None:
    path = variants[variant]

    async def scenario() -> tuple[np.ndarray, np.ndarray]:
        async with microphone_service(path) as port:
            return await collect(WyomingSource(parse_endpoint(f"wyoming://127.0.0.1:{port}?once")))

    samples, _ = asyncio.run(asyncio.wait_for(scenario(), 60))
    np.testing.assert_array_equal(samples, file_frames(path)[0])


@pytest.mark.corpus
def test_a_second_client_during_a_session_is_dropped_and_a_lost_service_retried(
    variants: dict[str, Path],
) -> None:
    path = variants["16k-mono"]
    port = free_port()
    source = WyomingSource(parse_endpoint(f"wyoming-listen://127.0.0.1:{port}"))

    measuring = asyncio.Event()  # the first client's audio is arriving: its session is open

    async def listen() -> np.ndarray:
        got = []
        async for frame in source.frames():
            # sessions follow one another without a gap: nothing was lost between them
            assert frame.start_seconds == pytest.approx(sum(g.shape[0] for g in got) / 16000)
            got.append(frame.samples)
            measuring.set()
            if sum(g.shape[0] for g in got) >= 2 * expected.shape[0]:
                source.close()
                break
        return np.concatenate(got)

    expected = file_frames(path)[0]

    async def held_stream(done: asyncio.Event) -> None:
        """The first client: half its file, then its session held open until ``done``."""
        events = wav_events(path)
        for _ in range(300):  # until the listener is up, as stream_to does
            try:
                client = AsyncTcpClient("127.0.0.1", port)
                await client.connect()
                break
            except OSError:
                await asyncio.sleep(0.1)
        try:
            for event in events[: len(events) // 2]:
                await client.write_event(event)
            await done.wait()
            for event in events[len(events) // 2 :]:
                await client.write_event(event)
        finally:
            await client.disconnect()

    async def scenario() -> np.ndarray:
        task = asyncio.create_task(listen())
        # two clients at once, for certain (before, on a loaded machine, the first could finish
        # before the second connected): the second streams all of its file inside the first's
        # session, and its chunks are dropped
        done = asyncio.Event()
        first = asyncio.create_task(held_stream(done))
        await asyncio.wait_for(measuring.wait(), 30)
        await stream_to("127.0.0.1", port, path)
        done.set()
        await first
        await stream_to("127.0.0.1", port, path)  # a later session is taken again
        return await task

    samples = asyncio.run(asyncio.wait_for(scenario(), 60))
    np.testing.assert_array_equal(samples[: expected.shape[0]], expected)
    np.testing.assert_array_equal(samples[expected.shape[0] :], expected)
    assert source.stats.dropped_seconds > 0

    # wyoming:// reconnects after the service hung up (each connection streams the file again)
    async def twice() -> int:
        async with microphone_service(path) as service:
            client = WyomingSource(
                parse_endpoint(f"wyoming://127.0.0.1:{service}"), backoff_initial_seconds=0.05
            )
            total = 0
            async for frame in client.frames():
                total += frame.samples.shape[0]
                if total >= 2 * expected.shape[0]:
                    client.close()
                    break
            assert client.stats.device_errors >= 1
            return total

    assert asyncio.run(asyncio.wait_for(twice(), 60)) == 2 * expected.shape[0]


def test_the_listener_answers_describe_truthfully() -> None:
    port = free_port()
    source = WyomingSource(parse_endpoint(f"wyoming-listen://127.0.0.1:{port}"))

    async def scenario() -> bool:
        frames = source.frames()
        listening = asyncio.create_task(anext(frames, None))
        for _ in range(100):
            try:
                async with AsyncTcpClient("127.0.0.1", port) as client:
                    await client.write_event(Describe().event())
                    reply = await client.read_event()
                    break
            except OSError:
                await asyncio.sleep(0.05)
        source.close()
        await listening
        await frames.aclose()
        assert reply is not None and Info.is_type(reply.type)
        return Info.from_event(reply)

    info = asyncio.run(asyncio.wait_for(scenario(), 30))
    # truthful, never empty: a sound sink (what it takes), named voxmeter, and no service that
    # Home Assistant would add (it would wait for a transcript or a detection that never comes)
    (sink,) = info.snd
    assert sink.name == "voxmeter" and sink.installed and "measures" in (sink.description or "")
    assert (sink.snd_format.rate, sink.snd_format.width, sink.snd_format.channels) == (16000, 2, 1)
    assert not (info.asr or info.tts or info.wake or info.handle or info.intent or info.satellite)


# ---- hostile peers: the source drops what is broken and goes on -------------------------------

FMT16 = {"rate": 16000, "width": 2, "channels": 1}


def raw_event(kind: str, data: dict | None = None, payload: bytes = b"") -> bytes:
    """One event on the wire, written by hand so that it can be broken on purpose."""
    header: dict[str, object] = {"type": kind, "version": "1.5.0"}
    body = json.dumps(data).encode() if data else b""
    if body:
        header["data_length"] = len(body)
    if payload:
        header["payload_length"] = len(payload)
    return json.dumps(header).encode() + b"\n" + body + payload


def good_session(samples: np.ndarray) -> list[bytes]:
    pcm = samples.astype("<i2").tobytes()
    return [
        raw_event("audio-start", FMT16),
        raw_event("audio-chunk", FMT16, pcm),
        raw_event("audio-stop"),
    ]


BROKEN_SESSIONS = {
    "chunk without a rate": [raw_event("audio-chunk", {"width": 2, "channels": 1}, b"\1\0" * 320)],
    "rate that is not a number": [raw_event("audio-chunk", {**FMT16, "rate": "fast"}, b"\1\0" * 8)],
    "fractional width": [raw_event("audio-chunk", {**FMT16, "width": 1.5}, b"\1\0" * 8)],
    "event without a type": [b'{"version": "1.5.0"}\n'],
    "header that is not JSON": [b"GET / HTTP/1.1\r\n\r\n"],
    "data that is not an object": [b'{"type": "audio-chunk", "data": [16000, 2, 1]}\n'],
    "payload of 10 GB announced": [
        b'{"type": "audio-chunk", "payload_length": 10000000000}\n' + b"\0" * 65536
    ],
    "cut in the middle of a chunk": [
        raw_event("audio-start", FMT16),
        raw_event("audio-chunk", FMT16, b"\1\0" * 1600)[:-100],
    ],
}


BAD_CHUNK_SECONDS = 640 / 32000 + 16 / 32000 + 16 / 16000  # no rate; rate "fast"; width 1.5 → 1


def test_hostile_clients_are_dropped_and_the_listener_goes_on() -> None:
    """Chunks without a rate, events without a type, a client cut off mid-chunk: each is one
    warning, and the next client's audio arrives whole (the source used to die on KeyError)."""
    port = free_port()
    source = WyomingSource(parse_endpoint(f"wyoming-listen://127.0.0.1:{port}"))
    speech = (np.sin(np.arange(8000) * 0.05) * 8000).astype(np.int16)

    async def send(messages: list[bytes]) -> None:
        """One client's session, returning once the listener hung up: it is done with it."""
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("the listener never came up")
        writer.writelines(messages)
        with contextlib.suppress(OSError):  # a refused event makes the listener hang up on us
            await writer.drain()
            writer.write_eof()
            await reader.read()  # until its end: the listener closes after the client left
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()

    async def scenario() -> np.ndarray:
        frames = source.frames()
        first = asyncio.create_task(anext(frames))
        for messages in BROKEN_SESSIONS.values():
            await send(messages)  # one after the other: none of them is a second client
        while source.stats.dropped_seconds < BAD_CHUNK_SECONDS - 1e-9:  # the three bad chunks
            assert not first.done()
            await asyncio.sleep(0.01)
        assert not first.done()  # nothing broken became audio
        await send(good_session(speech))
        got = [(await first).samples]
        while sum(g.shape[0] for g in got) < speech.shape[0]:
            got.append((await anext(frames)).samples)
        source.close()
        await frames.aclose()
        return np.concatenate(got)

    samples = asyncio.run(asyncio.wait_for(scenario(), 30))
    np.testing.assert_array_equal(samples, speech)  # 16 kHz mono in, the same samples out
    # the three chunks with a bad format, in seconds (unusable fields: as 16 kHz 16-bit mono)
    assert source.stats.dropped_seconds == pytest.approx(BAD_CHUNK_SECONDS)


def test_a_microphone_service_that_breaks_or_restarts_is_read_again() -> None:
    """wyoming://: a service that cuts a chunk short, sends an event without a type, is then
    killed and comes back on the same port: the source reconnects each time and reads the
    good session (it used to die on IncompleteReadError)."""
    port = free_port()
    speech = (np.sin(np.arange(4800) * 0.03) * 6000).astype(np.int16)
    plan = [
        BROKEN_SESSIONS["cut in the middle of a chunk"],
        BROKEN_SESSIONS["event without a type"],
    ]

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.writelines(plan.pop(0) if plan else good_session(speech))
        await writer.drain()
        writer.close()

    async def scenario() -> tuple[np.ndarray, WyomingSource]:
        server = await asyncio.start_server(serve, "127.0.0.1", port)
        source = WyomingSource(
            parse_endpoint(f"wyoming://127.0.0.1:{port}"),
            backoff_initial_seconds=0.3,
            backoff_max_seconds=0.3,
        )
        got: list[np.ndarray] = []
        async for frame in source.frames():
            got.append(frame.samples)
            if not plan and server.is_serving():  # killed after the broken sessions
                server.close()
                await server.wait_closed()
                await asyncio.sleep(0.5)  # refused meanwhile: retried, not fatal
                server = await asyncio.start_server(serve, "127.0.0.1", port)
            if sum(g.shape[0] for g in got) >= speech.shape[0]:
                source.close()
                break
        server.close()
        return np.concatenate(got), source

    samples, source = asyncio.run(asyncio.wait_for(scenario(), 30))
    np.testing.assert_array_equal(samples[: speech.shape[0]], speech)
    assert source.stats.device_errors >= 2


@pytest.mark.parametrize(
    ("wire", "problem"),
    [
        (b"not json\n", "not JSON"),
        (b'{"data": {}}\n', "without a type"),
        (b'{"type": "x", "data": "rate=16000"}\n', "not a JSON object"),
        (b'{"type": "x", "data_length": -4}\n', "data_length -4"),
        (b'{"type": "x", "payload_length": "4"}\n', "payload_length '4'"),
        (b'{"type": "x", "payload_length": %d}\n' % (MAX_PAYLOAD_BYTES + 1), "0..16777216"),
        (b'{"type": "x", "data_length": 2}\n\xc3(', "data is not JSON"),
    ],
)
def test_read_event_refuses_malformed_and_oversized_events(wire: bytes, problem: str) -> None:
    """Checked before anything is buffered: an announced 10 GB payload is refused at once."""

    async def read() -> object:
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        reader.feed_eof()
        return await read_event(reader)

    with pytest.raises(ProtocolError, match=problem):
        asyncio.run(read())


def test_read_event_reads_what_the_package_writes() -> None:
    """The same events as the package's reader: data merged, payload whole, end of stream None."""
    chunk = AudioChunk(rate=22050, width=3, channels=2, audio=bytes(range(12)), timestamp=7)

    async def roundtrip() -> list[object]:
        reader = asyncio.StreamReader()
        for event in (AudioStart(rate=22050, width=3, channels=2).event(), chunk.event()):
            reader.feed_data(raw_event(event.type, event.data, event.payload or b""))
        reader.feed_eof()
        return [await read_event(reader) for _ in range(3)]

    start, got, end = asyncio.run(roundtrip())
    assert AudioStart.from_event(start) == AudioStart(rate=22050, width=3, channels=2)  # type: ignore[arg-type]
    assert AudioChunk.from_event(got) == chunk  # type: ignore[arg-type]
    assert end is None


def test_a_client_silent_mid_session_is_taken_over() -> None:
    """A satellite that lost power mid-session leaves a half-open connection: after
    ``owner_idle_seconds`` without an event the next client streams (its audio was all
    dropped before); the silent one's later chunks are dropped."""
    port = free_port()
    now = [0.0]  # the source's clock: the test moves it past the idle time, no sleep
    source = WyomingSource(
        parse_endpoint(f"wyoming-listen://127.0.0.1:{port}"),
        owner_idle_seconds=0.3,
        clock=lambda: now[0],
    )
    first = (np.sin(np.arange(3200) * 0.05) * 8000).astype(np.int16)
    second = (np.sin(np.arange(4800) * 0.02) * 5000).astype(np.int16)

    async def connect() -> asyncio.StreamWriter:
        for _ in range(100):
            try:
                return (await asyncio.open_connection("127.0.0.1", port))[1]
            except OSError:
                await asyncio.sleep(0.05)
        raise AssertionError("the listener never came up")

    async def scenario() -> np.ndarray:
        frames = source.frames()
        taking = asyncio.create_task(anext(frames))
        stalled = await connect()
        stalled.writelines(good_session(first)[:2])  # audio-start, one chunk, then silence
        await stalled.drain()
        got = [(await taking).samples]  # its chunk is in: the owner was last seen now
        now[0] += 0.6  # silent for longer than owner_idle_seconds
        late = await connect()
        late.writelines(good_session(second))
        await late.drain()
        while sum(g.shape[0] for g in got) < first.shape[0] + second.shape[0]:
            got.append((await anext(frames)).samples)
        stalled.write(raw_event("audio-chunk", FMT16, first.astype("<i2").tobytes()))
        await stalled.drain()
        while source.stats.dropped_seconds <= 0:  # the stalled client's late chunk: counted
            await asyncio.sleep(0.01)
        source.close()
        got += [frame.samples async for frame in frames]
        for writer in (stalled, late):
            writer.close()
        return np.concatenate(got)

    samples = asyncio.run(asyncio.wait_for(scenario(), 30))
    np.testing.assert_array_equal(samples, np.concatenate([first, second]))
    # the silent client's chunk after the take-over, in seconds
    assert source.stats.dropped_seconds == pytest.approx(first.shape[0] / 16000)


def test_a_microphone_service_gone_silent_is_reconnected() -> None:
    """wyoming://: a service whose host lost power leaves a connection that never closes; after
    ``idle_seconds`` without an event the source reconnects (it used to wait for ever)."""
    port = free_port()
    speech = (np.sin(np.arange(3200) * 0.04) * 7000).astype(np.int16)
    connections: list[asyncio.StreamWriter] = []

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        session = good_session(speech)
        writer.writelines(session[:2] if len(connections) == 1 else session)  # then silence
        await writer.drain()

    async def scenario() -> tuple[np.ndarray, WyomingSource]:
        server = await asyncio.start_server(serve, "127.0.0.1", port)
        source = WyomingSource(
            parse_endpoint(f"wyoming://127.0.0.1:{port}"),
            idle_seconds=0.3,
            backoff_initial_seconds=0.05,
            backoff_max_seconds=0.05,
        )
        got: list[np.ndarray] = []
        async for frame in source.frames():
            got.append(frame.samples)
            if sum(g.shape[0] for g in got) >= 2 * speech.shape[0]:
                source.close()
                break
        for writer in connections:
            writer.close()
        server.close()
        return np.concatenate(got), source

    samples, source = asyncio.run(asyncio.wait_for(scenario(), 30))
    np.testing.assert_array_equal(samples, np.concatenate([speech, speech]))
    assert len(connections) == 2 and source.stats.device_errors == 1


def test_with_turns_each_audio_stop_marks_the_last_frame_of_its_utterance() -> None:
    fmt = {"rate": 16000, "width": 2, "channels": 1}

    def utterance(samples: int) -> list[Event]:
        pcm = np.ones(samples, dtype="<i2").tobytes()
        return [
            AudioStart(**fmt).event(),
            AudioChunk(audio=pcm, **fmt).event(),
            AudioStop().event(),
        ]

    async def events() -> AsyncIterator[Event | None]:
        for event in [*utterance(1000), *utterance(960), None]:  # 960: frames end exactly
            yield event

    async def collect(turns: bool) -> list[AudioFrame]:
        stats = SourceStats()
        return [f async for f in decode_frames(events(), 30, stats, "test", turns=turns)]

    plain = asyncio.run(collect(False))
    assert not any(f.utterance_end for f in plain)
    marked = asyncio.run(collect(True))
    ends = [i for i, f in enumerate(marked) if f.utterance_end]
    lengths = [f.samples.shape[0] for f in marked]
    assert lengths == [480, 480, 40, 480, 480, 0]  # an empty frame carries a bare mark
    assert ends == [2, 5]  # each audio-stop once (the connection's end adds none)
    assert [f.start_seconds for f in marked] == [0, 0.03, 0.06, 0.0625, 0.0925, 0.1225]
