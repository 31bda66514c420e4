"""Announce a Wyoming server of ours on mDNS as ``_wyoming._tcp.local.``, as Home Assistant's own
Wyoming services do, so Home Assistant offers it under *Discovered* without typing host and port.

Announcing is best effort: a machine without multicast (a container on a bridge without it, a
sandbox) logs one warning and the server runs on, reachable by host and port as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket

from zeroconf import Error as ZeroconfError
from zeroconf import IPVersion
from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

logger = logging.getLogger(__name__)

SERVICE_TYPE = "_wyoming._tcp.local."
MDNS_GROUP = "224.0.0.251"
STOP_SECONDS = 2.0
"""Longest wait for the goodbye packets at stop (the daemon's exit must not hang on them)."""


def instance_name(port: int, host_name: str | None = None) -> str:
    """``voxmeter-HOST-PORT``: unique per server on the network (Home Assistant's unique id of a
    discovered entry is this name with the service's), in the characters DNS labels allow."""
    host = re.sub(r"[^a-zA-Z0-9-]+", "-", (host_name or socket.gethostname()).split(".")[0])
    return f"voxmeter-{host.strip('-') or 'host'}-{port}"


def announced_address(bind_host: str) -> str:
    """The IPv4 address to announce for a server bound to ``bind_host``: itself, or for a
    wildcard (``0.0.0.0``, ``::``, empty) the address of the interface that multicast leaves by
    (the way the ``wyoming`` package's zeroconf helper finds it; no packet is sent)."""
    if bind_host not in ("", "0.0.0.0", "::"):
        return socket.gethostbyname(bind_host)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((MDNS_GROUP, 1))
            return str(probe.getsockname()[0])
        except OSError:  # no route for multicast: only this machine can reach us
            return "127.0.0.1"


def service_info(port: int, address: str, *, name: str | None = None) -> AsyncServiceInfo:
    """The record set announcing one Wyoming server at ``address``:``port``."""
    label = name or instance_name(port)
    return AsyncServiceInfo(
        SERVICE_TYPE,
        f"{label}.{SERVICE_TYPE}",
        addresses=[socket.inet_aton(address)],
        port=port,
        server=f"{label}.local.",
    )


class Announcement:
    """One server on mDNS from :meth:`start` to :meth:`stop`; ``interfaces`` as zeroconf takes
    them (default: all), so tests can stay on loopback."""

    def __init__(
        self,
        port: int,
        bind_host: str,
        *,
        name: str | None = None,
        interfaces: list[str] | None = None,
    ) -> None:
        self.info = service_info(port, announced_address(bind_host), name=name)
        self._interfaces = interfaces
        self._zeroconf: AsyncZeroconf | None = None

    async def start(self) -> None:
        """Register the service; a network that refuses multicast is one warning."""
        try:
            if self._interfaces is None:
                self._zeroconf = AsyncZeroconf(ip_version=IPVersion.V4Only)
            else:
                self._zeroconf = AsyncZeroconf(
                    interfaces=self._interfaces, ip_version=IPVersion.V4Only
                )
            await self._zeroconf.async_register_service(self.info)
        except (OSError, ZeroconfError) as error:
            logger.warning("zeroconf: cannot announce %s (%s)", self.info.name, error)
            await self.stop()
            return
        logger.info("zeroconf: announced %s on port %d", self.info.name, self.info.port)

    async def stop(self) -> None:
        zc, self._zeroconf = self._zeroconf, None
        if zc is None:
            return
        with contextlib.suppress(Exception):  # a goodbye that cannot be sent changes nothing
            async with asyncio.timeout(STOP_SECONDS):
                await zc.async_unregister_all_services()
                await zc.async_close()
