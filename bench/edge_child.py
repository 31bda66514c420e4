"""What the edge benchmark's parts share: the settings, the child process that replays a stream
through one release's daemon (its own ``bench_daemon``, its own ``PYTHONPATH``), the scraper of
its Prometheus endpoint, CPU cgroups, and the previous release's worktree."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

REPO = Path(__file__).resolve().parent.parent
OLD = os.environ.get("VOXMETER_BENCH_OLD", "b469d62")
#: Each release's default attacker: the previous release's ECAPA int8, this one's CAM++ int8.
OLD_BACKEND = os.environ.get("VOXMETER_BENCH_OLD_BACKEND", "ecapa-int8")
NEW_BACKEND = os.environ.get("VOXMETER_BENCH_NEW_BACKEND", "campplus-int8")
QUICK = os.environ.get("VOXMETER_BENCH_EDGE_QUICK") == "1"
BACKENDS = ("ecapa",) if QUICK else ("ecapa", "campplus")
SIZES = (1_000,) if QUICK else (1_000, 100_000)
QUOTA_SECONDS = float(os.environ.get("VOXMETER_BENCH_QUOTA_SECONDS", 60 if QUICK else 600))
QUOTA_SHARE = 0.25
SCRAPE_EVERY = float(os.environ.get("VOXMETER_BENCH_SCRAPE_EVERY", 1.0))
QUOTA_SCRAPE_EVERY = 15.0  # Prometheus's default scrape_interval
CGROUP_NAME = f"voxmeter-bench-{os.getpid()}"

# Runs in the tree under test (its own bench_daemon): one paced replay, one JSON line out.
CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import bench.bench_daemon as bd
if (Path(bd.__file__).parents[1] / "monitor" / "exporters").is_dir():  # this release's layout
    from monitor.exporters.prometheus import PrometheusExporter
else:  # the previous release's
    from monitor.daemon.exporters.prometheus import PrometheusExporter
from monitor.features.base import set_embedding_backend

backend, n, folder, stream = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else []
start_server = PrometheusExporter.start_server
exporters = []
def announce(self):
    server = start_server(self)
    exporters.append(self)
    print("PORT", server.server_port, flush=True)
    return server
PrometheusExporter.start_server = announce
set_embedding_backend(backend)
bd._dims()
bd.PACED_TEMPLATES = n
folder.mkdir(parents=True)
db = bd._database(folder, bd._calibration()[0])
wall = time.monotonic()
probe, summary, cpu = bd._run(db, stream, fast=False, extra=extra)
latency = np.array(probe.latencies) * 1e3
minute = max(1, int(round(len(latency) * 60 / max(summary.audio_seconds, 1))))
print("RESULT " + json.dumps({
    "audio_seconds": round(summary.audio_seconds, 1),
    "windows": summary.windows,
    "latency_p50_ms": round(float(np.percentile(latency, 50)), 1),
    "latency_p95_ms": round(float(np.percentile(latency, 95)), 1),
    "latency_max_ms": round(float(latency.max()), 1),
    "latency_first_minute_p95_ms": round(float(np.percentile(latency[:minute], 95)), 1),
    "latency_last_minute_p95_ms": round(float(np.percentile(latency[-minute:], 95)), 1),
    "cpu_share_per_audio_second": round(cpu / summary.audio_seconds, 4),
    # releases before the audio-loss accounting counted frames, later ones seconds
    "frames_dropped": getattr(summary, "frames_dropped", None),
    "dropped_seconds": getattr(summary, "dropped_seconds", None),
    "wall_seconds": round(time.monotonic() - wall, 1),
    "overrides": extra,
    # releases before issue 27 do not shed (None)
    "shed_seconds": {
        f: exporters[0].registry.get_sample_value("voxmeter_shed_seconds_total", {"feature": f})
        for f in ("phone", "turns")
    } if exporters else None,
}), flush=True)
"""


