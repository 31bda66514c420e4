"""Sources: offline reading, file and stdin streaming, the microphone's queue and retries."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.audio.file import FileSource, read_audio
from monitor.audio.frames import RATE_HZ, AudioFrame, StreamKey
from monitor.audio.microphone import MicrophoneSource, SoundDeviceBackend
from monitor.audio.stdin import StdinSource
from monitor.errors import AudioDeviceError, ConfigError, InputError
from monitor.settings.config import load_config, source_specs
from monitor.sources.several import SourceSet
from monitor.sources.spec import (
    SourceSpec,
    open_source,
    open_sources,
    parse_source,
    parse_sources,
)


def tone(rate: int, seconds: float, hz: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(round(rate * seconds)) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.shape[0])))
    return float(np.fft.rfftfreq(x.shape[0], 1 / rate)[np.argmax(spectrum)])


async def collect(source: object) -> list[AudioFrame]:
    return [frame async for frame in source.frames()]  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ read_audio
def test_read_audio_converts_rate_and_channels(tmp_path: Path) -> None:
    left = tone(44100, 1.5, 440.0)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, np.zeros_like(left)], axis=1), 44100, subtype="PCM_16")
    audio, duration = read_audio(path)
    assert audio.dtype == np.float32
    assert duration == pytest.approx(1.5)
    assert audio.shape[0] == pytest.approx(1.5 * RATE_HZ, abs=2)
    assert peak_hz(audio, RATE_HZ) == pytest.approx(440.0, abs=1.0)
    # The two channels are averaged: half the amplitude of the left one.
    assert np.abs(audio[1000:-1000]).max() == pytest.approx(0.25, abs=0.01)


@pytest.mark.corpus
def test_read_audio_corpus_flac_is_exact(corpus_root: Path) -> None:
    path = next(iter(sorted(corpus_root.glob("*/*.flac"))))
    expected, rate = sf.read(path, dtype="float32")
    assert rate == RATE_HZ
    audio, duration = read_audio(path)
    np.testing.assert_array_equal(audio, expected)
    assert duration == pytest.approx(expected.shape[0] / RATE_HZ)


def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = tmp_path / "good.flac"
    sf.write(good, tone(16000, 2.0, 200.0), 16000, format="FLAC")
    blob = good.read_bytes()
    truncated = tmp_path / "truncated.flac"
    truncated.write_bytes(blob[: len(blob) // 2])
    header_only = tmp_path / "header.flac"
    header_only.write_bytes(blob[:30])
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio at all\n")
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    wav = tmp_path / "good.wav"
    sf.write(wav, tone(16000, 1.0, 200.0), 16000, subtype="PCM_16")
    cut_wav = tmp_path / "cut.wav"  # libsndfile would quietly read the first half
    cut_wav.write_bytes(wav.read_bytes()[: 44 + 16000])
    fifo = tmp_path / "pipe.wav"  # exists: "no such file" misled
    os.mkfifo(fifo)
    ogg = tmp_path / "good.ogg"
    sf.write(ogg, tone(16000, 6.0, 200.0), 16000, format="OGG")
    pages = _ogg_page_starts(ogg.read_bytes())
    assert len(pages) >= 3
    cut_ogg = tmp_path / "cut.ogg"  # libsndfile reads the pages left as a shorter, valid file
    cut_ogg.write_bytes(ogg.read_bytes()[: pages[-2] + 100])
    unfinished_ogg = tmp_path / "unfinished.ogg"  # whole pages, but the stream never ended
    unfinished_ogg.write_bytes(ogg.read_bytes()[: pages[-1]])
    return {
        "directory": (tmp_path, "is a directory"),
        "fifo": (fifo, "not a regular file"),
        "device": (Path("/dev/zero"), "not a regular file"),
        "truncated_wav": (cut_wav, "truncated: header declares 32000 bytes of audio, file holds"),
        "missing": (tmp_path / "missing.wav", "no such file"),
        "empty": (empty, "empty file"),
        "text": (text, "not readable as audio"),
        "header": (header_only, "not readable as audio"),
        "truncated": (truncated, "truncated: header says 32000 samples"),
        "truncated_ogg": (cut_ogg, "truncated: its last Ogg page is cut"),
        "unfinished_ogg": (unfinished_ogg, "truncated: the Ogg stream has no end-of-stream page"),
    }


def _ogg_page_starts(blob: bytes) -> list[int]:
    """Offsets of the Ogg pages of ``blob`` (a capture pattern can occur in packet data, so
    each page is found from the previous one's length)."""
    starts, at = [], 0
    while at < len(blob):
        assert blob[at : at + 4] == b"OggS"
        starts.append(at)
        segments = blob[at + 26]
        at += 27 + segments + sum(blob[at + 27 : at + 27 + segments])
    return starts


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "directory",
        "fifo",
        "device",
        "empty",
        "text",
        "header",
        "truncated",
        "truncated_wav",
        "truncated_ogg",
        "unfinished_ogg",
    ],
)
def test_read_audio_bad_files_name_file_and_problem(tmp_path: Path, case: str) -> None:
    path, problem = bad_files(tmp_path)[case]
    with pytest.raises(InputError) as info:
        read_audio(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert problem in message
    assert "\n" not in message


def test_read_audio_rejects_absurd_rate_and_nan(tmp_path: Path) -> None:
    slow = tmp_path / "slow.wav"
    sf.write(slow, tone(2000, 1.0, 100.0), 2000)
    with pytest.raises(InputError, match=r"slow.wav: unsupported sample rate 2000 Hz"):
        read_audio(slow)
    with pytest.raises(InputError, match="unsupported sample rate"):
        FileSource(slow)
    broken = tmp_path / "nan.wav"
    data = tone(16000, 0.5, 100.0)
    data[100] = np.nan
    sf.write(broken, data, 16000, subtype="FLOAT")
    with pytest.raises(InputError, match=r"nan.wav: audio contains NaN"):
        read_audio(broken)


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "directory",
        "empty",
        "text",
        "header",
        "truncated",
        "truncated_wav",
        "truncated_ogg",
        "unfinished_ogg",
    ],
)
def test_file_source_bad_files_fail_at_construction(tmp_path: Path, case: str) -> None:
    path, problem = bad_files(tmp_path)[case]
    with pytest.raises(InputError, match=problem):
        FileSource(path)


