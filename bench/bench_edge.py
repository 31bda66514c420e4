"""The edge budget (issues 20, 27): this release against the previous one, side by side in one run.

1. ``side``: paced corpus replay through the whole daemon (``bench_daemon``'s replay: VAD, f0,
   phone and the embedding, tracking, scoring against N = 10³ templates, ledger, Prometheus),
   for the previous release (a ``git worktree`` of ``VOXMETER_BENCH_OLD``, default ``4a3c7ff``,
   run with ``PYTHONPATH`` pointing there and the same ``models/weights``) and for this
   checkout, interleaved: ECAPA and CAM++ with every feature, ECAPA with the phone feature
   off. This release runs with ``NEW_FULL`` (no shedding, normal priority: every feature
   measured, as the old one). End of window → metric p50/p95, process CPU per audio second
   (after warm-up) and the ratio new/old; the child's Prometheus endpoint is scraped every
   ``SCRAPE_EVERY`` s (scrape p50/p99).
2. ``quota``: both releases at the same time, each in a cgroup of its own given and limited to
   25 % of one core (v1 ``cpu.cfs_quota_us`` + the largest ``cpu.shares``, or v2 ``cpu.max`` +
   ``cpu.weight``), over ``VOXMETER_BENCH_QUOTA_SECONDS`` (600) of paced speech with their
   default settings (this release: idle priority, shedding): audio dropped, latency over the
   first and the last minute (lag growth), CPU per audio second, seconds shed, scraped every
   15 s as Prometheus does.
3. ``assistant``: a real speech-to-text service (pocketsphinx over Wyoming,
   tests/realparts/wyoming_upstreams.py) and the daemon (default settings) pinned to one core
   (``taskset -c VOXMETER_BENCH_ASSISTANT_CORE``): requests of 3 s streamed in real time, the
   latency from ``audio-stop`` to ``transcript`` without the daemon, beside it, and without
   it again.

Each measurement is its own child process (``python -c`` with the tree's own ``bench_daemon``),
so the two releases never share a process. Run: ``python -m bench.bench_edge`` (all three) or
``python -m bench.bench_edge side|quota|assistant`` → bench/results/edge.json,
edge-quota.json, edge-assistant.json; ``features``, ``profile``, ``int8``, ``phone`` are the
issue-20 measurements. ``VOXMETER_BENCH_EDGE_QUICK=1`` for a short development run. The
machine's cores are shared: load and the CPU model are recorded.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, write_results
from bench.edge_beside import _quota_run, bench_assistant
from bench.edge_child import OLD, QUICK, REPO, _head, _long_stream, _machine, _old_tree, run_child
from bench.edge_parts import (
    INT8_BACKENDS,
    INT8_VARIANT,
    bench_features,
    bench_int8,
    bench_phone,
    bench_profile,
)


def main() -> None:
    if sys.argv[1:] == ["int8"] and "VOXMETER_BENCH_INT8" not in os.environ:
        from bench.bench_int8 import main as int8_main  # the shipped int8 graphs (issue 27)

        int8_main()
        return
    if sys.argv[1:] == ["int8"]:  # quantiser variants, quantised here (issue 20's exploration)
        suffix = "" if INT8_VARIANT == "u8s8" else f"-{INT8_VARIANT}"
        write_results(RESULTS_DIR / f"edge-int8{suffix}.json", {
            "benchmark": "edge budget: static int8 embedding networks (issue 20)",
            "command": f"VOXMETER_BENCH_INT8={INT8_VARIANT} python -m bench.bench_edge int8",
            "cpu": platform.processor() or platform.machine(),
            "results": [bench_int8(b) for b in INT8_BACKENDS],
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })  # fmt: skip
        return
    if sys.argv[1:] == ["phone"]:
        name = os.environ.get("VOXMETER_BENCH_PHONE_OUT") or (
            "edge-phone.json"
            if not os.environ.get("VOXMETER_BENCH_PHONE_DECODERS")
            else ("edge-phone-more.json")
        )
        write_results(RESULTS_DIR / name, {
            "benchmark": "edge budget: all-phone decoders, MeanD at 3 s and CPU (issue 20)",
            "command": "python -m bench.bench_edge phone",
            "split": "test",
            "results": bench_phone(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })  # fmt: skip
        return
    if sys.argv[1:] == ["profile"]:
        write_results(RESULTS_DIR / "edge-profile.json", {
            "benchmark": "edge budget: where the daemon's CPU goes (issue 20)",
            "command": "python -m bench.bench_edge profile",
            "profile": bench_profile(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })  # fmt: skip
        return
    if sys.argv[1:] == ["features"]:
        write_results(RESULTS_DIR / "edge-features.json", {
            "benchmark": "edge budget: per-extractor CPU per 3 s window (issue 20)",
            "features": bench_features(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        })  # fmt: skip
        return
    from bench.bench_daemon import _speech

    if sys.argv[1:] not in ([], ["side"], ["quota"], ["assistant"]):
        raise SystemExit(f"unknown part {' '.join(sys.argv[1:])!r}")
    parts = sys.argv[1:] or ["side", "quota", "assistant"]
    folder = Path(tempfile.mkdtemp(prefix="voxmeter-bench-edge-"))
    try:
        stream, kind = _speech(folder)
        common = {"speech_source": kind, "machine": _machine(), "release": _head()}
        if "side" in parts:
            write_results(RESULTS_DIR / ("edge-quick.json" if QUICK else "edge.json"), {
                "benchmark": "edge budget: this release and the previous one side by side "
                "(issue 27)",
                "command": "python -m bench.bench_edge side",
                "old_release": OLD,
                "new_release": _head(),
                "new_overrides": NEW_FULL,
                **common,
                "side_by_side": _side_by_side(stream, folder),
                "targets": TARGETS,
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })  # fmt: skip
        if "quota" in parts:
            quota = _quota_run(stream, folder)
            write_results(RESULTS_DIR / "edge-quota.json", {
                "benchmark": "edge budget: 25 % of one core, paced speech (issue 27)",
                "command": "python -m bench.bench_edge quota",
                **common,
                "quota_run": quota,
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })  # fmt: skip
        if "assistant" in parts:
            write_results(RESULTS_DIR / "edge-assistant.json", {
                "benchmark": "edge budget: a speech-to-text service beside the daemon on one "
                "shared core (issue 27)",
                "command": "python -m bench.bench_edge assistant",
                **common,
                "assistant_beside": bench_assistant(stream, folder),
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            })  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)


NEW_FULL = ['load.measuring_priority="normal"', "load.shed_lag_seconds=0"]
"""This release in the side-by-side run: every feature measured (no shedding) at the priority
the previous release ran at, so the CPU and latency figures compare like with like."""
PHONE_OFF = ['features.enabled=["f0", "embedding"]']
SIDE_ROWS: list[tuple[str, str, list[str]]] = [
    ("ecapa, all features", "ecapa", []),
    ("campplus, all features", "campplus", []),
    ("ecapa, phone off", "ecapa", PHONE_OFF),
]
TARGETS = {
    "cpu_share_per_audio_second_all_features": 0.03,
    "cpu_share_per_audio_second_phone_off": 0.02,
    "cpu_ratio_new_to_old": 0.5,
    "latency_p95_ms_n1000": 100,
    "scrape_p99_ms": 20,
    "quota_latency_p95_s": 2.0,
    "quota_dropped_seconds": 0,
    "assistant_latency_p95_rise": 0.10,
}


def _side_by_side(stream: Path, folder: Path) -> list[dict[str, Any]]:
    """Each row: the previous release and this one, interleaved, N = 10³ (one child each)."""
    if QUICK:
        stream = _long_stream(stream, 30.0, folder, name="quick.wav")
    old = _old_tree(folder)
    rows = []
    try:
        for label, backend, extra in SIDE_ROWS[:1] if QUICK else SIDE_ROWS:
            row: dict[str, Any] = {"row": label, "backend": backend, "templates": 1_000}
            for release, tree, overrides in (
                ("old", old, extra),
                ("new", REPO, [*extra, *NEW_FULL]),
            ):
                out = folder / f"{release}-{label.replace(' ', '').replace(',', '-')}"
                load = round(os.getloadavg()[0], 2)
                row[release] = {
                    "load_average": load,
                    **run_child(tree, backend, 1_000, out, stream, extra=overrides),
                }
                print(f"{label} {release}: {row[release]}", flush=True)
            for key in ("latency_p50_ms", "latency_p95_ms", "cpu_share_per_audio_second"):
                row[f"ratio_{key}"] = round(row["new"][key] / row["old"][key], 3)
            rows.append(row)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)])
    return rows


if __name__ == "__main__":
    main()
