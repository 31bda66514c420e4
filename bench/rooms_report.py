"""The rooms benchmark's targets, met or missed, for this release and a baseline checkout, and
the embedding backends side by side.

The targets are the first backend's (``--backends``, the configured embedding first); every
other backend listed runs the same households, and :func:`backend_rows` sets them beside it,
condition by condition, so the embedding that tracks best is read off one table. A baseline
(another checkout of voxmeter, e.g. the previous release) runs the same ``python -m bench
tracking --rooms`` options with the first backend only, on its own daemon with this
release's harness (the same households, conditions and seeds), in a subprocess beside this
release's run on the same machine, so both releases meet the same load; its
per-condition summaries stand beside this release's in the result (``figures.baseline``) and
the "no worse" targets compare with them.
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
    ("stranger_to_member", "<=", 0.01),
)
DRY_TARGETS: tuple[tuple[str, str, float], ...] = (
    ("member_right", ">=", 0.95),
    ("stranger_to_member", "<=", 0.01),
    ("shown_tracks_per_stranger", "<=", 1.2),
)
TARGETS: dict[str, tuple[tuple[str, str, float], ...]] = {
    "room16": (("member_right", ">=", 0.95), *ROOM_TARGETS[1:]),
    "tv16": ROOM_TARGETS,
    "dry8": (("member_right", ">=", 0.90), ("stranger_to_member", "<=", 0.01)),
    "dry16": DRY_TARGETS,
    "home16": DRY_TARGETS,
    "alike16": DRY_TARGETS,
}
"""Per condition: (measure, op, bound). dry16 is also held to the baseline's member_right;
a stranger's window given to a member costs under half a point with 8 streams per condition."""
BACKEND_MEASURES: tuple[str, ...] = (
    "member_right",
    "mixed_attributed",
    "shown_tracks_per_stranger",
    "disclosure_share_within_0.1",
    "stranger_to_member",
    "unattributed_share",
    "cpu_per_audio_second",
)
"""What the backends are compared on: the targets' measures and the pipeline's CPU."""
BACKENDS_HELP = (
    "embedding backends, comma-separated: the targets are the first's, the others are compared "
    "with it per condition (figures.backends)"
)


def measure(summary: Mapping[str, Any], name: str) -> float:
    """A summary's measure by its target name."""
    if name == "disclosure_share_within_0.1":
        return float(summary["disclosure_error_lid"]["share_within_0.1"])
    return float(summary[name])


def lid_errors(summary: Mapping[str, Any]) -> str:
    """The pooled-disclosure error's median and 95th percentile, as the README's table shows."""
    e = summary["disclosure_error_lid"]
    return f"{e['median']:.2f} / {e['p95']:.2f} bit"


def own_options(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--rooms`` and the baseline's own options (and their values), with
    ``--backends`` cut to its first: what the baseline checkout runs (only the first backend's
    targets compare with it)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--baseline", "--baseline-release"):
            skip = True
        elif arg.startswith("--backends=") or (out and out[-1] == "--backends"):
            out.append(arg.split(",")[0])
        elif arg != "--rooms" and not arg.startswith(("--baseline=", "--baseline-release=")):
            out.append(arg)
    return out


class Baseline:
    """The rooms benchmark run on the ``checkout``'s daemon (its ``monitor`` package, this
    release's ``bench``, so both meet the same households, conditions and seeds) with
    ``argv``, started at once in a subprocess: it runs beside this release's run on the other
    core (each measures its own process CPU), and :meth:`summaries` waits for it."""

    def __init__(self, checkout: Path, argv: Sequence[str], release: str) -> None:
        from monitor.features.weights import weights_dir

        self.release = release
        self._tmp = tempfile.TemporaryDirectory(prefix="voxmeter-rooms-baseline-")
        overlay = Path(self._tmp.name) / "path"
        overlay.mkdir()
        (overlay / "monitor").symlink_to(checkout.resolve() / "monitor")
        (overlay / "bench").symlink_to(Path(__file__).resolve().parent)
        self._out = Path(self._tmp.name) / "rooms.json"
        env = {**os.environ, "PYTHONPATH": str(overlay), "VOXMETER_MODELS": str(weights_dir())}
        command = [sys.executable, "-m", "bench", "tracking", "--rooms", *argv, "--out",
                   str(self._out)]  # fmt: skip
        self._process = subprocess.Popen(command, cwd=overlay, env=env)

    def summaries(self) -> dict[str, Any]:
        """Its per-condition summaries (per seed under ``seeds``) under its release's name."""
        try:
            if self._process.wait() != 0:
                raise SystemExit(
                    f"bench tracking --rooms: the baseline failed ({self._process.args})"
                )
            result = json.loads(self._out.read_text())
        finally:
            self._tmp.cleanup()
        figures = result.get("figures", result)

        def summaries(results: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v["summary"] for k, v in results.get("conditions", {}).items()}

        seeds = {str(figures.get("seed")): summaries(figures)}
        seeds |= {seed: summaries(r) for seed, r in figures.get("seeds", {}).items()}
        return {"release": self.release, "conditions": summaries(figures), "seeds": seeds}


def seed_baseline(baseline: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The baseline's summaries of ``seed``'s households (none when it did not run them)."""
    conditions = baseline.get("seeds", {}).get(str(seed), {})
    return {"release": baseline.get("release"), "conditions": conditions}


def record_targets(
    run: Run,
    conditions: Mapping[str, Any],
    baseline: Mapping[str, Any] | None,
    *,
    label: str = "",
) -> None:
    """Every condition's targets on ``run`` (``conditions``: name@backend → its summary, the
    first backend's first), each noting the baseline's value where it ran the condition too;
    the other backends' conditions are compared in :func:`backend_rows` instead."""
    before = (baseline or {}).get("conditions", {})
    first = next(iter(conditions), "@").split("@")[1]
    for key, summary in conditions.items():
        condition, backend = key.split("@")
        if backend != first:
            continue
        old = before.get(key)
        for name, op, bound in TARGETS.get(condition, ()):
            note = "" if old is None else f"baseline {measure(old, name):.4f}"
            run.target(f"{label}{key} {name}", measure(summary, name), op, bound, note=note)
        if condition == "dry16" and old is not None:
            run.target(
                f"{label}{key} member_right no worse than the baseline",
                measure(summary, "member_right"),
                ">=",
                measure(old, "member_right"),
            )


def backend_rows(conditions: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per condition and backend (``conditions``: name@backend → its summary), the
    backends of a condition beside each other in the order they ran: the
    :data:`BACKEND_MEASURES` of each."""
    order: dict[str, int] = {}
    for key in conditions:
        order.setdefault(key.split("@")[0], len(order))
    keys = sorted(conditions, key=lambda k: order[k.split("@")[0]])  # stable: backends in order
    return [
        {"row": key} | {name: measure(conditions[key], name) for name in BACKEND_MEASURES}
        for key in keys
    ]


def with_backends(results: Mapping[str, Any], conditions: Mapping[str, Any]) -> dict[str, Any]:
    """``results`` with the :func:`backend_rows` first (before the conditions in full) when
    several backends ran (``conditions``: name@backend → its summary)."""
    if len({key.split("@")[1] for key in conditions}) < 2:
        return dict(results)
    return {"seed": results["seed"], "backends": backend_rows(conditions)} | dict(results)
