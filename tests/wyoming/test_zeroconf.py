"""Our Wyoming servers on mDNS: a real zeroconf browser on this machine (multicast on loopback)
sees each one as Home Assistant's discovery would, with its port, and sees it leave."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest
from zeroconf import IPVersion, ServiceStateChange, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from monitor.sources.spec import open_source
from monitor.wyoming.proxy import WyomingProxySource
from monitor.wyoming.source import WyomingSource
from monitor.wyoming.zeroconf import (
    SERVICE_TYPE,
    announced_address,
    instance_name,
    service_info,
)
from tests.realparts.mosquitto import free_port


def test_the_service_info_is_a_wyoming_service_at_our_address_and_port() -> None:
    info = service_info(10300, "192.0.2.7", name="voxmeter-kitchen-10300")
    assert info.type == "_wyoming._tcp.local."
    assert info.name == "voxmeter-kitchen-10300._wyoming._tcp.local."
    assert info.port == 10300
    assert info.parsed_addresses() == ["192.0.2.7"]
    assert instance_name(10300, "Kitchen Pi.lan") == "voxmeter-Kitchen-Pi-10300"
    assert announced_address("127.0.0.1") == "127.0.0.1"
    wildcard = announced_address("0.0.0.0")
    assert wildcard != "0.0.0.0" and socket.inet_aton(wildcard)


@contextlib.asynccontextmanager
async def _browse(seen: asyncio.Queue[tuple[str, ServiceStateChange]]) -> AsyncIterator[Zeroconf]:
    browser_zc = AsyncZeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)

    def on_change(
        zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        seen.put_nowait((name, state_change))

    browser = AsyncServiceBrowser(browser_zc.zeroconf, [SERVICE_TYPE], handlers=[on_change])
    try:
        yield browser_zc.zeroconf
    finally:
        await browser.async_cancel()
        await browser_zc.async_close()


async def _next(
    seen: asyncio.Queue[tuple[str, ServiceStateChange]], name: str, change: ServiceStateChange
) -> None:
    async with asyncio.timeout(15):
        while (await seen.get()) != (name, change):
            pass


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wyoming-proxy", "wyoming-listen"])
def test_a_browser_on_this_machine_sees_each_wyoming_server_come_and_go(kind: str) -> None:
    port = free_port()
    spec = (
        f"wyoming-proxy://127.0.0.1:{port}?upstream=tcp://127.0.0.1:{free_port()}"
        if kind == "wyoming-proxy"
        else f"wyoming-listen://127.0.0.1:{port}"
    )
    name = f"{instance_name(port)}.{SERVICE_TYPE}"

    async def main() -> None:
        seen: asyncio.Queue[tuple[str, ServiceStateChange]] = asyncio.Queue()
        async with _browse(seen) as zc:
            source = open_source(spec, zeroconf=True)
            assert isinstance(source, WyomingProxySource | WyomingSource)
            frames = source.frames()
            serving = asyncio.get_running_loop().create_task(anext(frames, None))
            await _next(seen, name, ServiceStateChange.Added)
            info = AsyncServiceInfo(SERVICE_TYPE, name)
            assert await info.async_request(zc, 3000)
            assert info.port == port and info.parsed_addresses() == ["127.0.0.1"]
            source.close()
            await serving
            await frames.aclose()
            await _next(seen, name, ServiceStateChange.Removed)

    asyncio.run(main())


def test_without_zeroconf_nothing_is_announced() -> None:
    source = open_source(f"wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:{free_port()}")
    assert isinstance(source, WyomingProxySource) and not source.zeroconf
    listen = open_source("wyoming-listen://127.0.0.1:0", zeroconf=True)
    assert isinstance(listen, WyomingSource) and listen.zeroconf
    client = open_source("wyoming://127.0.0.1:1", zeroconf=True)  # a client serves nothing
    assert isinstance(client, WyomingSource) and not client.zeroconf