@pytest.mark.parametrize(("suffix", "options"), [(".ogg", {"format": "OGG"}), (".mp3", {})])
def test_lossy_formats_are_not_mistaken_for_truncated(
    tmp_path: Path, suffix: str, options: dict[str, str]
) -> None:
    path = tmp_path / f"tone{suffix}"
    sf.write(path, tone(16000, 1.0, 200.0), 16000, **options)
    audio, duration = read_audio(path)
    assert duration == pytest.approx(1.0, abs=0.05) and audio.shape[0] > 0


# ------------------------------------------------------------------------------ FileSource
def test_file_source_fast_matches_read_audio(tmp_path: Path, rng: np.random.Generator) -> None:
    data = (0.3 * rng.standard_normal((48000 * 2 + 123, 2))).clip(-1, 1).astype(np.float32)
    path = tmp_path / "noise.wav"
    sf.write(path, data, 48000, subtype="FLOAT")
    frames = asyncio.run(collect(FileSource(path, realtime=False, frame_ms=20)))
    streamed = np.concatenate([f.samples for f in frames]).astype(np.float32) / 32768
    offline, _ = read_audio(path)
    assert streamed.shape == offline.shape
    assert np.abs(streamed - offline).max() < 2e-3  # streaming vs one-shot HQ resampling
    starts = np.array([f.start_seconds for f in frames])
    ends = np.array([f.end_seconds for f in frames])
    np.testing.assert_allclose(starts[1:], ends[:-1])
    assert starts[0] == 0.0
    assert all(f.samples.dtype == np.int16 and f.rate_hz == RATE_HZ for f in frames)


