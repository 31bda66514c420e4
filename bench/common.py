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
