"""Audio from the Wyoming protocol (Home Assistant voice satellites), as an :class:`AudioSource`.

Two ways in, both consuming ``audio-start`` / ``audio-chunk`` / ``audio-stop`` events of any rate,
sample width and channel count, converted to 16 kHz mono int16 with soxr like every source:

- ``wyoming://HOST:PORT`` connects to a Wyoming *microphone service* (wyoming-mic-external,
  or any server that streams audio chunks to a client that connects, the way wyoming-satellite
  reads its ``--mic-uri``). A lost or refused connection is retried with random capped backoff.
- ``wyoming-listen://HOST:PORT`` listens: a Wyoming client (a satellite's audio forwarder, a
  script, another service) connects and streams its audio to voxmeter. One client streams at a
  time; audio from a second client during another's session is dropped and counted.

``?once`` (either form) ends the source when the first connection closes, as a file ends: for
replaying a recording, and for ``--exit-at-end``. Stream time counts the audio received:
sessions follow one another without a gap, since no audio was lost between them (a gap would
count as dropped frames); outages of a ``wyoming://`` service are counted as device errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

import numpy as np
from wyoming.audio import AudioChunk, AudioFormat, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, SndProgram
from wyoming.server import AsyncEventHandler

from monitor import __version__
from monitor.audio.frames import (
    MAX_RATE_HZ,
    MIN_RATE_HZ,
    ONE_STREAM,
    RATE_HZ,
    AudioFrame,
    Resampler,
    Sleep,
    SourceStats,
    StreamKey,
    check_frame_ms,
)
from monitor.errors import AudioDeviceError
from monitor.logs import PeerWarnings
from monitor.wyoming.endpoint import SCHEMES as SCHEMES
from monitor.wyoming.endpoint import WyomingEndpoint as WyomingEndpoint
from monitor.wyoming.endpoint import WyomingService
from monitor.wyoming.endpoint import parse_endpoint as parse_endpoint
from monitor.wyoming.formats import MAX_CHANNELS, WIDTHS, audio_format
from monitor.wyoming.wire import (
    BROKEN_EVENT,
    RefusedAudioError,
    audio_seconds,
    broken,
    peer_name,
    protected_alpha,
    read_event,
    reason,
    refuse,
)

logger = logging.getLogger(__name__)
warnings = PeerWarnings(logger)
"""Warnings clients can trigger, rate-limited per client host and kind."""


def pcm_to_float(audio: bytes, *, width: int, channels: int) -> np.ndarray:
    """Signed little-endian PCM → float32 (n, channels) in [-1, 1); a partial last frame is cut."""
    if width not in WIDTHS:
        raise ValueError(f"sample width {width} bytes not supported (1, 2, 3 or 4)")
    if not 1 <= channels <= MAX_CHANNELS:
        raise ValueError(f"channel count {channels} not supported (1..{MAX_CHANNELS})")
    usable = len(audio) - len(audio) % (width * channels)
    raw = np.frombuffer(audio, dtype=np.uint8, count=usable)
    if width == 3:  # 24-bit: assemble, then sign-extend from bit 23
        b = raw.reshape(-1, 3).astype(np.int32)
        values = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        values = (values ^ 0x800000) - 0x800000
    else:
        values = raw.view({1: "i1", 2: "<i2", 4: "<i4"}[width])
    scale = np.float32(2.0 ** (8 * width - 1))
    return (values.astype(np.float32) / scale).reshape(-1, channels)


class WyomingDecoder:
    """Audio events → 16 kHz mono int16, one streaming resampler per audio format.

    ``audio-start`` opens a stream, ``audio-chunk`` s carry their own format (a format change
    flushes the old stream), ``audio-stop`` and :meth:`flush` drain the resampler's tail.
    Other events give no audio. A malformed chunk raises ``ValueError`` naming the bad value.
    """

    def __init__(self) -> None:
        self._format: tuple[int, int, int] | None = None
        self._resample: Resampler | None = None
        self.source_rate_hz = RATE_HZ  # of the last chunk (kept through a flush: its tail)

    def flush(self) -> np.ndarray:
        """The resampler's last samples; the next chunk starts a new stream."""
        resample, self._resample, self._format = self._resample, None, None
        if resample is None:
            return np.zeros(0, dtype=np.int16)
        return resample(np.zeros(0, dtype=np.float32), last=True)

    def process(self, event: Event) -> np.ndarray:
        """int16 (n,) at 16 kHz (possibly empty) for one event."""
        if AudioStart.is_type(event.type) or AudioStop.is_type(event.type):
            return self.flush()
        if not AudioChunk.is_type(event.type):
            return np.zeros(0, dtype=np.int16)
        chunk = audio_format(event.data if isinstance(event.data, dict) else {})
        fmt = (chunk.rate_hz, chunk.width_bytes, chunk.channels)  # ValueError: not whole
        if not MIN_RATE_HZ <= fmt[0] <= MAX_RATE_HZ:
            raise ValueError(
                f"sample rate {fmt[0]} Hz not supported ({MIN_RATE_HZ}..{MAX_RATE_HZ})"
            )
        pcm = pcm_to_float(event.payload or b"", width=fmt[1], channels=fmt[2])
        tail = np.zeros(0, dtype=np.int16)
        if fmt != self._format:
            tail = self.flush()
            self._format, self._resample = fmt, Resampler(fmt[0])
            self.source_rate_hz = fmt[0]
        assert self._resample is not None
        return np.concatenate([tail, self._resample(pcm)])


