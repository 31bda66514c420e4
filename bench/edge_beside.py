"""The edge benchmark's runs beside something else: a speech-to-text service on one shared core
(``assistant``) and both releases each in a cgroup of 25 % of one core (``quota``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.edge_child import (
    NEW_BACKEND,
    OLD_BACKEND,
    QUICK,
    QUOTA_SCRAPE_EVERY,
    QUOTA_SECONDS,
    QUOTA_SHARE,
    REPO,
    _cgroup,
    _long_stream,
    _old_tree,
    run_child,
)

ASSISTANT_CORE = os.environ.get("VOXMETER_BENCH_ASSISTANT_CORE", "0")
ASSISTANT_UTTERANCES = int(
    os.environ.get("VOXMETER_BENCH_ASSISTANT_UTTERANCES", 8 if QUICK else 30)
)
ASSISTANT_SECONDS = 3.0  # a spoken request's length
CHUNK_SAMPLES = 1024  # 64 ms, Home Assistant's and wyoming-satellite's chunk


async def _transcribe_paced(client: Any, pcm: bytes) -> tuple[float, str]:
    """One request streamed in real time (64 ms chunks) as a satellite does; seconds from the
    ``audio-stop`` to the ``transcript`` (what the user waits for)."""
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioChunk, AudioStart, AudioStop

    fmt = {"rate": 16000, "width": 2, "channels": 1}
    await client.write_event(Transcribe(language="en").event())
    await client.write_event(AudioStart(**fmt).event())
    step = CHUNK_SAMPLES * 2
    began = time.perf_counter()
    for i in range(0, len(pcm), step):
        await client.write_event(AudioChunk(audio=pcm[i : i + step], **fmt).event())
        ahead = began + (i + step) / 2 / 16000 - time.perf_counter()
        if ahead > 0:
            await asyncio.sleep(ahead)
    started = time.perf_counter()
    await client.write_event(AudioStop().event())
    while (event := await client.read_event()) is not None:
        if event.type == "transcript":
            return time.perf_counter() - started, str(event.data.get("text", ""))
    raise RuntimeError("the speech-to-text service closed the connection without a transcript")


def _assistant_phase(port: int, requests: list[bytes]) -> dict[str, Any]:
    """Every request on one connection (its decoder loaded by a first, uncounted request)."""
    from wyoming.client import AsyncTcpClient

    async def phase() -> tuple[list[float], list[str]]:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await _transcribe_paced(client, requests[0])
            out = [await _transcribe_paced(client, pcm) for pcm in requests]
        return [latency for latency, _ in out], [text for _, text in out]

    cpu = _children_cpu()
    latencies, texts = asyncio.run(phase())
    ms = np.array(latencies) * 1e3
    return {
        "requests": len(ms),
        "latency_p50_ms": round(float(np.percentile(ms, 50)), 1),
        "latency_p95_ms": round(float(np.percentile(ms, 95)), 1),
        "latency_max_ms": round(float(ms.max()), 1),
        "texts": texts,
        "load_average": round(os.getloadavg()[0], 2),
        "cpu_seconds_of_finished_children": round(_children_cpu() - cpu, 1),
    }


def _children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


def bench_assistant(stream: Path, folder: Path) -> dict[str, Any]:
    """A real speech-to-text service (pocketsphinx over Wyoming, tests/realparts) and the
    daemon (paced corpus replay, ECAPA, N = 10³, its default priorities and shedding) pinned
    to one shared core with ``taskset``: request latency without the daemon, with it, and
    without it again (the load of the machine drifts; both 'without' phases are pooled)."""
    from bench.common import CORPUS
    from monitor.audio.file import read_audio

    files = sorted(CORPUS.glob("*/*.flac"))
    requests = []
    for path in files[:: max(1, len(files) // ASSISTANT_UTTERANCES)][:ASSISTANT_UTTERANCES]:
        audio = read_audio(path)[0][: int(ASSISTANT_SECONDS * 16000)]
        requests.append((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    pin = ["taskset", "-c", ASSISTANT_CORE]
    command = [*pin, sys.executable, "-m", "tests.realparts.wyoming_upstreams", "asr"]
    service = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert service.stdout is not None
    try:
        port = int(service.stdout.readline().split()[1])
        before = _assistant_phase(port, requests)
        print(f"assistant alone: {before}", flush=True)
        phase_seconds = len(requests) * (ASSISTANT_SECONDS + 0.5) + 60
        daemon_stream = _long_stream(stream, phase_seconds, folder, name="beside.wav")
        started = threading.Event()
        daemon: dict[str, Any] = {}

        def run_daemon() -> None:
            daemon.update(
                run_child(
                    REPO, NEW_BACKEND, 1_000, folder / "beside", daemon_stream,
                    scrape_every=QUOTA_SCRAPE_EVERY, prefix=pin, started=started,
                )
            )  # fmt: skip

        thread = threading.Thread(target=run_daemon, name="daemon-beside")
        thread.start()
        started.wait()
        beside = _assistant_phase(port, requests)
        print(f"assistant beside the daemon: {beside}", flush=True)
        thread.join()
        print(f"daemon beside the assistant: {daemon}", flush=True)
        after = _assistant_phase(port, requests)
        print(f"assistant alone again: {after}", flush=True)
    finally:
        service.terminate()
        service.wait()
    alone = np.array([before["latency_p95_ms"], after["latency_p95_ms"]])
    return {
        "core": ASSISTANT_CORE,
        "request_seconds": ASSISTANT_SECONDS,
        "alone_before": before,
        "beside_daemon": beside,
        "alone_after": after,
        "daemon": daemon,
        "p95_rise_vs_mean_alone": round(beside["latency_p95_ms"] / float(alone.mean()) - 1, 3),
        "same_transcripts": before["texts"] == beside["texts"] == after["texts"],
    }


def _quota_run(stream: Path, folder: Path) -> dict[str, Any]:
    """This release and the previous one (each its default attacker, N = 10³, default
    settings) at the same time, each in a cgroup of its own with QUOTA_SHARE of one core, over
    QUOTA_SECONDS of paced speech."""
    long_stream = _long_stream(stream, QUOTA_SECONDS, folder)
    load = round(os.getloadavg()[0], 2)
    old = _old_tree(folder)
    out: dict[str, Any] = {}
    groups: list[Path] = []
    backends = {"old": OLD_BACKEND, "new": NEW_BACKEND}

    def one(label: str, tree: Path) -> None:
        group = _cgroup(QUOTA_SHARE, suffix=label)
        groups.append(group)
        out[label] = run_child(
            tree, backends[label], 1_000, folder / f"quota-{label}", long_stream,
            cgroup=group, scrape_every=QUOTA_SCRAPE_EVERY,
        )  # fmt: skip
        print(f"quota {QUOTA_SHARE} {label}: {out[label]}", flush=True)

    try:
        threads = [
            threading.Thread(target=one, args=(label, tree), name=f"quota-{label}")
            for label, tree in (("old", old), ("new", REPO))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)])
        for group in groups:
            group.rmdir()
    return {
        **out,
        "cpu_quota_of_one_core": QUOTA_SHARE,
        "scrape_every_seconds": QUOTA_SCRAPE_EVERY,
        "load_average_at_start": load,
    }
