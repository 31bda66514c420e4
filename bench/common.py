"""What the front-end benchmarks share: where the corpus and the results live, and timing."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"
CORPUS = Path(
    os.environ.get(
        "VOXMETER_CORPUS", Path(__file__).resolve().parents[2] / "shared/data/speechocean762"
    )
)


def best_of(
    function: Callable[[], Any], repeats: int, *, cpu_clock: Callable[[], float] = time.process_time
) -> dict[str, float]:
    """Fastest of ``repeats`` runs in CPU seconds (``cpu_clock``) and in wall seconds: the
    machine's cores are shared, so the minimum is the figure least disturbed by neighbours."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = cpu_clock(), time.perf_counter()
        function()
        cpu.append(cpu_clock() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_seconds": min(cpu), "wall_seconds": min(wall)}


def write_results(path: Path, results: dict[str, Any]) -> None:
    """Write ``results`` as indented JSON, creating bench/results/ if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


SCHEMA_VERSION = 1

#: The CPU features a figure depends on (int8 dot products, wide vectors), as lscpu names them.
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def machine() -> dict[str, Any]:
    """The CPU a figure was taken on: model (``lscpu``), cores, and the features that matter."""
    import subprocess

    model, flags = "unknown", set()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name":
            model = value.strip()
        elif key.strip() == "Flags":
            flags = set(value.split())
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "cpu_features": [f for f in CPU_FEATURES if f in flags],
    }


def commit() -> str:
    """The checkout's commit (``git rev-parse HEAD``), ``unknown`` outside a git checkout."""
    import subprocess

    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


class Run:
    """One benchmark run in the common result schema.

    Created as the run starts (it reads the load average then), filled with figures and
    targets, written once at the end::

        run = Run("edge", command="python -m bench edge --fast")
        run.figures["cpu_per_speech_second"] = 0.028
        run.target("cpu_per_speech_second", 0.028, "<=", 0.03)
        run.write()                      # bench/results/edge.json
    """

    def __init__(self, benchmark: str, *, command: str) -> None:
        from datetime import UTC, datetime

        self.benchmark = benchmark
        self.command = command
        self.date = datetime.now(UTC).isoformat(timespec="seconds")
        self.load_start = list(os.getloadavg())
        self.figures: dict[str, Any] = {}
        self.targets: list[dict[str, Any]] = []

    def target(self, name: str, value: float, op: str, bound: float, *, note: str = "") -> bool:
        """Record ``value op bound`` (op: ``<=``, ``>=``, ``<``, ``>``) as met or missed."""
        met = {
            "<=": value <= bound,
            ">=": value >= bound,
            "<": value < bound,
            ">": value > bound,
        }[op]
        self.targets.append(
            {"name": name, "value": value, "op": op, "bound": bound, "met": bool(met), "note": note}
        )
        return bool(met)

    def record(self) -> dict[str, Any]:
        """The result as written: the common schema, figures last."""
        return {
            "schema": SCHEMA_VERSION,
            "benchmark": self.benchmark,
            "command": self.command,
            "commit": commit(),
            "date": self.date,
            **machine(),
            "load_average": {"start": self.load_start, "end": list(os.getloadavg())},
            "targets": self.targets,
            "figures": self.figures,
        }

    def write(self, name: str | None = None, *, path: Path | None = None) -> Path:
        """Write ``path``, else ``bench/results/<name or benchmark>.json``; return the path."""
        path = path or RESULTS_DIR / f"{name or self.benchmark}.json"
        write_results(path, self.record())
        return path


#: Tracking figures where more is better; every other bounded figure is a ceiling.
AT_LEAST = ("member_right", "purity", "disclosure_error_share")


def summary_targets(
    record: Run, groups: dict[str, Any], bounds: dict[str, Any], *, per_group: bool
) -> None:
    """Record each group's tracking summary (``groups[name]["summary"]``) against ``bounds``:
    one bound set for every group, or (``per_group``) the set named by the group's prefix
    before ``@`` (a room condition)."""
    for group, body in groups.items():
        these = bounds.get(group.split("@")[0], {}) if per_group else bounds
        summary = body["summary"]
        for key, bound in these.items():
            if key == "disclosure_error_share":
                value = summary["disclosure_error_lid"]["share_within_0.1"]
            elif key in summary:
                value = summary[key]
            else:
                continue
            op = ">=" if key in AT_LEAST else "<="
            record.target(f"{group}: {key}", round(value, 4), op, bound)
