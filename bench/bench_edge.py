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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import Run
from bench.edge_beside import _quota_run, bench_assistant
from bench.edge_child import QUICK, REPO, _long_stream, _old_tree, run_child
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
        record = Run(
            f"edge-int8{suffix}",
            command=f"VOXMETER_BENCH_INT8={INT8_VARIANT} python -m bench.bench_edge int8",
        )
        record.figures["results"] = [bench_int8(b) for b in INT8_BACKENDS]
        record.write()
        return
    if sys.argv[1:] == ["phone"]:
        name = os.environ.get("VOXMETER_BENCH_PHONE_OUT") or (
            "edge-phone.json"
            if not os.environ.get("VOXMETER_BENCH_PHONE_DECODERS")
            else ("edge-phone-more.json")
        )
        record = Run(name.removesuffix(".json"), command="python -m bench.bench_edge phone")
        record.figures.update({"split": "test", "results": bench_phone()})
        record.write()
        return
    if sys.argv[1:] == ["phone_backends"]:
        from bench.phone_disclosure import bench_phone_backends

        record = Run("phone-model-disclosure", command="python -m bench.bench_edge phone_backends")
        bench_phone_backends(record)
        record.write()
        return
    if sys.argv[1:] == ["profile"]:
        record = Run("edge-profile", command="python -m bench.bench_edge profile")
        record.figures["profile"] = bench_profile()
        record.write()
        return
    if sys.argv[1:] == ["features"]:
        record = Run("edge-features", command="python -m bench.bench_edge features")
        record.figures["features"] = bench_features()
        record.write()
        return
    from bench.bench_daemon import _speech

    if sys.argv[1:] not in ([], ["side"], ["quota"], ["assistant"]):
        raise SystemExit(f"unknown part {' '.join(sys.argv[1:])!r}")
    parts = sys.argv[1:] or ["side", "quota", "assistant"]
    folder = Path(tempfile.mkdtemp(prefix="voxmeter-bench-edge-"))
    try:
        stream, kind = _speech(folder)
        common = {"speech_source": kind}
        if "side" in parts:
            record = Run("edge-quick" if QUICK else "edge",
                         command="python -m bench.bench_edge side")  # fmt: skip
            rows = _side_by_side(stream, folder)
            record.figures.update({**common, "new_overrides": NEW_FULL, "side_by_side": rows,
                                   "target_bounds": TARGETS})  # fmt: skip
            _side_targets(record, rows)
            record.write()
        if "quota" in parts:
            record = Run("edge-quota", command="python -m bench.bench_edge quota")
            quota = _quota_run(stream, folder)
            record.figures.update({**common, "quota_run": quota})
            lag = quota["new"]["latency_p95_ms"] / 1000
            record.target("embedding lag p95 at 25 % of a core, s", lag, "<=", 2.0)
            record.target("audio dropped, s", quota["new"]["dropped_seconds"], "<=", 0)
            record.write()
        if "assistant" in parts:
            record = Run("edge-assistant", command="python -m bench.bench_edge assistant")
            beside = bench_assistant(stream, folder)
            record.figures.update({**common, "assistant_beside": beside})
            record.target(
                "transcript latency p95 rise beside the daemon",
                beside["p95_rise_vs_mean_alone"],
                "<=",
                TARGETS["assistant_latency_p95_rise"],
                note="one shared core; the rise against the mean of the runs alone",
            )
            record.write()
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


def _side_targets(record: Run, rows: list[dict[str, Any]]) -> None:
    """The side-by-side run's targets: CPU per audio second, the ratio to the previous
    release in the same run, latency and scrape time."""
    by_row = {r["row"]: r for r in rows}
    cpu = {k: r["new"]["cpu_share_per_audio_second"] for k, r in by_row.items()}
    record.target("CPU per audio second, every feature, ECAPA", cpu["ecapa, all features"],
                  "<=", TARGETS["cpu_share_per_audio_second_all_features"])  # fmt: skip
    record.target("CPU per audio second, every feature, CAM++", cpu["campplus, all features"],
                  "<=", TARGETS["cpu_share_per_audio_second_all_features"])  # fmt: skip
    record.target("CPU per audio second, phone feature off, ECAPA", cpu["ecapa, phone off"],
                  "<=", TARGETS["cpu_share_per_audio_second_phone_off"])  # fmt: skip
    old = by_row["ecapa, all features"]["old"]["cpu_share_per_audio_second"]
    record.target("CPU of this release over the previous one's, same run (ECAPA)",
                  round(cpu["ecapa, all features"] / old, 2), "<=",
                  TARGETS["cpu_ratio_new_to_old"])  # fmt: skip
    for key, label in (("ecapa, all features", "ECAPA"), ("campplus, all features", "CAM++")):
        record.target(f"end of window to metric p95, ms, {label}",
                      by_row[key]["new"]["latency_p95_ms"], "<=",
                      TARGETS["latency_p95_ms_n1000"])  # fmt: skip
    worst = max(r["new"]["scrape_p99_ms"] for r in rows)
    record.target("scrape p99, ms (worst row)", worst, "<=", TARGETS["scrape_p99_ms"])


if __name__ == "__main__":
    main()