class FakeClock:
    """Time that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def _paced(
    tmp_path: Path, seconds: float, frame_ms: int
) -> tuple[FileSource, FakeClock, list[tuple[float, float]]]:
    """A tone replayed in real time on a fake clock: (when it left, its start) per frame."""
    path = tmp_path / "tone.wav"
    sf.write(path, tone(16000, seconds, 300.0), 16000)
    clock = FakeClock()
    source = FileSource(path, realtime=True, frame_ms=frame_ms, clock=clock, sleep=clock.sleep)
    frames: list[tuple[float, float]] = []

    async def run() -> None:
        async for frame in source.frames():
            frames.append((clock.now - 100.0, frame.start_seconds))

    asyncio.run(run())
    return source, clock, frames


def test_file_source_realtime_paces_to_the_clock(tmp_path: Path) -> None:
    _, clock, frames = _paced(tmp_path, 1.0, 100)
    assert len(frames) == 10
    # Each frame leaves when the clock reaches its start time, never earlier.
    for now, start in frames:
        assert now == pytest.approx(start)
    assert sum(clock.sleeps) == pytest.approx(0.9)


def test_file_source_realtime_releases_frames_in_groups(tmp_path: Path) -> None:
    """30 ms frames paced in groups of 120 ms: one wake-up per four frames, each frame left
    no earlier than its start and at most three frames after it."""
    source, clock, frames = _paced(tmp_path, 1.2, 30)
    assert len(frames) == 40 and source.group_frames == 4
    assert len(clock.sleeps) == 10  # the first frame leaves at once, then one sleep per group
    for now, start in frames:
        assert start - 1e-9 <= now <= start + 0.09 + 1e-9


def test_file_source_close_stops_early(tmp_path: Path) -> None:
    path = tmp_path / "tone.wav"
    sf.write(path, tone(16000, 2.0, 300.0), 16000)
    source = FileSource(path, realtime=False)

    async def run() -> int:
        count = 0
        async for _ in source.frames():
            count += 1
            if count == 3:
                source.close()
        return count

    assert asyncio.run(run()) == 3


# ----------------------------------------------------------------------------- StdinSource
class DribblingStream:
    """A pipe that hands out a few bytes at a time (odd counts split samples across reads)."""

    def __init__(self, data: bytes, step: int = 7) -> None:
        self._data = io.BytesIO(data)
        self._step = step

    def read(self, n: int) -> bytes:
        return self._data.read(min(n, self._step))


@pytest.mark.parametrize(("rate", "channels"), [(16000, 1), (48000, 2), (8000, 1)])
def test_stdin_source_decodes_resamples_and_downmixes(rate: int, channels: int) -> None:
    signal = tone(rate, 0.5, 500.0, amplitude=0.4)
    pcm = np.repeat((signal * 32767).astype("<i2")[:, None], channels, axis=1)
    source = StdinSource(rate, DribblingStream(pcm.tobytes(), step=333), channels=channels)  # type: ignore[arg-type]
    frames = asyncio.run(collect(source))
    audio = np.concatenate([f.samples for f in frames]).astype(np.float32) / 32768
    assert audio.shape[0] == pytest.approx(0.5 * RATE_HZ, abs=2)
    assert peak_hz(audio, RATE_HZ) == pytest.approx(500.0, abs=2.5)
    assert np.abs(audio[800:-800]).max() == pytest.approx(0.4, abs=0.01)
    assert source.stats.frames_total == len(frames)


def test_stdin_source_exact_at_16k() -> None:
    pcm = np.arange(-5000, 5000, dtype="<i2")
    frames = asyncio.run(collect(StdinSource(16000, DribblingStream(pcm.tobytes()))))  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.concatenate([f.samples for f in frames]), pcm)


@pytest.mark.parametrize("rate", [0, -16000, 10, 10**9])
def test_stdin_source_rejects_absurd_rates(rate: int) -> None:
    with pytest.raises(InputError, match=rf"^stdin: unsupported sample rate {rate} Hz"):
        StdinSource(rate)


@pytest.mark.parametrize("channels", [0, 65])
def test_stdin_source_rejects_bad_channel_counts(channels: int) -> None:
    with pytest.raises(InputError, match="unsupported channel count"):
        StdinSource(16000, io.BytesIO(b""), channels=channels)


# ----------------------------------------------------------------------------- open_source
def test_open_source_spellings(tmp_path: Path) -> None:
    path = tmp_path / "a.wav"
    sf.write(path, tone(16000, 0.1, 300.0), 16000)
    mic = open_source("mic")
    assert isinstance(mic, MicrophoneSource) and mic.device is None
    assert open_source("mic:3").device == 3  # type: ignore[attr-defined]
    assert open_source("mic:pulse").device == "pulse"  # type: ignore[attr-defined]
    paced = open_source(f"file:{path}")
    fast = open_source(f"file:{path}?fast")
    assert isinstance(paced, FileSource) and paced.realtime and paced.path == str(path)
    assert isinstance(fast, FileSource) and not fast.realtime and fast.path == str(path)
    stdin = open_source("stdin:48000:2")
    assert isinstance(stdin, StdinSource) and (stdin.rate_hz, stdin.channels) == (48000, 2)
    assert open_source("stdin").rate_hz == RATE_HZ  # type: ignore[attr-defined]


def test_parse_source_is_the_one_parser() -> None:
    assert parse_source("mic") == SourceSpec("mic", "mic", name="mic")
    assert parse_source("mic:0").device == 0  # index 0 is a device, not the default
    assert parse_source("mic:pulse").device == "pulse"
    assert parse_source("file:a b.flac?fast") == SourceSpec(
        "file", "file:a b.flac?fast", path="a b.flac", fast=True, name="file"
    )
    assert (parse_source("stdin:8000:2").rate_hz, parse_source("stdin:8000:2").channels) == (
        8000,
        2,
    )
    assert parse_source("wyoming://127.0.0.1:10600?once").kind == "wyoming"
    with pytest.raises(InputError, match="Wyoming"):
        parse_source("wyoming://127.0.0.1")  # no port


def test_a_source_is_named_by_a_prefix_else_by_its_kind_and_port() -> None:
    proxy = "wyoming-proxy://0.0.0.0:10300?upstream=tcp://127.0.0.1:10301"
    named = parse_source(f"kitchen={proxy}")
    assert (named.name, named.text, named.kind, named.listen_port) == (
        "kitchen",
        proxy,
        "wyoming-proxy",
        10300,
    )
    assert parse_source(proxy).name == "wyoming-proxy-10300"  # the query's = is no name
    assert parse_source("file:a=b.wav").path == "a=b.wav"
    assert parse_source("child-room_2=mic:1").device == 1
    assert parse_source("wyoming-listen://127.0.0.1:0").name == "wyoming-listen-0"
    for bad in ("living room=mic", "-x=mic", f"{'a' * 65}=mic", "=mic"):
        with pytest.raises(InputError, match="bad source name"):
            parse_source(bad)
    with pytest.raises(InputError, match="unknown audio source"):
        parse_source("kitchen=")


@pytest.mark.parametrize(
    ("sources", "problem"),
    [
        (["kitchen=mic", "kitchen=file:a.wav"], "two sources are named 'kitchen'"),
        (["mic", "mic:1"], "two sources are named 'mic'"),
        (
            [
                "a=wyoming-proxy://0.0.0.0:10300?upstream=tcp://h:1",
                "b=wyoming-listen://127.0.0.1:10300",
            ],
            "port 10300 is served by two sources",
        ),
        (["a=stdin", "b=stdin:8000"], "stdin can feed one source only"),
        (["kitchen=speaker"], "unknown audio source"),
    ],
)
def test_several_sources_bad_input_is_one_line_naming_the_key(
    sources: list[str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=r"audio\.sources") as raised:
        load_config(None, [f"audio.sources={sources!r}".replace("'", '"')])
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_several_sources_load_and_port_zero_may_repeat() -> None:
    proxy = "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:9"
    config = load_config(None, [f'audio.sources=["wake={proxy}", "stt={proxy}", "file:x.wav"]'])
    assert [s.name for s in source_specs(config)] == ["wake", "stt", "file"]
    assert source_specs(load_config(None, ["daemon.source=hall=mic"]))[0].name == "hall"
    with pytest.raises(ConfigError, match=r"audio\.max_streams.*number of audio.sources \(3\)"):
        load_config(
            None,
            [f'audio.sources=["wake={proxy}", "stt={proxy}", "file:x.wav"]', "audio.max_streams=2"],
        )


def test_config_checks_a_source_with_the_same_parser() -> None:
    with pytest.raises(ConfigError, match=r"daemon\.source.*stream spec"):
        load_config(None, ["daemon.source=stdin:fast"])
    assert load_config(None, ["daemon.source=mic:0"]).daemon.source == "mic:0"


@pytest.mark.parametrize("spec", ["speaker", "file:", "stdin:fast", "stdin:1:2:3", "http://x"])
def test_open_source_unknown_spec(spec: str) -> None:
    with pytest.raises(InputError, match=r"source|stream spec"):
        open_source(spec)


def test_open_source_bad_stdin_rate_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unsupported sample rate 0"):
        open_source("stdin:0")
    with pytest.raises(InputError, match="no such file"):
        open_source(f"file:{tmp_path / 'nope.flac'}")


# ------------------------------------------------------------------------------ microphone
class FakeStream:
    """A capture stream fed by a real thread, as PortAudio's callback thread would."""

    def __init__(self, rate_hz: int, blocks: list[np.ndarray], callback: Callable, lose: bool):
        self.rate_hz = rate_hz
        self.closed = False
        self._alive = True
        self._thread = threading.Thread(target=self._run, args=(blocks, callback, lose))
        self._thread.start()

    def _run(self, blocks: list[np.ndarray], callback: Callable, lose: bool) -> None:
        for i, block in enumerate(blocks):
            if self.closed:
                return
            callback(block.copy(), i == 1)  # the second block reports a driver overflow
            time.sleep(0.001)
        if lose:
            self._alive = False

    def active(self) -> bool:
        return self._alive and not self.closed

    def close(self) -> None:
        self.closed = True
        self._thread.join()


