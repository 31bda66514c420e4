"""A daemon with Home Assistant discovery on a real mosquitto, fed by a Wyoming client, for the
enrolment tests; and streams of corpus speakers nobody enrolled (built in a temporary folder,
never in the repository)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomqtt
import soundfile as sf
from wyoming.asr import Transcribe

from monitor.corpus import scan_corpus
from monitor.daemon.build import build_pipeline
from monitor.daemon.pipeline import Pipeline
from monitor.settings.config import load_config
from monitor.store.database import open_store
from monitor.wyoming.proxy import WyomingProxySource
from monitor.wyoming.source import WyomingSource
from tests.daemon_corpus import _concatenate
from tests.exporters.test_exporter_mqtt import Subscriber, subscribed
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker, free_port
from tests.wyoming.wyoming_peers import conversation, stream_to, talk

DEVICE = "lounge"
PREFIX = f"voxmeter/{DEVICE}"
DISCOVERY = "ha-enrol"
COMMAND_SAMPLES = 6 * 16000  # through the proxy: one spoken command's length per request
REPO = Path(__file__).resolve().parents[2]


def config_topic(component: str, object_id: str) -> str:
    return f"{DISCOVERY}/{component}/{DEVICE}/{object_id}/config"


@functools.cache
def _corpus(corpus_root: Path) -> Any:
    return scan_corpus(corpus_root)


def utterances(corpus_root: Path, speaker: str) -> list[Path]:
    return [u.path for u in _corpus(corpus_root).utterances_of(speaker)]


def newcomers(corpus_root: Path, rows: Sequence[dict[str, str]], taken: Sequence[str]) -> list[str]:
    """Adult corpus speakers nobody enrolled, the most speech first (the corpus holds about
    35-43 s per speaker)."""
    adults = [r["speaker"] for r in rows if int(r["age"]) >= 18 and r["speaker"] not in taken]
    seconds = {s: sum(sf.info(p).duration for p in utterances(corpus_root, s)) for s in adults}
    return sorted(adults, key=lambda s: -seconds[s])


def speech_of(corpus_root: Path, speaker: str, first: int, count: int, target: Path) -> Path:
    files = utterances(corpus_root, speaker)
    assert len(files) >= first + count, (speaker, len(files))
    return _concatenate(files[first : first + count], target)


def two_voices(corpus_root: Path, speakers: Sequence[str], target: Path) -> Path:
    """Utterances of two speakers in turn, as two people talking."""
    files = [utterances(corpus_root, s) for s in speakers]
    return _concatenate([f for pair in zip(*files, strict=False) for f in pair][:10], target)


def progress_of(sub: Subscriber) -> dict[str, Any]:
    """The latest *Enrolment progress* state (empty before the first)."""
    states = sub.on(f"{PREFIX}/enrolment")
    return states[-1] if states and states[-1] else {}


def run_command(broker: MosquittoBroker, db: Path, *sources: str) -> list[str]:
    """``voxmeter run`` as the add-on starts it: ``db`` (created when missing), Home Assistant
    discovery on ``broker``, and ``sources`` (``daemon.source=…`` or ``audio.sources=…``)."""
    settings = [
        *sources,
        f"daemon.db={db}",
        f"daemon.device_id={json.dumps(DEVICE)}",
        "daemon.stats_interval_seconds=1",
        "prometheus.enabled=false",
        "wyoming.zeroconf=false",
        "mqtt.enabled=true",
        f"mqtt.port={broker.port}",
        "homeassistant.discovery=true",
        f"homeassistant.discovery_prefix={DISCOVERY}",
    ]
    return [sys.executable, "-m", "monitor.cli", "run", *[
        item for setting in settings for item in ("--set", setting)]]  # fmt: skip


@contextlib.contextmanager
def daemon_process(command: Sequence[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` running as a process of its own, its one-line-per-event log in ``log`` (read
    it when a test fails); stopped at the end."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=out)
        try:
            yield process
        finally:
            stop_process(process)


@dataclass
class EnrolDaemon:
    pipeline: Pipeline
    sub: Subscriber
    port: int

    async def command(self, topic: str, payload: bytes | str, *, retain: bool = False) -> None:
        body = payload.encode() if isinstance(payload, str) else payload
        await self.sub.client.publish(f"{PREFIX}/enrolment/{topic}", body, qos=1, retain=retain)

    def progress(self) -> dict[str, Any]:
        return progress_of(self.sub)

    async def until(self, phase: str, timeout: float = 60) -> dict[str, Any]:
        await self.sub.wait(lambda: self.progress().get("phase") == phase, timeout)
        return self.progress()

    async def until_reason(self, words: str, timeout: float = 30) -> dict[str, Any]:
        await self.sub.wait(lambda: words in self.progress().get("reason", ""), timeout)
        return self.progress()

    async def speak(self, path: Path) -> None:
        """Stream ``path`` as one Wyoming client (to the listener, or through the proxy as a
        satellite asks for a transcript), and return once every window of it went through the
        ledger (a later command must not meet its last windows)."""
        pipeline = self.pipeline
        if isinstance(pipeline.source, WyomingProxySource):
            audio, _ = sf.read(path, dtype="int16")
            for start in range(0, len(audio), COMMAND_SAMPLES):  # one request per command
                piece = audio[start : start + COMMAND_SAMPLES]
                replies = await talk(
                    pipeline.source.port, conversation(piece, Transcribe().event())
                )
                assert replies and replies[0].type == "transcript", replies
        else:
            await stream_to("127.0.0.1", self.port, path, timeout_seconds=120)

        def idle() -> bool:
            return not pipeline.streams.live and all(q.empty() for q in pipeline.queues.values())

        calm = 0
        async with asyncio.timeout(120):
            while calm < 6:  # idle through three stats intervals: no window in a stage's hands
                calm = calm + 1 if idle() else 0
                await asyncio.sleep(0.5)

    async def serving(self) -> None:
        """Until the source listens (the proxy binds its port when the pipeline runs)."""
        source = self.pipeline.source
        async with asyncio.timeout(120):
            while isinstance(source, WyomingProxySource) and not source.port:
                await asyncio.sleep(0.05)

    def config(self, component: str, object_id: str) -> dict[str, Any] | None:
        found = self.sub.on(config_topic(component, object_id))
        return found[-1] if found else None


@contextlib.asynccontextmanager
async def enrol_daemon(
    db: Path,
    broker: MosquittoBroker,
    overrides: Sequence[str] = (),
    *,
    retained: Mapping[str, bytes] | None = None,
) -> AsyncIterator[EnrolDaemon]:
    """The daemon running; ``retained`` commands (topic under ``<prefix>/enrolment/`` →
    payload) are left on the broker before it starts."""
    port = free_port()
    config = load_config(
        None,
        [
            f"daemon.source=wyoming-listen://127.0.0.1:{port}",
            f"daemon.db={db}",
            "daemon.exit_at_end=false",
            f"daemon.device_id={json.dumps(DEVICE)}",
            "daemon.stats_interval_seconds=1",
            "prometheus.enabled=false",
            "mqtt.enabled=true",
            f"mqtt.port={broker.port}",
            "homeassistant.discovery=true",
            f"homeassistant.discovery_prefix={DISCOVERY}",
            "load.shed_lag_seconds=0",
            "wyoming.zeroconf=false",
            *overrides,
        ],
    )
    async with subscribed(broker, "#") as sub:
        for topic, payload in (retained or {}).items():
            await sub.client.publish(f"{PREFIX}/enrolment/{topic}", payload, qos=1, retain=True)
        with open_store(db) as store:
            pipeline = build_pipeline(config, store=store)
            assert isinstance(pipeline.source, WyomingSource | WyomingProxySource)
            running = asyncio.create_task(pipeline.run())
            try:
                yield EnrolDaemon(pipeline, sub, port)
            finally:
                pipeline.stop("test over")
                with contextlib.suppress(aiomqtt.MqttError):
                    async with asyncio.timeout(30):
                        await running


def windows_of(pipeline: Pipeline, track: str) -> int:
    last = pipeline.last.get(track)
    return 0 if last is None else last.windows
