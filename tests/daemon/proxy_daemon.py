"""The daemon as a Wyoming proxy in front of a real upstream, in this process, for the tests.

``async with proxied_daemon(db, upstream_port) as daemon`` builds the pipeline from the config a
user would write (``wyoming-proxy://127.0.0.1:0?upstream=…``, no Prometheus, no zeroconf),
runs it, and yields once the proxy serves; leaving the block stops it and keeps its summary.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.audio.wyoming_proxy import WyomingProxySource
from monitor.daemon.build import build_pipeline
from monitor.daemon.config import load_config
from monitor.daemon.pipeline import Pipeline, RunSummary
from monitor.store.database import open_store


@dataclass
class ProxiedDaemon:
    pipeline: Pipeline
    source: WyomingProxySource
    summary: RunSummary | None = None  # once stopped

    @property
    def port(self) -> int:
        return self.source.port


@contextlib.asynccontextmanager
async def proxied_daemon(
    db: Path,
    upstream_port: int,
    prepare: Callable[[Pipeline], None] | None = None,
    overrides: Sequence[str] = (),
) -> AsyncIterator[ProxiedDaemon]:
    """A running proxy daemon on ``db`` relaying to ``upstream_port``; ``prepare`` sees the
    pipeline before it starts (a fault drill injects its fault there); ``overrides`` are more
    ``--set`` values (``protect.mode=always``)."""
    upstream = f"tcp://127.0.0.1:{upstream_port}"
    config = load_config(
        None,
        [
            f"daemon.source=wyoming-proxy://127.0.0.1:0?upstream={upstream}",
            f"daemon.db={db}",
            "prometheus.enabled=false",
            "wyoming.zeroconf=false",
            *overrides,
        ],
    )
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
                while not source.port:
                    if running.done():  # failed to start: its error, not a timeout
                        running.result()
                    await asyncio.sleep(0.05)
            yield daemon
        finally:
            pipeline.stop("test over")
            daemon.summary = await running
