"""Where a Wyoming source connects or listens: the one parser of the ``wyoming://``,
``wyoming-listen://`` and ``wyoming-proxy://`` spellings, and what every Wyoming source shares
(its endpoint and name, the port it bound, the capped random backoff before a retry).

Numpy-free, like the relay it serves: ``voxmeter relay`` imports it in a small process of its
own. :mod:`monitor.sources.spec` (the one parser of every source spelling) hands the Wyoming
ones here, so a URL is checked by one set of rules whichever kind it names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import SplitResult, parse_qs, urlsplit

from wyoming.server import HandlerFactory

from monitor.audio.retry import backoff_seconds
from monitor.errors import InputError
from monitor.wyoming.wire import serving

SCHEMES = ("wyoming", "wyoming-listen")
"""A client of a Wyoming microphone service, and a server Wyoming clients stream to."""
PROXY_SCHEME = "wyoming-proxy"
"""A relay of a real Wyoming service, measuring what passes."""

_SOURCE_PROBLEM = (
    "expected wyoming://HOST:PORT (PORT 1..65535) or wyoming-listen://HOST:PORT (PORT "
    "0..65535, 0 = any free port), optionally ?once"
)
_PROXY_PROBLEM = (
    f"expected {PROXY_SCHEME}://HOST:PORT?upstream=tcp://HOST:PORT, the upstream's PORT 1..65535"
)


@dataclass(frozen=True)
class WyomingEndpoint:
    """Where the audio comes from, parsed from ``wyoming[-listen]://HOST:PORT[?once]``."""

    host: str
    port: int
    listen: bool
    once: bool

    def __str__(self) -> str:
        scheme = SCHEMES[1] if self.listen else SCHEMES[0]
        return f"{scheme}://{self.host}:{self.port}{'?once' if self.once else ''}"


@dataclass(frozen=True)
class ProxyEndpoint:
    """Where we listen and where we relay to, parsed from a ``wyoming-proxy://`` spec."""

    host: str
    port: int
    upstream_host: str
    upstream_port: int

    @property
    def upstream(self) -> str:
        return f"tcp://{self.upstream_host}:{self.upstream_port}"

    def __str__(self) -> str:
        return f"{PROXY_SCHEME}://{self.host}:{self.port}?upstream={self.upstream}"


Endpoint = WyomingEndpoint | ProxyEndpoint


def parse_wyoming(spec: str) -> Endpoint:
    """The endpoint of any Wyoming source spec; a malformed one raises InputError naming it
    (and the spelling its scheme expects)."""
    parts = urlsplit(spec)
    proxy = parts.scheme == PROXY_SCHEME
    port = _host_port(parts)
    endpoint: Endpoint | None = None
    if port is not None and parts.path in ("", "/"):
        endpoint = _proxy(parts, port) if proxy else _source(parts, port)
    if endpoint is None:
        raise _bad(spec, proxy=proxy)
    return endpoint


def parse_endpoint(spec: str) -> WyomingEndpoint:
    """A ``wyoming[-listen]://`` spec (:func:`parse_wyoming`); any other raises InputError."""
    endpoint = parse_wyoming(spec) if urlsplit(spec).scheme in SCHEMES else None
    if not isinstance(endpoint, WyomingEndpoint):
        raise _bad(spec, proxy=False)
    return endpoint


def parse_proxy(spec: str) -> ProxyEndpoint:
    """A ``wyoming-proxy://`` spec (:func:`parse_wyoming`); any other raises InputError."""
    endpoint = parse_wyoming(spec) if urlsplit(spec).scheme == PROXY_SCHEME else None
    if not isinstance(endpoint, ProxyEndpoint):
        raise _bad(spec, proxy=True)
    return endpoint


def _bad(spec: str, *, proxy: bool) -> InputError:
    """The one error of a malformed spec: it names the spec and the spelling expected."""
    what, problem = ("proxy source", _PROXY_PROBLEM) if proxy else ("source", _SOURCE_PROBLEM)
    return InputError("source", f"bad Wyoming {what} {spec!r} ({problem})")


def _host_port(parts: SplitResult) -> int | None:
    """The port of a URL that names a host and a port, else None."""
    try:
        port = parts.port
    except ValueError:  # beyond 65535, or not a number
        return None
    return port if parts.hostname else None


def _source(parts: SplitResult, port: int) -> WyomingEndpoint | None:
    listen = parts.scheme == SCHEMES[1]
    if (
        parts.scheme not in SCHEMES
        or (port == 0 and not listen)  # connecting needs a real port
        or parts.query not in ("", "once")
    ):
        return None
    assert parts.hostname is not None
    return WyomingEndpoint(parts.hostname, port, listen, parts.query == "once")


def _proxy(parts: SplitResult, port: int) -> ProxyEndpoint | None:
    query = parse_qs(parts.query, keep_blank_values=True)
    if list(query) != ["upstream"] or len(query["upstream"]) != 1:
        return None
    upstream = urlsplit(query["upstream"][0])
    upstream_port = _host_port(upstream)
    if (
        upstream.scheme != "tcp"
        or not upstream_port  # None, or 0: no port to connect to
        or upstream.path not in ("", "/")
        or upstream.query
    ):
        return None
    assert parts.hostname is not None and upstream.hostname is not None
    return ProxyEndpoint(parts.hostname, port, upstream.hostname, upstream_port)


E = TypeVar("E", WyomingEndpoint, ProxyEndpoint)


class WyomingService(Generic[E]):
    """What a Wyoming source (:class:`~monitor.wyoming.source.WyomingSource`) and a relay
    (:class:`~monitor.wyoming.relay.ProxyServer`) share: the endpoint they are named by, the
    port they bound, whether they announce it, and how long they wait before a retry."""

    def __init__(
        self,
        endpoint: E,
        *,
        backoff_initial_seconds: float = 0.5,
        backoff_max_seconds: float = 30.0,
        zeroconf: bool = False,
        sleep: Callable[[float], Awaitable[None]],
        rng: random.Random | None = None,
    ) -> None:
        self.endpoint: E = endpoint
        self.name = str(endpoint)
        self.backoff_initial_seconds = backoff_initial_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self.zeroconf = zeroconf  # announce the server we run on mDNS
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.port = endpoint.port  # the bound port once serving (differs when 0 was asked)

    def backoff_seconds(self, attempt: int) -> float:
        """Delay before retry ``attempt`` (1-based), as every source waits."""
        return backoff_seconds(
            self._rng, attempt, self.backoff_initial_seconds, self.backoff_max_seconds
        )

    @contextlib.asynccontextmanager
    async def _served(self, handler: HandlerFactory) -> AsyncIterator[E]:
        """Our Wyoming server for the block; yields the endpoint with the port bound (the one
        the OS chose for 0), which the log lines name."""
        host, port = self.endpoint.host, self.endpoint.port
        async with serving(self.name, host, port, handler, zeroconf=self.zeroconf) as bound:
            self.port = bound
            yield dataclasses.replace(self.endpoint, port=bound)