def listen_info() -> Info:
    """What ``wyoming-listen`` is, for ``describe``: a sound sink — it takes ``audio-start``,
    ``audio-chunk`` and ``audio-stop`` as a Wyoming sound service does, and measures instead of
    playing. Home Assistant's integration adds asr, tts, wake, handle, intent and satellite
    services only, so it declines this one (``no_services``), truthfully: to be part of its
    voice pipeline, voxmeter relays a real service (``wyoming-proxy``)."""
    return Info(
        snd=[
            SndProgram(
                name="voxmeter",
                description=(
                    "measures how much the audio streamed to it discloses about who speaks; "
                    "plays nothing, answers nothing"
                ),
                attribution=Attribution(name="voxmeter", url=""),
                installed=True,
                version=__version__,
                snd_format=AudioFormat(rate=RATE_HZ, width=2, channels=1),
            )
        ]
    )


class FrameDecoder:
    """One stream's audio events → frames of ``frame_ms`` on the stream's own timeline (stream
    time counts the audio received). With ``turns``, the last frame of each ``audio-stop`` (or
    ended connection) carries ``utterance_end`` — an empty frame when no samples are left — so
    the daemon closes the speaker's window there. Every frame carries ``stream``."""

    def __init__(
        self,
        frame_ms: int,
        stats: SourceStats,
        name: str,
        *,
        turns: bool = False,
        stream: StreamKey = ONE_STREAM,
    ) -> None:
        self.decoder = WyomingDecoder()
        self.frame = RATE_HZ * frame_ms // 1000
        self.stats = stats
        self.name = name
        self.turns = turns
        self.stream = stream
        self._pending = np.zeros(0, dtype=np.int16)
        self._emitted = 0  # samples received so far: the stream's clock
        self._in_turn = False  # audio came since the last end of a turn
        self._alpha: float | None = None  # the open utterance's McAdams α (protected upstream)

    def process(self, event: Event | None) -> list[AudioFrame]:
        """The frames ``event`` completes (None: a connection ended, drain the resampler)."""
        if event is None:
            samples = self.decoder.flush()
        else:
            kind = event.type
            started = AudioStart.is_type(kind) or AudioChunk.is_type(kind)
            if AudioStart.is_type(kind):
                self._alpha = protected_alpha(event, self.name)
            self._in_turn = self._in_turn or started
            try:
                samples = self.decoder.process(event)
            except ValueError as error:
                self.stats.dropped_seconds += audio_seconds(event)
                logger.warning("%s: audio chunk dropped: %s", self.name, error)
                return []
        pending = np.concatenate([self._pending, samples])
        last = event is None or AudioStop.is_type(event.type)
        ended = self.turns and last and self._in_turn
        self._in_turn = self._in_turn and not last
        frames = []
        frame = self.frame
        while pending.shape[0] >= frame or (last and pending.shape[0]):
            out, pending = pending[:frame], pending[frame:]
            self.stats.frames_total += 1
            end = ended and pending.shape[0] == 0
            frames.append(self._frame(out, utterance_end=end))
            self._emitted += out.shape[0]
            ended = ended and not end
        self._pending = pending
        if ended:  # nothing left to carry the mark
            frames.append(self._frame(np.zeros(0, dtype=np.int16), utterance_end=True))
        if last:
            self._alpha = None
        return frames

    def end(self) -> list[AudioFrame]:
        """The stream ends (its connection closed): what is left, then an empty frame marking
        ``stream_end``."""
        rest = self.process(None)
        return [*rest, self._frame(np.zeros(0, dtype=np.int16), stream_end=True)]

    def _frame(self, samples: np.ndarray, **marks: bool) -> AudioFrame:
        return AudioFrame(
            samples,
            self._emitted / RATE_HZ,
            stream=self.stream,
            protect_alpha=self._alpha,
            source_rate_hz=self.decoder.source_rate_hz,
            **marks,
        )


