"""The daemon as a Wyoming proxy in front of a real upstream, for the tests.

``async with proxied_daemon(db, upstream_port) as daemon`` builds the pipeline from the config a
user would write (``wyoming-proxy://127.0.0.1:0?upstream=…``, no Prometheus, no zeroconf),
runs it in this process, and yields once the proxy serves; leaving the block stops it and keeps
its summary. With ``relay=True`` the layout of the systemd units and the add-on: ``voxmeter
relay`` in a process of its own serves the proxy (on a free port) and the pipeline here measures
what it hands over the channel (``relay.socket``).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.daemon.build import build_pipeline
from monitor.daemon.pipeline import Pipeline, RunSummary
from monitor.settings.config import load_config
from monitor.settings.sections import Config
from monitor.store.database import open_store
from monitor.wyoming.proxy import WyomingProxySource
from tests.realparts import stop_process
from tests.realparts.mosquitto import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]


@dataclass
class ProxiedDaemon:
    pipeline: Pipeline
    source: WyomingProxySource
    summary: RunSummary | None = None  # once stopped
    relay: subprocess.Popen[bytes] | None = None  # the relay process, with relay=True
    relay_port: int = 0
    relay_command: tuple[str, ...] = ()

    async def kill_relay(self) -> None:
        """SIGKILL the relay process and start it again at once (as systemd and the add-on
        do); returns once it listens. The measuring side subscribes again by itself."""
        assert self.relay is not None
        self.relay.kill()
        self.relay.wait()
        self.relay = subprocess.Popen(self.relay_command, cwd=REPO)
        await asyncio.to_thread(wait_for_port, self.relay_port, timeout_seconds=60)

    @property
    def port(self) -> int:
        return self.relay_port or self.source.port


@contextlib.asynccontextmanager
async def proxied_daemon(
    db: Path,
    upstream_port: int,
    prepare: Callable[[Pipeline], None] | None = None,
    overrides: Sequence[str] = (),
    *,
    relay: bool = False,
) -> AsyncIterator[ProxiedDaemon]:
    """A running proxy daemon on ``db`` relaying to ``upstream_port``; ``prepare`` sees the
    pipeline before it starts (a fault drill injects its fault there); ``overrides`` are more
    ``--set`` values for the measuring side and the relay process (``protect.mode=always``)."""
    upstream = f"tcp://127.0.0.1:{upstream_port}"
    port = free_port() if relay else 0
    folder = Path(tempfile.mkdtemp(prefix="vxrelay-"))  # a Unix socket's path is short
    settings = [
        f"daemon.source=wyoming-proxy://127.0.0.1:{port}?upstream={upstream}",
        f"daemon.db={db}",
        "prometheus.enabled=false",
        "wyoming.zeroconf=false",
    ]
    if relay:
        settings.append(f"relay.socket={folder / 'relay.sock'}")
    config = load_config(None, [*settings, *overrides])
    # the relay reads the same keys ([protect] too) and ignores the measuring side's others
    arguments = [item for setting in [*settings, *overrides] for item in ("--set", setting)]
    command = (sys.executable, "-m", "monitor.cli", "relay", *arguments)
    daemon: ProxiedDaemon | None = None
    process = subprocess.Popen(command, cwd=REPO) if relay else None
    try:
        if process is not None:
            await asyncio.to_thread(wait_for_port, port, timeout_seconds=60)
        async with _running(db, config, prepare) as daemon:
            if process is not None:
                daemon.relay, daemon.relay_port, daemon.relay_command = process, port, command
            yield daemon
    finally:
        stop_process(daemon.relay if daemon is not None and daemon.relay else process)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.asynccontextmanager
async def _running(
    db: Path, config: Config, prepare: Callable[[Pipeline], None] | None
) -> AsyncIterator[ProxiedDaemon]:
    with open_store(db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[])
        source = pipeline.source
        assert isinstance(source, WyomingProxySource)
        if prepare is not None:
            prepare(pipeline)
        daemon = ProxiedDaemon(pipeline, source)
        running = asyncio.get_running_loop().create_task(pipeline.run())
        try:
            async with asyncio.timeout(120):
                while not source.port or (source.channel and not source.relay_connected):
                    if running.done():  # failed to start: its error, not a timeout
                        running.result()
                    await asyncio.sleep(0.05)
            yield daemon
        finally:
            pipeline.stop("test over")
            daemon.summary = await running