class FakeBackend:
    """A device that is missing for ``missing`` opens, then streams ``blocks`` per open."""

    def __init__(self, blocks: list[np.ndarray], *, rate_hz: int, missing: int, lose: bool):
        self.blocks = blocks
        self.rate_hz = rate_hz
        self.missing = missing
        self.lose = lose
        self.opens = 0
        self.reinitialised = 0
        self.streams: list[FakeStream] = []

    def open(self, device: str | int | None, callback: Callable) -> FakeStream:
        self.opens += 1
        if self.opens <= self.missing:
            raise AudioDeviceError(f"audio device {device!r}: not found")
        stream = FakeStream(self.rate_hz, self.blocks, callback, self.lose)
        self.streams.append(stream)
        return stream

    def reinitialise(self) -> None:
        self.reinitialised += 1


def test_microphone_resamples_counts_and_retries_missing_device() -> None:
    signal = tone(48000, 0.6, 250.0, amplitude=0.3)
    blocks = np.split((signal * 32767).astype(np.int16)[:, None], 20)
    backend = FakeBackend(blocks, rate_hz=48000, missing=3, lose=False)
    clock = FakeClock()
    mic = MicrophoneSource(
        "kitchen", backend=backend, clock=clock, sleep=clock.sleep, backoff_max_seconds=1.0
    )

    async def run() -> list[AudioFrame]:
        got: list[AudioFrame] = []
        async for frame in mic.frames():
            got.append(frame)
            if sum(f.samples.shape[0] for f in got) >= 0.5 * RATE_HZ:
                mic.close()
        return got

    frames = asyncio.run(asyncio.wait_for(run(), 10))
    assert backend.opens == 4 and backend.reinitialised == 3
    assert mic.stats.device_errors == 3
    assert mic.stats.overflows == 1
    assert mic.stats.frames_total == len(frames)
    # Random capped backoff: doubling caps (0.5, 1, 1) with jitter in [cap/2, cap].
    retry_sleeps = clock.sleeps[:3]
    for delay, cap in zip(retry_sleeps, [0.5, 1.0, 1.0], strict=True):
        assert cap / 2 <= delay <= cap
    audio = np.concatenate([f.samples for f in frames]).astype(np.float32) / 32768
    assert peak_hz(audio, RATE_HZ) == pytest.approx(250.0, abs=3.0)
    assert backend.streams[-1].closed


