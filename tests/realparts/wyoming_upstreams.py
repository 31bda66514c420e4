"""Real Wyoming services that run offline, as upstreams of the proxy in tests and benchmarks.

- ``asr``: speech-to-text with pocketsphinx (its en-us model ships in the wheel): ``transcribe``,
  ``audio-start``, chunks, ``audio-stop`` → ``transcript``.
- ``wake``: wake-word detection with pyopen-wakeword (the openWakeWord models and TensorFlow Lite
  library ship in the wheel, as wyoming-openwakeword 2.x uses them; wyoming-openwakeword 1.8.2
  on PyPI pins wyoming 1.2.0 and cannot install beside our wyoming 1.10.2): ``detect``,
  audio → ``detection`` (name, timestamp in ms) or ``not-detected`` at ``audio-stop``.

Both are servers on the ``wyoming`` package's ``AsyncTcpServer`` / ``AsyncEventHandler``, and
both can record the exact bytes each connection sent them (``record``), so a test can compare
what the upstream received through the proxy with what it received directly.

In-process: ``await serve("asr", "127.0.0.1", 0)``; as a process (Home Assistant tests, the
benchmark): ``python -m tests.realparts.wyoming_upstreams asr --port 0`` prints ``port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import subprocess
import sys
import time
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioChunkConverter, AudioStart, AudioStop
from wyoming.event import Event, async_read_event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info, WakeModel, WakeProgram
from wyoming.server import AsyncEventHandler, AsyncTcpServer
from wyoming.wake import Detect, Detection, NotDetected

from tests.fakes import RecordingReader

THRESHOLD = 0.5
"""openWakeWord probability above which a wake word is detected (its own default)."""


async def upstream_audio(record: bytes) -> bytes:
    """The samples of every ``audio-chunk`` in what one connection sent the upstream (a
    ``record``)."""
    reader = asyncio.StreamReader()
    reader.feed_data(bytes(record))
    reader.feed_eof()
    chunks = []
    while (event := await async_read_event(reader)) is not None:
        if AudioChunk.is_type(event.type):
            chunks.append(AudioChunk.from_event(event).audio)
    return b"".join(chunks)


def _to_16k(converter: AudioChunkConverter, event: Event) -> bytes:
    return converter.convert(AudioChunk.from_event(event)).audio


def _decoder() -> Any:
    from pocketsphinx import Decoder  # its en-us model ships in the wheel (0.2–2 s to load)

    return Decoder(samprate=16000, loglevel="FATAL")


class AsrHandler(AsyncEventHandler):
    """pocketsphinx, one utterance per audio-start … audio-stop. Events are read as they
    arrive and decoded in turn, so with ``timings`` (the benchmark) it can print when each
    ``audio-stop`` reached it and when its ``transcript`` left, whatever audio was still being
    decoded."""

    timings = False

    def __init__(self, records: list[bytearray] | None, *args: Any) -> None:
        super().__init__(*args)
        self.converter = AudioChunkConverter(rate=16000, width=2, channels=1)
        if records is not None:
            recorder = RecordingReader(self.reader)
            records.append(recorder.received)
            self.reader = recorder  # type: ignore[assignment]
        self.decoder: Any = None  # loaded at the first audio-start (see handle_event)
        self.in_utterance = False
        self.arrived = 0.0

    async def run(self) -> None:
        inbox: asyncio.Queue[tuple[float, Event] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                while (event := await async_read_event(self.reader)) is not None:  # type: ignore[arg-type]
                    inbox.put_nowait((time.perf_counter(), event))
            finally:
                inbox.put_nowait(None)

        reading = asyncio.get_running_loop().create_task(read())
        try:
            while (item := await inbox.get()) is not None:
                self.arrived, event = item
                await self.handle_event(event)
        finally:
            reading.cancel()
            self.writer.close()

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(asr_info().event())
        elif Transcribe.is_type(event.type):
            pass  # one model, one language
        elif AudioStart.is_type(event.type):
            if self.decoder is None:  # a fresh one per connection (one that decoded before adapts
                # its normalisation to what it heard), made off the loop and only for audio:
                # describe is answered at once (Home Assistant waits 1 s for it)
                self.decoder = await asyncio.to_thread(_decoder)
            self.decoder.start_utt()
            self.in_utterance = True
        elif AudioChunk.is_type(event.type) and self.in_utterance:
            audio = _to_16k(self.converter, event)
            await asyncio.to_thread(self.decoder.process_raw, audio, False, False)
        elif AudioStop.is_type(event.type) and self.in_utterance:
            arrived = self.arrived
            text = await asyncio.to_thread(self._end)
            self.in_utterance = False
            await self.write_event(Transcript(text=text).event())
            if self.timings:  # system-wide monotonic clock: comparable across processes
                print(f"timing {arrived:.6f} {time.perf_counter():.6f}", flush=True)
        return True

    def _end(self) -> str:
        self.decoder.end_utt()
        hypothesis = self.decoder.hyp()
        return hypothesis.hypstr if hypothesis is not None else ""


class WakeHandler(AsyncEventHandler):
    """openWakeWord on every built-in model; each detection once per audio stream."""

    def __init__(self, records: list[bytearray] | None, *args: Any) -> None:
        super().__init__(*args)
        from pyopen_wakeword import Model, OpenWakeWord, OpenWakeWordFeatures

        self.converter = AudioChunkConverter(rate=16000, width=2, channels=1)
        if records is not None:
            recorder = RecordingReader(self.reader)
            records.append(recorder.received)
            self.reader = recorder  # type: ignore[assignment]
        self.features = OpenWakeWordFeatures.from_builtin()
        self.models = {m.value: OpenWakeWord.from_builtin(m) for m in Model}
        self.detected: set[str] = set()
        self.samples = 0

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(wake_info().event())
        elif Detect.is_type(event.type) or AudioStart.is_type(event.type):
            self._restart()
        elif AudioChunk.is_type(event.type):
            audio = _to_16k(self.converter, event)
            self.samples += len(audio) // 2
            for name in await asyncio.to_thread(self._detect, audio):
                stamp = self.samples * 1000 // 16000
                await self.write_event(Detection(name=name, timestamp=stamp).event())
        elif AudioStop.is_type(event.type):
            if not self.detected:
                await self.write_event(NotDetected().event())
            self._restart()
        return True

    def _detect(self, audio: bytes) -> list[str]:
        found = []
        for embedding in self.features.process_streaming(audio):
            for name, model in self.models.items():
                if name in self.detected:
                    continue
                if any(p > THRESHOLD for p in model.process_streaming(embedding)):
                    self.detected.add(name)
                    found.append(name)
        return found

    def _restart(self) -> None:
        self.features.reset()
        for model in self.models.values():
            model.reset()
        self.detected, self.samples = set(), 0


def _attribution(name: str, url: str) -> Attribution:
    return Attribution(name=name, url=url)


def asr_info() -> Info:
    model = AsrModel(
        name="en-us",
        description="pocketsphinx's US English model",
        attribution=_attribution("CMU Sphinx", "https://cmusphinx.github.io"),
        installed=True,
        version="5.1.1",
        languages=["en"],
    )
    program = AsrProgram(
        name="pocketsphinx",
        description="offline speech-to-text for the tests",
        attribution=_attribution("CMU Sphinx", "https://cmusphinx.github.io"),
        installed=True,
        version="5.1.1",
        models=[model],
    )
    return Info(asr=[program])


def wake_info() -> Info:
    from pyopen_wakeword import Model

    attribution = _attribution("openWakeWord", "https://github.com/dscripka/openWakeWord")
    models = [
        WakeModel(
            name=m.value,
            description=m.value.replace("_", " "),
            phrase=m.value.replace("_", " "),
            attribution=attribution,
            installed=True,
            version="1.1.0",
            languages=["en"],
        )
        for m in Model
    ]
    program = WakeProgram(
        name="openwakeword",
        description="offline wake-word detection for the tests",
        attribution=attribution,
        installed=True,
        version="1.1.0",
        models=models,
    )
    return Info(wake=[program])


def speech(text: str, *, pad_seconds: float = 0.5) -> np.ndarray:
    """``text`` spoken by espeak-ng (a Debian package, scripts/install-system.sh), int16 16 kHz
    mono with ``pad_seconds`` of silence either side: audio both services understand."""
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", "140", "--stdout", text],
        check=True,
        capture_output=True,
    ).stdout
    audio, rate = sf.read(io.BytesIO(wav), dtype="float32")
    audio = soxr.resample(audio, rate, 16000)
    pad = np.zeros(round(pad_seconds * 16000), dtype=np.float32)
    return (np.concatenate([pad, audio, pad]) * 32767).astype(np.int16)


HANDLERS = {"asr": AsrHandler, "wake": WakeHandler}


async def serve(
    kind: str, host: str = "127.0.0.1", port: int = 0, *, records: list[bytearray] | None = None
) -> tuple[AsyncTcpServer, int]:
    """A started server of ``kind`` and its port; ``records`` gets each connection's bytes."""
    handler = HANDLERS[kind]
    server = AsyncTcpServer(host, port)
    await server.start(lambda reader, writer: handler(records, reader, writer))
    assert server._server is not None
    return server, int(server._server.sockets[0].getsockname()[1])


async def _main(kind: str, host: str, port: int) -> None:
    server, bound = await serve(kind, host, port)
    print(f"port {bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=sorted(HANDLERS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--timings", action="store_true", help="asr: print per-utterance times")
    args = parser.parse_args(argv)
    AsrHandler.timings = args.timings
    try:
        asyncio.run(_main(args.kind, args.host, args.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
