"""Latency the Wyoming proxy adds from ``audio-stop`` to ``transcript``, against direct, same run.

A real pocketsphinx speech-to-text service (tests/realparts/wyoming_upstreams.py) runs in its
own process and prints, for each utterance, when the ``audio-stop`` reached it and when its
``transcript`` left (CLOCK_MONOTONIC: one clock for every process). Each corpus utterance (its
first second) is sent twice, on a new connection each time as Home Assistant's pipeline does:
directly and through the proxy, the order alternating. Before the ``audio-stop``, a ``describe``
waits until the service has decoded the audio so far (unpaced audio would queue behind the
decoder, which holds the GIL, and delay the stop's arrival by seconds). The client's latency
minus the service's own time is what the way there and back costs; the proxy's *added*
latency is that cost through the proxy minus the direct one, utterance by utterance. The proxy
runs in this process with its measuring side busy as in the daemon (decode, resample, WebRTC
VAD, windower, a short window at each ``audio-stop``). Transcripts must be the same both ways.

Two process layouts. ``--layout inprocess`` (default): the proxy runs in this process, on the
measuring side's event loop, as ``voxmeter run`` alone does. ``--layout relay``: the proxy is
``voxmeter relay`` in a process of its own (as the systemd units and the add-on run it) and the
measuring side here subscribes to it over the local channel (monitor/wyoming/channel.py), as
``voxmeter run`` with ``relay.socket`` does; the relay process's resident memory (VmRSS at the
end, VmHWM its peak) and CPU seconds are recorded too.

``--protect`` (with ``--layout relay``): the relay process anonymises every utterance
(``[protect] mode = always``, McAdams, α ~ U[0.5, 0.9]) and each chunk's trip through the
anonymiser is timed inside it (bench/relay_timed.py: wall and the relay thread's CPU seconds,
p50/p95/max per 64 ms chunk, and the ``audio-stop`` that flushes the last frames); transcripts
then differ from the direct ones (the upstream hears another voice) and are only counted.

Run: ``python -m bench wyoming_proxy [--layout relay [--protect]]`` (``VOXMETER_BENCH_UTTERANCES``,
default 200) → bench/results/wyoming_proxy.json (wyoming_relay.json, wyoming_relay_protect.json)
and one summary line. Targets: p95 added ≤ 5 ms in-process; ≤ 2 ms and a relay RSS ≤ 40 MB with
the relay process; with protection p95 ≤ 20 ms per chunk (issue 30).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe

from bench.common import CORPUS, RESULTS_DIR, Run
from monitor.audio.file import read_audio
from monitor.audio.vad import WebRtcVad
from monitor.audio.windows import Windower
from monitor.wyoming.proxy import ProxyEndpoint, WyomingProxySource

RESULTS = {
    "inprocess": RESULTS_DIR / "wyoming_proxy.json",
    "relay": RESULTS_DIR / "wyoming_relay.json",
    "relay-protect": RESULTS_DIR / "wyoming_relay_protect.json",
}
UTTERANCE_SECONDS = 1.0  # a short command; pocketsphinx decodes it in ~0.7 s of CPU
CHUNK_SAMPLES = 1024  # 64 ms, wyoming-satellite's and Home Assistant's chunk
TARGET_P95_MS = {"inprocess": 5.0, "relay": 2.0, "relay-protect": 20.0}
TARGET_RELAY_RSS_MB = 40.0
ROOT = Path(__file__).resolve().parents[1]


def utterances(count: int) -> list[bytes]:
    """The first second of ``count`` corpus files (sorted), as 16-bit 16 kHz PCM."""
    files = sorted(CORPUS.glob("*/*.flac"))[:count]
    if len(files) < count:
        raise SystemExit(f"need {count} corpus files at {CORPUS} (set VOXMETER_CORPUS)")
    pcm = []
    for path in files:
        audio, _ = read_audio(path)
        head = audio[: round(UTTERANCE_SECONDS * 16000)]
        pcm.append((np.clip(head, -1, 1) * 32767).astype("<i2").tobytes())
    return pcm


async def transcribe(port: int, pcm: bytes) -> tuple[float, str]:
    """Send one utterance as Home Assistant does; seconds from audio-stop to transcript."""
    fmt = {"rate": 16000, "width": 2, "channels": 1}
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe(language="en").event())
        await client.write_event(AudioStart(**fmt).event())
        step = CHUNK_SAMPLES * 2
        for i in range(0, len(pcm), step):
            await client.write_event(AudioChunk(audio=pcm[i : i + step], **fmt).event())
        await client.write_event(Describe().event())  # a barrier: answered once the audio is
        while (event := await client.read_event()) is not None and event.type != "info":
            pass  # decoded, so the service is idle when the audio-stop comes, as when it
        started = time.perf_counter()  # keeps up with audio streamed in real time
        await client.write_event(AudioStop().event())
        while (event := await client.read_event()) is not None:
            if event.type == "transcript":
                return time.perf_counter() - started, str(event.data.get("text", ""))
    raise RuntimeError("the service closed the connection without a transcript")


async def measuring_side(source: WyomingProxySource, counts: dict[str, int]) -> None:
    """The daemon's front end on the proxy's frames, on this event loop."""
    vad, windower = WebRtcVad(), Windower(3.0)
    async for frame in source.frames():
        chunks = vad.process(frame)
        if frame.utterance_end:
            chunks += vad.flush()
        windows = [w for c in chunks for w in windower.process(c)]
        if frame.utterance_end:
            windows += windower.close_turn()
        counts["windows"] += len(windows)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _proc(pid: int) -> dict[str, float]:
    """The relay process's resident memory (MB, now and peak) and CPU seconds so far."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    kib = {line.split(":")[0]: int(line.split()[1]) for line in status if line.startswith("Vm")}
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {
        "rss_mb": round(kib["VmRSS"] / 1024, 1),
        "peak_rss_mb": round(kib["VmHWM"] / 1024, 1),
        "cpu_seconds": round((int(fields[11]) + int(fields[12])) / ticks, 2),
    }