def test_microphone_gives_up_after_max_retries() -> None:
    backend = FakeBackend([], rate_hz=16000, missing=10, lose=False)
    clock = FakeClock()
    mic = MicrophoneSource("ghost", backend=backend, clock=clock, sleep=clock.sleep, max_retries=2)
    with pytest.raises(AudioDeviceError, match="'ghost': not found"):
        asyncio.run(collect(mic))
    assert mic.stats.device_errors == 3


def test_microphone_missing_at_start_fails_at_once_unless_told_to_wait() -> None:
    backend = FakeBackend([], rate_hz=16000, missing=10, lose=False)
    clock = FakeClock()
    mic = MicrophoneSource(
        "typo", backend=backend, clock=clock, sleep=clock.sleep, wait_for_device=False
    )
    with pytest.raises(AudioDeviceError, match="'typo': not found"):
        asyncio.run(collect(mic))
    assert backend.opens == 1 and clock.sleeps == []


def test_microphone_lost_after_start_is_retried_even_without_waiting_at_start() -> None:
    blocks = [np.full((480, 1), i, dtype=np.int16) for i in range(5)]
    backend = FakeBackend(blocks, rate_hz=16000, missing=0, lose=True)
    clock = FakeClock()
    mic = MicrophoneSource(
        "usb", backend=backend, clock=clock, sleep=clock.sleep, wait_for_device=False
    )

    async def run() -> list[AudioFrame]:
        got: list[AudioFrame] = []
        async for frame in mic.frames():
            got.append(frame)
            if len(got) == 10:
                mic.close()
        return got

    frames = asyncio.run(asyncio.wait_for(run(), 10))
    assert backend.opens >= 2 and mic.stats.device_errors >= 1
    assert [int(f.samples[0]) for f in frames] == [0, 1, 2, 3, 4] * 2


