"""The rooms benchmark's targets, met or missed, for this release and a baseline checkout.

A baseline (another checkout of voxmeter, e.g. the previous release) runs the same
``python -m bench tracking --rooms`` options in a subprocess with its own PYTHONPATH, on the
same machine in the same run, so both releases meet the same load; its per-condition summaries
stand beside this release's in the result (``figures.baseline``) and the "no worse" targets
compare with them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import Run

ROOM_TARGETS: tuple[tuple[str, str, float], ...] = (
    ("member_right", ">=", 0.90),
    ("mixed_attributed", "<=", 0.03),
    ("shown_tracks_per_stranger", "<=", 1.2),
    ("disclosure_share_within_0.1", ">=", 0.95),
    ("stranger_to_member", "<=", 0.0),
)
TARGETS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "room16": ROOM_TARGETS,
    "tv16": ROOM_TARGETS,
    "dry8": (("member_right", ">=", 0.90), ("stranger_to_member", "<=", 0.0)),
    "dry16": (("stranger_to_member", "<=", 0.0),),
}
"""Per condition: (measure, op, bound). dry16 is also held to the baseline's member_right."""


def measure(summary: Mapping[str, Any], name: str) -> float:
    """A summary's measure by its target name."""
    if name == "disclosure_share_within_0.1":
        return float(summary["disclosure_error_lid"]["share_within_0.1"])
    return float(summary[name])


def own_options(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--rooms`` and the baseline's own options (and their values): what
    the baseline checkout runs."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--baseline", "--baseline-release"):
            skip = True
        elif arg != "--rooms" and not arg.startswith(("--baseline=", "--baseline-release=")):
            out.append(arg)
    return out


def baseline_summaries(checkout: Path, argv: Sequence[str], release: str) -> dict[str, Any]:
    """Run the rooms benchmark of ``checkout`` (its own code on PYTHONPATH) with ``argv`` and
    return its per-condition summaries under the ``release`` it is named by."""
    with tempfile.TemporaryDirectory(prefix="voxmeter-rooms-baseline-") as tmp:
        out = Path(tmp) / "rooms.json"
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        command = [sys.executable, "-m", "bench", "tracking", "--rooms", *argv, "--out", str(out)]
        subprocess.run(command, cwd=checkout, env=env, check=True)
        result = json.loads(out.read_text())
    conditions = result.get("figures", result).get("conditions", {})
    return {"release": release, "conditions": {k: v["summary"] for k, v in conditions.items()}}


def record_targets(
    run: Run, conditions: Mapping[str, Any], baseline: Mapping[str, Any] | None
) -> None:
    """Every condition's targets on ``run`` (``conditions``: name@backend → its summary),
    each noting the baseline's value where it ran the condition too."""
    before = (baseline or {}).get("conditions", {})
    for key, summary in conditions.items():
        condition = key.split("@")[0]
        old = before.get(key)
        for name, op, bound in TARGETS.get(condition, ()):
            note = "" if old is None else f"baseline {measure(old, name):.4f}"
            run.target(f"{key} {name}", measure(summary, name), op, bound, note=note)
        if condition == "dry16" and old is not None:
            run.target(
                f"{key} member_right no worse than the baseline",
                measure(summary, "member_right"),
                ">=",
                measure(old, "member_right"),
            )
