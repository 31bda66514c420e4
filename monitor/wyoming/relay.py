"""The Wyoming relay: a server between a client (Home Assistant's pipeline, a satellite) and a
real upstream service, pumping events both ways byte for byte, with a tap beside it.

This module is the relay only, and imports neither numpy nor anything that measures: it runs in
``voxmeter run`` (the in-process proxy, :mod:`monitor.wyoming.proxy`) and in the small
``voxmeter relay`` process (:mod:`monitor.relay.process`) alike, so a crash of the measuring side
never reaches it. What is measured is the tap's business (:class:`Tap`): after an event went on,
the relay offers it to the tap, which must never wait.

``wyoming-proxy://HOST:PORT?upstream=tcp://UHOST:UPORT`` serves the Wyoming protocol on
HOST:PORT; for each client connection the relay opens one to the upstream and pumps events both
ways, byte for byte and in order; only the upstream's ``info`` answer to ``describe`` is
rewritten, its programs named ``… via voxmeter`` (model names stay: clients send them back in
``transcribe``/``detect``, and the upstream must know them).

Upstream down or refusing: the client gets a Wyoming ``error`` event at once (the connect attempt
gives up after :data:`CONNECT_SECONDS`) and then the end of the stream, as from a refused
connection (what it still sends is read and let go, so the error is not lost to a reset); one
warning is logged, and the upstream is probed again with random capped backoff. While it is
down, clients get the error without a new attempt; the first probe that connects logs one line,
and clients are relayed again. An upstream that hangs up mid-request: an ``error`` to its client
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Info
from wyoming.server import AsyncEventHandler

from monitor.logs import PeerWarnings
from monitor.wyoming.endpoint import PROXY_SCHEME, WyomingService
from monitor.wyoming.endpoint import ProxyEndpoint as ProxyEndpoint
from monitor.wyoming.endpoint import parse_proxy as parse_proxy
from monitor.wyoming.wire import (
    BROKEN_EVENT,
    RefusedAudioError,
    broken,
    encode_event,
    peer_name,
    read_event_bytes,
    reason,
    refuse,
)

logger = logging.getLogger(__name__)
warnings = PeerWarnings(logger)
"""Warnings clients can trigger, rate-limited per client host and kind."""

SCHEME = PROXY_SCHEME  # the relay process picks its specs out by it

CONNECT_SECONDS = 2.0
"""Longest wait for the upstream to accept. A refused connection is known at once; this bounds
only a silent host. It is loop time: when the loop is late (a loaded board), the timer and the
accepted connection are seen in the same turn and the timer wins, so it must stay well above
the loop's worst lateness, or a live upstream is taken for a dead one."""
LINGER_SECONDS = 5.0
"""After an error, how long a client that sends on is read before it is let go."""
VIA = " via voxmeter"
NOTE = "passes through voxmeter, which measures how much the audio discloses about who speaks"
_PROGRAMS = ("asr", "tts", "handle", "intent", "wake", "mic", "snd")
_MODELS = ("models", "voices")


def annotate_info(info: Event) -> Event:
    """The upstream's ``info`` with every program named ``NAME via voxmeter`` and every
    program's and model's description saying so; all else (model names, languages, fields this
    version does not know) as the upstream sent it."""
    data = json.loads(json.dumps(info.data))  # a deep copy of plain JSON

    def mark(artifact: Any, *, rename: bool) -> None:
        if not isinstance(artifact, dict):
            return
        name = str(artifact.get("name") or "")
        if rename:
            artifact["name"] = f"{name}{VIA}"
        described = artifact.get("description") or name
        artifact["description"] = f"{described} ({NOTE})"

    for key in _PROGRAMS:
        for program in data.get(key) or []:
            mark(program, rename=True)
            for models in (program.get(k) for k in _MODELS if isinstance(program, dict)):
                for model in models or []:
                    mark(model, rename=False)
    if isinstance(data.get("satellite"), dict):
        mark(data["satellite"], rename=True)
    return Event(type=info.type, data=data, payload=info.payload)


class Tap(Protocol):
    """Where the relay hands a copy of what it passed upstream: the measuring side's inbox,
    in this process (:class:`~monitor.wyoming.proxy.SideTap`) or over the local channel
    (:class:`~monitor.wyoming.channel.ChannelTap`). Both methods return at once, never waiting."""

    def offer(self, who: object, event: Event) -> None:
        """An event of connection ``who`` went upstream (non-audio events are ignored)."""
        ...

    def left(self, who: object) -> None:
        """Connection ``who`` closed: its open utterance ends here."""
        ...


