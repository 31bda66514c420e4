"""The benchmark pages' plots, where a curve says more than a table: CPU per stage, tracking
per room condition, the protection α trade-off. Small PNGs, drawn the same way every time
(Agg, fixed size and DPI, no timestamp in the file)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

SIZE_INCHES = (6.4, 3.2)
DPI = 90
METADATA = {"Software": None}  # no matplotlib version in the file


def _save(figure: Any, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=DPI, metadata=METADATA)
    plt.close(figure)


def cpu_per_stage(run: dict[str, Any], path: Path) -> None:
    """Horizontal bars: CPU of a core per audio second, per stage of the daemon."""
    stages = run["figures"]["profile"]["cpu_per_audio_second"]
    names = list(stages)[::-1]
    figure, axes = plt.subplots(figsize=SIZE_INCHES)
    axes.barh(names, [stages[n] for n in names], color="#4c72b0")
    axes.set_xlabel("CPU of one core per audio second")
    axes.tick_params(axis="y", labelsize=7)
    _save(figure, path)


def rooms_conditions(run: dict[str, Any], path: Path) -> None:
    """Grouped bars per room condition: windows given to the right member, mixed windows,
    strangers taken for members."""
    conditions = run["figures"]["conditions"]
    shown = ("member_right", "purity", "mixed_windows", "stranger_to_member")
    names = list(conditions)
    width = 0.8 / len(shown)
    figure, axes = plt.subplots(figsize=SIZE_INCHES)
    for index, key in enumerate(shown):
        values = [conditions[n]["summary"].get(key) or 0.0 for n in names]
        axes.bar([i + index * width for i in range(len(names))], values, width, label=key)
    ticks = [i + 0.4 - width / 2 for i in range(len(names))]
    slanted = len(names) > 4  # several backends' conditions: the labels would overlap
    axes.set_xticks(
        ticks, names, fontsize=8, rotation=30 if slanted else 0, ha="right" if slanted else "center"
    )
    axes.set_ylabel("share")
    axes.set_ylim(0, 1.05)
    axes.legend(fontsize=7, ncol=2)
    _save(figure, path)


def _alpha_order(alpha: str) -> float:
    """Fixed αs in increasing order, a range (drawn per utterance) after them."""
    try:
        return float(alpha)
    except ValueError:
        return float("inf")


def protection_alphas(run: dict[str, Any], path: Path) -> None:
    """The α trade-off: what the ignorant attacker still learns against the recogniser's
    word error rate, per α."""
    rows = sorted(run["figures"]["table"], key=lambda r: _alpha_order(str(r["alpha"])))
    alphas = [str(r["alpha"]) for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=SIZE_INCHES)
    left.plot(alphas, [r["ignorant_meand_ratio"] for r in rows], "o-", label="MeanD ratio")
    left.plot(alphas, [r["eer_ignorant"] for r in rows], "s-", label="EER")
    left.axhline(0.25, color="grey", linestyle=":", linewidth=1)
    left.axhline(0.35, color="grey", linestyle="--", linewidth=1)
    left.set_title("ignorant attacker", fontsize=9)
    left.set_xlabel("α")
    left.legend(fontsize=7)
    right.plot(alphas, [r["wer_rise_points"] for r in rows], "o-", color="#c44e52")
    right.axhline(5.0, color="grey", linestyle=":", linewidth=1)
    right.set_title("WER rise (points)", fontsize=9)
    right.set_xlabel("α")
    _save(figure, path)


def reference_set(run: dict[str, Any], path: Path) -> None:
    """Share of windows at the ceiling against the number of reference voices, measured and
    predicted, with the meaningful size marked."""
    figures = run["figures"]
    sizes = figures["sizes"]
    references = [s["references"] for s in sizes]
    figure, axes = plt.subplots(figsize=SIZE_INCHES)
    axes.plot(references, [s["saturated_share"] for s in sizes], "o-", label="measured")
    axes.plot(references, [s["predicted_saturated_share"] for s in sizes], "s--",
              label="predicted from the largest set")  # fmt: skip
    axes.axhline(figures["max_saturated_share"], color="grey", linestyle=":", linewidth=1)
    axes.axvline(figures["meaningful_references"], color="grey", linestyle="--", linewidth=1)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("reference voices N")
    axes.set_ylabel("windows at the ceiling")
    axes.set_ylim(0, 1.05)
    axes.legend(fontsize=7)
    _save(figure, path)


def population(run: dict[str, Any], path: Path) -> None:
    """Predicted against measured on held-out speakers by N: windows at the ceiling and the
    rank-1 rate (left), the per-window error in bits (right)."""
    rows = run["figures"]["validation"]
    sizes = [r["N"] for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=SIZE_INCHES)
    for key, name, mark in (("ceiling_share", "at the ceiling", "o"), ("rank1", "rank 1", "s")):
        measured = key + "_measured"
        predicted = key + "_predicted"
        left.plot(sizes, [r[measured] for r in rows], mark + "-", label=f"{name}, measured")
        left.plot(sizes, [r[predicted] for r in rows], mark + "--", label=f"{name}, model")
    left.set_xscale("log", base=2)
    left.set_xlabel("identities N")
    left.set_ylabel("share of windows")
    left.set_ylim(0, 1.05)
    left.legend(fontsize=6)
    right.plot(sizes, [r["lid_median_abs_error_bits"] for r in rows], "o-", label="model")
    right.plot(sizes, [r.get("draw_noise_bits", float("nan")) for r in rows], "s:",
               label="two measured sets")  # fmt: skip
    right.axhline(0.25, color="grey", linestyle=":", linewidth=1)
    right.set_xscale("log", base=2)
    right.set_xlabel("identities N")
    right.set_ylabel("median |error| (bits)")
    right.legend(fontsize=6)
    _save(figure, path)


DAY_POPULATIONS = ("1000", "1e+06", "8e+09")
DAY_COLOURS = ("#4c72b0", "#dd8452", "#55a868")


def population_day(run: dict[str, Any], path: Path) -> None:
    """Per backend (a panel each): the median speaker's bits against the seconds of commands
    pooled over a day, spoken (solid) and as a protected upstream received them against the
    strongest attacker (dashed), per N_pop; the default budget as a line."""
    figures = run["figures"]
    backends = [k for k, v in figures.items() if isinstance(v, dict) and "windows" in v]
    if not backends:  # a results file of the release before: nothing per backend to draw
        figure, axes = plt.subplots(figsize=SIZE_INCHES)
        axes.text(0.5, 0.5, "no day figure per backend: python -m bench population --day-only",
                  ha="center", va="center", fontsize=8)  # fmt: skip
        axes.set_axis_off()
        _save(figure, path)
        return
    columns = min(3, len(backends))
    rows = -(-len(backends) // columns)
    size = SIZE_INCHES if len(backends) == 1 else (3.3 * columns, 2.9 * rows)
    figure, panels = plt.subplots(rows, columns, figsize=size, sharey=True, squeeze=False)
    for axes, backend in zip(panels.flat, backends, strict=False):
        windows = figures[backend]["windows"]
        seconds = [w["median_seconds"] for w in windows]
        for key, colour in zip(DAY_POPULATIONS, DAY_COLOURS, strict=True):
            name = f"N_pop = {float(key):.0e}"
            axes.plot(seconds, [w[f"spoken_{key}"] for w in windows], "o-", color=colour,
                      markersize=3, label=f"{name}, spoken")  # fmt: skip
            axes.plot(seconds, [w[f"protected_{key}"] for w in windows], "s--", color=colour,
                      markersize=3, label=f"{name}, protected")  # fmt: skip
        axes.axhline(figures["default_budget_bits"], color="grey", linestyle=":", linewidth=1)
        axes.set_title(backend, fontsize=9)
        axes.set_xlabel("seconds of commands pooled", fontsize=8)
        axes.tick_params(labelsize=7)
    for axes in panels.flat[len(backends) :]:
        axes.set_visible(False)
    for axes in panels[:, 0]:
        axes.set_ylabel("combined LID (bits)", fontsize=8)
    panels.flat[0].legend(fontsize=5)
    _save(figure, path)


#: results file → its plot (docs/benchmarks/images/<name>.png).
PLOTS: dict[str, Callable[[dict[str, Any], Path], None]] = {
    "edge-profile": cpu_per_stage,
    "rooms": rooms_conditions,
    "protect-alphas": protection_alphas,
    "reference-set": reference_set,
    "population": population,
    "population-day": population_day,
}
