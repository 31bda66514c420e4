"""One daemon in front of several real Wyoming upstreams, in this process, for the tests.

``async with household_daemon(db, {"wake": port1, "stt": port2}) as daemon`` builds the pipeline
from the config a user would write (``audio.sources = ["wake=wyoming-proxy://127.0.0.1:0?…",
…]``, no Prometheus, no zeroconf), runs it, and yields once every proxy serves;
``daemon.port("wake")`` is where that proxy listens. :class:`Recorder` (tests/fakes.py)
keeps the events; :class:`Settled` tells when every closed window has gone through the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.event import Event

from monitor.daemon.build import build_pipeline
from monitor.daemon.pipeline import Pipeline, RunSummary
from monitor.settings.config import load_config
from monitor.sources.several import SourceSet
from monitor.store.database import open_store
from monitor.wyoming.proxy import WyomingProxySource
from tests.fakes import Recorder


@dataclass
class Household:
    pipeline: Pipeline
    proxies: dict[str, WyomingProxySource]
    recorder: Recorder
    summary: RunSummary | None = None  # once stopped
    tracked: int = 0  # windows the tracker took or left (every closed window passes it)
    assigned: int = 0  # of which it gave a track (each one reaches the ledger)

    def port(self, name: str) -> int:
        return self.proxies[name].port

    async def settled(self, timeout_seconds: float = 300) -> None:
        """Until every stream has ended and every window closed so far is in the ledger."""
        pipeline = self.pipeline
        async with asyncio.timeout(timeout_seconds):
            while (
                pipeline.streams.live
                or self.tracked < pipeline._next_index
                or len(self.recorder.scored()) < self.assigned
                or any(q.qsize() for q in pipeline.queues.values())
            ):
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def household_daemon(
    db: Path,
    upstreams: dict[str, int],
    *overrides: str,
    prepare: Callable[[Pipeline], None] | None = None,
) -> AsyncIterator[Household]:
    """A running daemon on ``db`` with one proxy per ``name → upstream port`` (one proxy alone
    is ``daemon.source``; several are ``audio.sources``)."""
    specs = [
        f"{name}=wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:{port}"
        for name, port in upstreams.items()
    ]
    where = f"daemon.source={specs[0]}" if len(specs) == 1 else f"audio.sources={specs!r}"
    config = load_config(
        None,
        [
            where.replace("'", '"'),
            f"daemon.db={db}",
            "prometheus.enabled=false",
            "wyoming.zeroconf=false",
            *overrides,
        ],
    )
    with open_store(db) as store:
        recorder = Recorder()
        pipeline = build_pipeline(config, store=store, exporters=[recorder])
        source = pipeline.source
        named = source.named if isinstance(source, SourceSet) else {next(iter(upstreams)): source}
        proxies = {name: p for name, p in named.items() if isinstance(p, WyomingProxySource)}
        assert list(proxies) == list(upstreams)
        daemon = Household(pipeline, proxies, recorder)
        process = pipeline.tracker.process

        def counting(window: Any) -> Any:
            tracked, expired = process(window)
            daemon.tracked += 1
            daemon.assigned += tracked is not None
            return tracked, expired

        pipeline.tracker.process = counting  # type: ignore[method-assign]
        if prepare is not None:
            prepare(pipeline)
        running = asyncio.get_running_loop().create_task(pipeline.run())
        try:
            async with asyncio.timeout(120):
                while not all(p.port for p in proxies.values()):
                    if running.done():  # failed to start: its error, not a timeout
                        running.result()
                    await asyncio.sleep(0.05)
            yield daemon
        finally:
            pipeline.stop("test over")
            daemon.summary = await running


async def paced_talk(
    port: int, events: list[Event], *, chunk_pause_seconds: float, answers: int = 1
) -> list[Event]:
    """Send ``events`` as a satellite streams (a pause after each audio chunk) and read
    ``answers`` events back."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        for event in events:
            await client.write_event(event)
            if AudioChunk.is_type(event.type):
                await asyncio.sleep(chunk_pause_seconds)
        replies = []
        async with asyncio.timeout(120):
            for _ in range(answers):
                reply = await client.read_event()
                if reply is None:
                    break
                replies.append(reply)
        return replies