def test_microphone_reopens_a_lost_stream() -> None:
    blocks = [np.full((480, 1), i, dtype=np.int16) for i in range(5)]
    backend = FakeBackend(blocks, rate_hz=16000, missing=0, lose=True)
    clock = FakeClock()
    mic = MicrophoneSource("usb", backend=backend, clock=clock, sleep=clock.sleep)

    async def run() -> list[AudioFrame]:
        got: list[AudioFrame] = []
        async for frame in mic.frames():
            got.append(frame)
            if len(got) == 15:
                mic.close()
        return got

    frames = asyncio.run(asyncio.wait_for(run(), 10))
    assert backend.opens >= 3
    assert mic.stats.device_errors >= 2
    values = [int(f.samples[0]) for f in frames]
    assert values == [0, 1, 2, 3, 4] * 3


def test_microphone_drops_oldest_when_consumer_lags() -> None:
    blocks = [np.full((160, 1), i, dtype=np.int16) for i in range(50)]
    backend = FakeBackend(blocks, rate_hz=16000, missing=0, lose=False)
    mic = MicrophoneSource("usb", backend=backend, queue_frames=8)

    async def run() -> list[AudioFrame]:
        frames = mic.frames()
        first = await anext(frames)
        await asyncio.to_thread(backend.streams[0]._thread.join)  # all blocks delivered
        while mic.stats.dropped_seconds < (len(blocks) - 1 - 8) * 0.01 - 1e-9:  # taken in
            await asyncio.sleep(0)
        rest = [await anext(frames) for _ in range(8)]
        mic.close()
        await frames.aclose()
        return [first, *rest]

    frames = asyncio.run(asyncio.wait_for(run(), 10))
    values = [int(f.samples[0]) for f in frames]
    assert values[1:] == list(range(42, 50))  # the newest 8 survive
    # every 10 ms block not yielded was dropped: counted in seconds
    assert mic.stats.dropped_seconds == pytest.approx((50 - len(frames)) * 0.01)
    # Timestamps keep the dropped audio as a gap rather than closing it up.
    assert frames[1].start_seconds == pytest.approx(
        frames[0].start_seconds + (values[1] - values[0]) * 0.01
    )


def test_sounddevice_backend_names_a_missing_device() -> None:
    with pytest.raises(AudioDeviceError, match=r"audio device 'no-such-mic-42': not found"):
        SoundDeviceBackend().open("no-such-mic-42", lambda block, overflowed: None)