class Counters(Protocol):
    """The counter the relay keeps (a source's :class:`~monitor.audio.frames.SourceStats`)."""

    device_errors: int


@dataclass
class RelayCounters:
    """:class:`Counters` of a relay without a measuring source (``voxmeter relay``)."""

    device_errors: int = 0
    """Times the upstream became unreachable."""


ChunkTransform = Callable[[Event, bytes], bytes]
"""What one connection does to each event on its way upstream (the one place for it,
:meth:`Relay._pump_up`): given the event and its bytes as they came, the bytes to send instead
(``b""``: nothing now). It sees every event, so it can keep state per utterance (an
anonymiser's α drawn at ``audio-start``, its filter state across chunks, its tail flushed at
``audio-stop``). The tap is offered the event as the client sent it: the measuring side tracks
who speaks from the original audio."""

TransformFactory = Callable[[], ChunkTransform]
"""Makes a connection's :data:`ChunkTransform` when it opens (state per connection)."""


class _Upstream:
    """Whether the upstream answers; while it does not, a prober retries with capped backoff."""

    def __init__(self, proxy: ProxyServer) -> None:
        self.proxy = proxy
        self.down = False
        self._prober: asyncio.Task[None] | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the upstream; OSError (TimeoutError included) when it has none."""
        endpoint = self.proxy.endpoint
        if self.down:
            raise ConnectionRefusedError(f"{endpoint.upstream} is down (retrying)")
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(endpoint.upstream_host, endpoint.upstream_port),
                CONNECT_SECONDS,
            )
        except OSError as error:
            self._went_down(error)
            raise

    def _went_down(self, error: OSError) -> None:
        if self.down:
            return
        self.down = True
        self.proxy.stats.device_errors += 1
        problem = "no answer" if isinstance(error, TimeoutError) else reason(error)
        logger.warning(
            "%s: upstream %s unreachable (%s); clients get an error until it is back",
            self.proxy.name,
            self.proxy.endpoint.upstream,
            problem,
        )
        self._prober = asyncio.get_running_loop().create_task(
            self._probe(), name="voxmeter.wyoming-proxy.reconnect"
        )

    async def _probe(self) -> None:
        endpoint = self.proxy.endpoint
        for attempt in itertools.count(1):
            await self.proxy._sleep(self.proxy.backoff_seconds(attempt))
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(endpoint.upstream_host, endpoint.upstream_port),
                    CONNECT_SECONDS,
                )
            except OSError:
                continue
            writer.close()
            self.down = False
            logger.info(
                "%s: upstream %s is back (retry %d)", self.proxy.name, endpoint.upstream, attempt
            )
            return

    def close(self) -> None:
        if self._prober is not None:
            self._prober.cancel()


class Relay(AsyncEventHandler):
    """One client connection and its upstream connection, pumped both ways."""

    def __init__(self, proxy: ProxyServer, *args: Any) -> None:
        super().__init__(*args)
        self.proxy = proxy
        self.upstream: asyncio.StreamWriter | None = None  # None: none, or it is gone
        self._back: asyncio.Task[None] | None = None  # the upstream → client pump

    async def handle_event(self, event: Event) -> bool:  # the pumps below read raw bytes
        raise NotImplementedError

    async def run(self) -> None:
        proxy = self.proxy
        back: asyncio.Task[None] | None = None
        try:
            try:
                up_reader, self.upstream = await proxy.upstream.open()
            except OSError as error:
                why = _problem(error)
                await self._farewell(f"upstream {proxy.endpoint.upstream} unavailable: {why}")
            else:
                back = self._back = asyncio.get_running_loop().create_task(
                    self._pump_back(up_reader), name="voxmeter.wyoming-proxy.back"
                )
            await self._pump_up()
        finally:
            if self.upstream is not None:
                self.upstream.close()
            if back is not None:
                back.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await back
            proxy.tap.left(self)
            self.writer.close()

    async def _pump_up(self) -> None:
        """Client → upstream: each event's bytes as they came, then a copy to the tap.
        Without an upstream, the client's events are read (and measured) until it hangs up,
        for at most :data:`LINGER_SECONDS` each: closing on unread data would reset the
        connection, and the client could lose the error before reading it."""
        factory = self.proxy.upstream_transform
        transform = factory() if factory is not None else None  # state per connection
        try:
            while True:
                wait = None if self.upstream is not None else LINGER_SECONDS
                read = await asyncio.wait_for(read_event_bytes(self.reader, peer=True), wait)
                if read is None:
                    return
                event, raw = read
                if transform is not None:  # the one place audio may change on its way
                    raw = transform(event, raw)
                    # one event's work per turn of the loop: chunks already buffered must not
                    # add up to one stall (their work is bounded each, not together)
                    await asyncio.sleep(0)
                if self.upstream is not None and raw:
                    try:
                        self.upstream.write(raw)
                        await self.upstream.drain()
                    except OSError:  # gone: _pump_back tells the client why
                        self.upstream = None
                self.proxy.tap.offer(self, event)
        except TimeoutError:
            return
        except RefusedAudioError as error:
            await self._refuse(str(error))
        except BROKEN_EVENT as error:
            peer = peer_name(self.writer)
            name = self.proxy.name
            warnings.warn(peer, "malformed", "%s: client %s dropped: %s", name, peer, broken(error))
        except OSError as error:  # the client is gone
            logger.debug("%s: client left: %s", self.proxy.name, reason(error))

    async def _refuse(self, problem: str) -> None:
        """Audio outside the accepted formats (:mod:`monitor.wyoming.formats`): nothing of it
        went upstream; the client hears why, and is let go (other clients are not touched)."""
        peer = peer_name(self.writer)
        name = self.proxy.name
        warnings.warn(peer, "refused", "%s: client %s refused: %s", name, peer, problem)
        if self._back is not None:  # nothing of the upstream's goes after the error
            self._back.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._back
        if self.upstream is not None:  # its request is cut: the upstream must not wait on it
            self.upstream.close()
            self.upstream = None
        await refuse(self.reader, self.writer, problem, seconds=LINGER_SECONDS)

    async def _pump_back(self, upstream: asyncio.StreamReader) -> None:
        """Upstream → client: each event's bytes as they came (``info`` annotated); when the
        upstream hangs up or breaks, the client hears why and its connection ends too."""
        try:
            while (read := await read_event_bytes(upstream)) is not None:
                event, raw = read
                if Info.is_type(event.type):
                    raw = encode_event(annotate_info(event))
                self.writer.write(raw)
                await self.writer.drain()
            problem = "closed the connection"
        except BROKEN_EVENT as error:
            problem = broken(error)
        except OSError as error:
            problem = reason(error)
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        await self._farewell(f"upstream {self.proxy.endpoint.upstream} {problem}")
        # a client that neither sends nor hangs up (a half-open connection) is let go too
        asyncio.get_running_loop().call_later(LINGER_SECONDS, self.writer.close)

    async def _farewell(self, text: str) -> None:
        """A Wyoming error, then the end of what we send (the client reads both)."""
        with contextlib.suppress(OSError):
            self.writer.write(encode_event(Error(text=text, code="upstream-unavailable").event()))
            await self.writer.drain()
            self.writer.write_eof()


def _problem(error: OSError) -> str:
    return "no answer" if isinstance(error, TimeoutError) else reason(error) or str(error)


class ProxyServer(WyomingService[ProxyEndpoint]):
    """A Wyoming proxy's server: the relay of every connection and the upstream's state; each
    relayed event is offered to ``tap`` (see the module docstring)."""

    def __init__(
        self,
        endpoint: ProxyEndpoint,
        tap: Tap,
        *,
        stats: Counters | None = None,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        zeroconf: bool = False,
        transform: TransformFactory | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            endpoint,
            backoff_initial_seconds=backoff_initial_seconds,
            backoff_max_seconds=backoff_max_seconds,
            zeroconf=zeroconf,
            sleep=sleep,
            rng=rng,
        )
        self.tap = tap
        self.stats: Counters = stats if stats is not None else RelayCounters()
        self.upstream_transform = transform
        self.upstream = _Upstream(self)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The relay (and its zeroconf announcement) runs inside this block."""
        async with self._served(functools.partial(Relay, self)) as listening:
            logger.info("relaying Wyoming %s → %s", listening, self.endpoint.upstream)
            try:
                yield
            finally:
                self.upstream.close()