@contextlib.asynccontextmanager
async def proxy(
    layout: str, upstream: int, relay: dict[str, Any]
) -> AsyncIterator[tuple[WyomingProxySource, int]]:
    """The proxy's port and the measuring side's source, in the layout asked for; ``relay``
    gets the relay process's figures at the end (and its chunk timings, protecting)."""
    if layout == "inprocess":
        source = WyomingProxySource(ProxyEndpoint("127.0.0.1", 0, "127.0.0.1", upstream))
        yield source, 0  # its port is known once it serves
        return
    port, folder = _free_port(), Path(tempfile.mkdtemp(prefix="vxbench-"))
    channel, timings = folder / "relay.sock", folder / "timings.json"
    spec = f"wyoming-proxy://127.0.0.1:{port}?upstream=tcp://127.0.0.1:{upstream}"
    command = ["monitor.cli", "relay"]
    if layout == "relay-protect":
        command = ["bench.relay_timed", "--set", "protect.mode=always"]
    process = subprocess.Popen(
        [sys.executable, "-m", *command, "--set", f"daemon.source={spec}",
         "--set", f"relay.socket={channel}", "--set", "wyoming.zeroconf=false",
         "--set", "logging.level=warning"],
        cwd=ROOT, env={**os.environ, "VOXMETER_BENCH_CHUNK_TIMINGS": str(timings)},
    )  # fmt: skip
    try:
        while True:  # listening
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            await asyncio.sleep(0.05)
        yield WyomingProxySource(ProxyEndpoint("127.0.0.1", port, "127.0.0.1", upstream),
                                 channel=channel), port  # fmt: skip
        relay.update(_proc(process.pid))
    finally:
        process.terminate()
        process.wait()
        if timings.exists():
            relay["transform_ms"] = _timings(json.loads(timings.read_text()))
        shutil.rmtree(folder, ignore_errors=True)