def test_stdin_source_quiet_open_pipe_does_not_hold_up_exit() -> None:
    """The reader thread is a daemon: a process stops even while stdin stays open and silent."""
    code = (
        "import asyncio\n"
        "from monitor.audio.stdin import StdinSource\n"
        "async def main():\n"
        "    source = StdinSource(16000)\n"
        "    frames = source.frames()\n"
        "    frame = await anext(frames)\n"
        "    source.close()\n"
        "    print(frame.samples.shape[0], flush=True)\n"
        "asyncio.run(main())\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(np.zeros(480, "<i2").tobytes())
    child.stdin.flush()
    try:
        assert child.wait(timeout=20) == 0  # stdin still open here
        assert child.stdout.read().split() == [b"480"]
    finally:
        child.kill()
        child.stdin.close()


def test_streamed_wav_with_unknown_length_is_read_whole(tmp_path: Path) -> None:
    """A WAV written to a pipe declares 0xFFFFFFFF bytes: that is not a truncation."""
    path = tmp_path / "streamed.wav"
    sf.write(path, tone(16000, 1.0, 200.0), 16000, subtype="PCM_16")
    blob = bytearray(path.read_bytes())
    blob[4:8] = blob[40:44] = (0xFFFFFFFF).to_bytes(4, "little")
    path.write_bytes(bytes(blob))
    audio, duration = read_audio(path)
    assert duration == pytest.approx(1.0) and audio.shape == (16000,)


@pytest.mark.parametrize("bad", ["one_nan", "all_nan", "inf"])
def test_file_source_refuses_non_finite_samples_like_read_audio(tmp_path: Path, bad: str) -> None:
    data = tone(16000, 0.5, 100.0)
    if bad == "one_nan":
        data[4000] = np.nan
    elif bad == "all_nan":
        data[:] = np.nan
    else:
        data[-1] = np.inf
    path = tmp_path / f"{bad}.wav"
    sf.write(path, data, 16000, subtype="FLOAT")
    problem = f"{path}: audio contains NaN or infinite samples"
    with pytest.raises(InputError) as offline:
        read_audio(path)
    with pytest.raises(InputError) as streamed:
        FileSource(path)
    assert str(offline.value) == str(streamed.value) == problem


def test_non_finite_device_blocks_become_counted_silence(caplog: pytest.LogCaptureFixture) -> None:
    signal = tone(16000, 0.6, 250.0, amplitude=0.3).astype(np.float32)
    blocks = np.split(signal[:, None], 20)
    blocks[3][5] = np.nan
    blocks[7][:] = np.inf
    backend = FakeBackend(blocks, rate_hz=16000, missing=0, lose=False)
    mic = MicrophoneSource("float-device", backend=backend)

    async def run() -> list[AudioFrame]:
        got: list[AudioFrame] = []
        async for frame in mic.frames():
            got.append(frame)
            if sum(f.samples.shape[0] for f in got) >= signal.shape[0]:
                mic.close()
        return got

    frames = asyncio.run(asyncio.wait_for(run(), 10))
    audio = np.concatenate([f.samples for f in frames])
    assert audio.shape[0] == signal.shape[0]  # timing kept: silence of the same length
    for index, block in enumerate(np.split(audio, 20)):
        if index in (3, 7):
            assert not block.any()
        else:
            assert np.abs(block.astype(np.float32) / 32768 - blocks[index][:, 0]).max() < 1e-4
    assert mic.stats.non_finite == 2
    assert "NaN or infinite samples replaced by silence (1 so far)" in caplog.text


def test_several_sources_are_read_at_once_each_frame_named(tmp_path: Path) -> None:
    """A SourceSet of two files: every frame of each, named, in each file's own order; each
    file's end ends its stream; the set ends when both have; a bad file is one line at start."""
    for name, seconds in (("a", 0.5), ("b", 0.8)):
        sf.write(tmp_path / f"{name}.wav", tone(16000, seconds, 300.0), 16000)
    specs = parse_sources([f"kitchen=file:{tmp_path}/a.wav?fast", f"hall=file:{tmp_path}/b.wav"])
    source = open_sources(specs, fast=True)
    assert isinstance(source, SourceSet) and list(source.named) == ["kitchen", "hall"]
    assert not source.relays

    async def read() -> list[AudioFrame]:
        return [frame async for frame in source.frames()]

    frames = asyncio.run(read())
    for name, seconds in (("kitchen", 0.5), ("hall", 0.8)):
        mine = [f for f in frames if f.stream == StreamKey(name)]
        assert sum(f.samples.shape[0] for f in mine) == round(seconds * 16000)
        assert [f.start_seconds for f in mine] == sorted(f.start_seconds for f in mine)
        assert mine[-1].stream_end and not any(f.stream_end for f in mine[:-1])
    assert source.stats.frames_total == sum(s.stats.frames_total for s in source.named.values())
    with pytest.raises(InputError, match=r"missing\.wav"):
        open_sources(parse_sources(["a=mic", f"b=file:{tmp_path}/missing.wav"]))