async def decode_frames(
    events: AsyncIterator[Event | None],
    frame_ms: int,
    stats: SourceStats,
    name: str,
    *,
    turns: bool = False,
) -> AsyncIterator[AudioFrame]:
    """Frames of ``frame_ms`` on one timeline from the audio of ``events`` (None: a connection
    ended, drain the resampler): one :class:`FrameDecoder` over the whole sequence."""
    decoder = FrameDecoder(frame_ms, stats, name, turns=turns)
    async for event in events:
        for frame in decoder.process(event):
            yield frame


_END = object()
"""Queue marker: the source is finished (``?once`` and the first client left)."""


class _Listener(AsyncEventHandler):
    """One connected client of ``wyoming-listen``: forwards its audio events to the source."""

    def __init__(self, source: WyomingSource, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.source = source
        self.streamed = False  # whether any of its audio was taken
        self.rejected = False  # its current session began while another client streamed

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(listen_info().event())
            return True
        await self.source._from_client(self, event)
        return True

    async def run(self) -> None:
        """The package's loop with :func:`read_event`: a client that breaks the protocol is
        dropped with one warning (its audio so far is kept), never a traceback, and the source
        goes on listening."""
        name, peer = self.source.name, peer_name(self.writer)
        try:
            while (event := await read_event(self.reader, peer=True)) is not None:
                if not await self.handle_event(event):
                    break
        except RefusedAudioError as error:  # outside monitor/wyoming/formats.py: told why
            self.source.stats.dropped_seconds += error.seconds
            warnings.warn(peer, "refused", "%s: client %s refused: %s", name, peer, error)
            await refuse(self.reader, self.writer, str(error))
        except BROKEN_EVENT as error:
            warnings.warn(peer, "malformed", "%s: client %s dropped: %s", name, peer, broken(error))
        except OSError as error:  # reset by the peer
            warnings.warn(peer, "lost", "%s: client %s lost: %s", name, peer, reason(error))
        finally:
            await self.disconnect()
            self.writer.close()

    async def disconnect(self) -> None:
        await self.source._client_left(self)


class WyomingSource(WyomingService[WyomingEndpoint]):
    """Frames from a Wyoming audio stream (see the module docstring for both modes)."""

    def __init__(
        self,
        endpoint: WyomingEndpoint,
        *,
        frame_ms: int = 30,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        wait_for_device: bool = False,
        queue_events: int = 64,
        owner_idle_seconds: float = 5.0,
        idle_seconds: float = 30.0,
        zeroconf: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            endpoint,
            backoff_initial_seconds=backoff_initial_seconds,
            backoff_max_seconds=backoff_max_seconds,
            zeroconf=zeroconf,  # announce a wyoming-listen server on mDNS
            sleep=sleep,
            rng=rng,
        )
        self.frame_ms = check_frame_ms(frame_ms)
        self.stats = SourceStats()
        self.wait_for_device = wait_for_device
        self._queue_events = queue_events
        self._queue: asyncio.Queue[object] | None = None
        self.owner_idle_seconds = owner_idle_seconds
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._owner: _Listener | None = None
        self._owner_seen = 0.0  # clock reading of the streaming client's last event
        self._closed = False

    def close(self) -> None:
        self._closed = True
        if self._queue is not None:
            with contextlib.suppress(asyncio.QueueFull):
                self._queue.put_nowait(_END)

    # ---- frames: one decoder and one timeline for both modes ------------------------------

    async def frames(self) -> AsyncIterator[AudioFrame]:
        events = self._serve() if self.endpoint.listen else self._connect()
        async for frame in decode_frames(events, self.frame_ms, self.stats, self.name):
            yield frame

    # ---- wyoming:// — a client of a microphone service ----------------------------------------

    async def _connect(self) -> AsyncIterator[Event | None]:
        host, port = self.endpoint.host, self.endpoint.port
        failures = 0
        connected_once = False
        while not self._closed:
            try:
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    connected_once, failures = True, 0
                    logger.info("reading Wyoming audio from %s", self.name)
                    while (event := await self._read_or_give_up(reader)) is not None:
                        yield event
                finally:
                    writer.close()
                problem = "connection closed"
            except TimeoutError:  # before OSError, of which it is a subclass
                problem = f"no event for {self.idle_seconds:g} s (a half-open connection?)"
            except BROKEN_EVENT as error:  # the service is not gone: reconnect, as after a close
                problem = broken(error)
            except OSError as error:
                problem = reason(error)
                if not (connected_once or self.wait_for_device):  # a typo, not an outage
                    raise AudioDeviceError(f"{self.name}: cannot connect ({problem})") from error
            yield None
            if self.endpoint.once:
                return
            failures += 1
            self.stats.device_errors += 1
            delay = self.backoff_seconds(failures)
            logger.warning("%s: %s; retry %d in %.1f s", self.name, problem, failures, delay)
            await self._sleep(delay)

    async def _read_or_give_up(self, reader: asyncio.StreamReader) -> Event | None:
        """The next event; TimeoutError after ``idle_seconds`` of nothing: a microphone service
        streams all the time, and one whose host lost power leaves a connection that never
        closes (no FIN), so silence is the only sign that it is gone."""
        return await asyncio.wait_for(read_event(reader, peer=True), self.idle_seconds)

    # ---- wyoming-listen:// — a server clients stream to --------------------------------------

    async def _serve(self) -> AsyncIterator[Event | None]:
        self._queue = asyncio.Queue(self._queue_events)
        async with self._served(functools.partial(_Listener, self)) as listening:
            logger.info("listening for Wyoming audio on %s", listening)
            while (item := await self._queue.get()) is not _END:
                yield item  # type: ignore[misc]

    async def _from_client(self, client: _Listener, event: Event) -> None:
        """Audio of the client that streams now; anyone else's session is dropped, counted."""
        start, stop = AudioStart.is_type(event.type), AudioStop.is_type(event.type)
        if not (start or stop or AudioChunk.is_type(event.type)):
            return
        if self._owner not in (None, client) and not stop and self._owner_gone():
            await self._take_over(client)
        if self._owner is None and (start or not client.rejected) and not stop:
            self._owner, client.rejected = client, False
        if self._owner is client:
            self._owner_seen = self._clock()
        if self._owner is not client:
            self.stats.dropped_seconds += audio_seconds(event)
            client.rejected = not stop  # its session ends with its audio-stop
            return
        client.streamed = True
        assert self._queue is not None
        await self._queue.put(event)  # lossless: a full queue slows the sender, TCP-style
        self._owner_seen = self._clock()  # waiting on a full queue is not silence
        if stop:
            self._owner = None

    def _owner_gone(self) -> bool:
        """Whether the streaming client sent nothing for ``owner_idle_seconds``: a satellite
        that lost power or network mid-session leaves a half-open connection that would
        otherwise hold the source for ever."""
        return self._clock() - self._owner_seen > self.owner_idle_seconds

    async def _take_over(self, client: _Listener) -> None:
        """``client`` streams now; the silent owner's session ends (its resampler tail drains),
        and anything it sends later without a new audio-start is dropped."""
        assert self._owner is not None and self._queue is not None
        logger.warning(
            "%s: the streaming client sent nothing for %.1f s; another one takes over",
            self.name,
            self._clock() - self._owner_seen,
        )
        self._owner.rejected, self._owner, client.rejected = True, None, False
        await self._queue.put(None)

    async def _client_left(self, client: _Listener) -> None:
        if self._owner is client:
            self._owner = None
            assert self._queue is not None
            await self._queue.put(None)
        if self.endpoint.once and client.streamed and self._queue is not None:
            await self._queue.put(_END)  # a probe that only asked `describe` does not end it