def _timings(seconds: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """p50/p95/max in ms of each timed event kind, wall and CPU."""
    return {
        kind: {"count": len(clocks["wall"])}
        | {
            clock: {
                q: round(float(np.percentile(np.asarray(v) * 1000, p)), 3)
                for q, p in (("p50", 50), ("p95", 95), ("max", 100))
            }
            for clock, v in clocks.items()
        }
        for kind, clocks in seconds.items()
        if clocks["wall"]
    }


async def run(count: int, layout: str = "inprocess") -> dict[str, Any]:
    pcm = utterances(count)
    service = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.realparts.wyoming_upstreams",
        "asr",
        "--timings",
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    assert service.stdout is not None
    try:
        port = int((await service.stdout.readline()).split()[1])
        relay: dict[str, Any] = {}
        async with proxy(layout, port, relay) as (source, proxy_port):
            counts = {"windows": 0}
            side = asyncio.get_running_loop().create_task(measuring_side(source, counts))
            while not (proxy_port or source.port):
                await asyncio.sleep(0.01)
            ports = {"direct": port, "proxy": proxy_port or source.port}
            seen: dict[str, list[float]] = {"direct": [], "proxy": []}
            cost: dict[str, list[float]] = {"direct": [], "proxy": []}
            mismatches = 0
            for i, audio in enumerate(pcm):
                texts = {}
                for arm in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
                    latency, texts[arm] = await transcribe(ports[arm], audio)
                    arrived, sent = map(float, (await service.stdout.readline()).split()[1:])
                    seen[arm].append(latency)
                    cost[arm].append(latency - (sent - arrived))
                mismatches += texts["direct"] != texts["proxy"]
            await asyncio.sleep(0.5)  # the measuring side takes the last utterance
            source.close()
            await side
    finally:
        service.terminate()
        await service.wait()
    added = np.array(cost["proxy"]) - np.array(cost["direct"])
    ms = 1000.0

    def pct(values: Any, q: float) -> float:
        return round(float(np.percentile(np.asarray(values) * ms, q)), 3)

    return {
        "layout": layout,
        "utterances": count,
        "utterance_seconds": UTTERANCE_SECONDS,
        "added_ms": {"p50": pct(added, 50), "p95": pct(added, 95), "max": pct(added, 100)},
        "transport_ms": {arm: {"p50": pct(v, 50), "p95": pct(v, 95)} for arm, v in cost.items()},
        "audio_stop_to_transcript_ms": {
            arm: {"p50": pct(v, 50), "p95": pct(v, 95)} for arm, v in seen.items()
        },
        "transcripts_differing": mismatches,
        "measured_windows": counts["windows"],
        "dropped_seconds": source.dropped_seconds,
        "target_p95_ms": TARGET_P95_MS[layout],
        **({"relay_process": relay} if relay else {}),
        **({"target_relay_rss_mb": TARGET_RELAY_RSS_MB} if layout == "relay" else {}),
        "machine": {
            "python": platform.python_version(),
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        },
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench wyoming_proxy")
    parser.add_argument("--layout", choices=["inprocess", "relay"], default="inprocess")
    parser.add_argument("--protect", action="store_true", help="the relay process anonymises")
    args = parser.parse_args(argv or [])
    if args.protect and args.layout != "relay":
        parser.error("--protect needs --layout relay")
    layout = "relay-protect" if args.protect else args.layout
    count = int(os.environ.get("VOXMETER_BENCH_UTTERANCES", "200"))
    record = Run(
        RESULTS[layout].stem, command="python -m bench wyoming_proxy " + " ".join(argv or [])
    )
    results = asyncio.run(run(count, layout))
    record.figures.update(results)
    record.target(
        "added latency p95, ms", results["added_ms"]["p95"], "<=", results["target_p95_ms"]
    )
    if "target_relay_rss_mb" in results:
        rss = results["relay_process"]["rss_mb"]
        record.target("relay process RSS, MB", rss, "<=", results["target_relay_rss_mb"])
    record.write(path=RESULTS[layout])
    added, direct = results["added_ms"], results["audio_stop_to_transcript_ms"]["direct"]
    relay = results.get("relay_process")
    memory = f"relay RSS {relay['rss_mb']} MB (peak {relay['peak_rss_mb']}); " if relay else ""
    chunk = (relay or {}).get("transform_ms", {}).get("audio-chunk")
    if chunk:
        memory += (
            f"anonymiser per chunk p95 {chunk['wall']['p95']:.2f} ms wall, "
            f"{chunk['cpu']['p95']:.2f} ms CPU (target ≤ 20); "
        )
    print(
        f"wyoming proxy ({layout}): {count} utterances, added audio-stop→transcript latency "
        f"p50 {added['p50']:.2f} ms, p95 {added['p95']:.2f} ms (target ≤ "
        f"{TARGET_P95_MS[layout]:g}); {memory}direct p50 {direct['p50']:.0f} ms; transcripts "
        f"differing {results['transcripts_differing']}; measured windows "
        f"{results['measured_windows']}; load {results['machine']['load_average_1m_at_end']}"
    )


if __name__ == "__main__":
    main()