class Scraper:
    """GET /metrics every ``every`` s from this (otherwise idle) process; latencies in ms."""

    def __init__(self, port: int, every: float = SCRAPE_EVERY) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every = every
        self.latencies: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    response.read()
            except OSError:
                self.errors += 1
                continue
            self.latencies.append(1e3 * (time.perf_counter() - started))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join()
        values = np.array(self.latencies or [np.nan])
        return {
            "scrapes": len(self.latencies),
            "scrape_p50_ms": round(float(np.percentile(values, 50)), 2),
            "scrape_p99_ms": round(float(np.percentile(values, 99)), 2),
            "scrape_max_ms": round(float(values.max()), 2),
            "scrape_errors": self.errors,
        }


def _cgroup(share: float, *, suffix: str = "") -> Path:
    """A CPU cgroup limited to ``share`` of one core (v2 cpu.max, else v1 CFS quota) and given
    it: the largest weight, so that other jobs on a shared machine do not take it (a device
    whose assistant leaves the monitor a quarter of a core)."""
    v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")
    period = 100_000
    if (v2 / "cgroup.controllers").is_file() and "cpu" in (v2 / "cgroup.controllers").read_text():
        group = v2 / f"{CGROUP_NAME}{suffix}"
        group.mkdir()
        (group / "cpu.max").write_text(f"{int(share * period)} {period}")
        (group / "cpu.weight").write_text("10000")
    else:
        group = v1 / f"{CGROUP_NAME}{suffix}"
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(share * period)))
        (group / "cpu.shares").write_text("262144")
    return group


def run_child(
    tree: Path,
    backend: str,
    n: int,
    folder: Path,
    stream: Path,
    *,
    cgroup: Path | None = None,
    scrape_every: float = SCRAPE_EVERY,
    extra: list[str] | None = None,
    prefix: list[str] | None = None,
    started: threading.Event | None = None,
) -> dict[str, Any]:
    """One paced replay in a child process running ``tree``'s code, scraped meanwhile
    (``extra``: config overrides; ``prefix``: e.g. taskset; ``started`` is set once the
    daemon measures)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def join_cgroup() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    command = [sys.executable, "-c", CHILD, backend, str(n), str(folder), str(stream)]
    command = [*(prefix or []), *command, json.dumps(extra or [])]
    child = subprocess.Popen(
        command, cwd=tree, env=env, stdout=subprocess.PIPE, text=True, preexec_fn=join_cgroup
    )
    scraper, result = None, None
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("PORT ") and scraper is None:
            scraper = Scraper(int(line.split()[1]), scrape_every)
            if started is not None:
                started.set()
        elif line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    if started is not None:
        started.set()  # also when it failed: nobody waits for ever
    if child.wait() != 0 or result is None:
        raise RuntimeError(f"{tree}: paced replay failed (exit {child.returncode})")
    if scraper is not None:
        result.update(scraper.stop())
    return result


def _long_stream(stream: Path, seconds: float, folder: Path, *, name: str = "long.wav") -> Path:
    """``seconds`` of ``stream`` (looped as needed)."""
    audio, rate = sf.read(stream, dtype="int16")
    loops = int(np.ceil(seconds * rate / len(audio)))
    target = folder / name
    sf.write(target, np.tile(audio, loops)[: int(seconds * rate)], rate, subtype="PCM_16")
    return target


def _old_tree(folder: Path, rev: str = OLD) -> Path:
    """The release ``rev`` as a detached worktree, with this checkout's model files."""
    tree = folder / "old"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), rev],
        check=True,
    )
    # the same ONNX graphs and checkpoints (not in git): else ``auto`` would fall back to torch
    (tree / "models" / "weights").symlink_to((REPO / "models" / "weights").resolve())
    return tree


def _machine() -> dict[str, Any]:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or platform.machine(),
    )
    return {"cpu_model": model, "platform": platform.platform(), "cpus": os.cpu_count()}


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
