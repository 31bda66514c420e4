"""Draw the Home Assistant add-on's icon.png (128×128) and logo.png (250×100): a level meter
of bars rising to a budget line, the picture of what voxmeter measures.

    python scripts/draw_addon_images.py    # writes deploy/homeassistant-addon/voxmeter/*.png
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

ADDON = Path(__file__).resolve().parents[1] / "deploy" / "homeassistant-addon" / "voxmeter"
DPI = 100
BLUE, AMBER, RED, INK = "#1e88e5", "#ffb300", "#e53935", "#263238"
BARS = (0.30, 0.55, 0.80, 0.62, 0.95, 0.45)  # heights, as a share of the meter


def _meter(axes: plt.Axes, left: float, width: float) -> None:
    """Six bars between ``left`` and ``left + width``, the tallest past the budget line."""
    step = width / len(BARS)
    for index, height in enumerate(BARS):
        colour = RED if height > 0.85 else AMBER if height > 0.7 else BLUE
        axes.add_patch(
            FancyBboxPatch(
                (left + index * step + step * 0.15, 0.1),
                step * 0.7,
                height * 0.75,
                boxstyle="round,pad=0,rounding_size=0.02",
                color=colour,
            )
        )
    axes.plot([left, left + width], [0.1 + 0.85 * 0.75] * 2, color=INK, linewidth=2, ls="--")


def _canvas(width_px: int, height_px: int) -> tuple[plt.Figure, plt.Axes]:
    figure = plt.figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, width_px / height_px)
    axes.set_ylim(0, 1)
    axes.axis("off")
    return figure, axes


def draw(folder: Path = ADDON) -> list[Path]:
    """Write icon.png and logo.png into ``folder``; return their paths."""
    icon, axes = _canvas(128, 128)
    _meter(axes, 0.05, 0.9)
    logo, axes = _canvas(250, 100)
    _meter(axes, 0.04, 0.78)
    axes.text(0.88, 0.42, "voxmeter", fontsize=20, color=INK, weight="bold", va="center")
    paths = []
    for figure, name in ((icon, "icon.png"), (logo, "logo.png")):
        path = folder / name
        figure.savefig(path, dpi=DPI, transparent=True, metadata={"Software": None})
        plt.close(figure)
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in draw(Path(sys.argv[1]) if sys.argv[1:] else ADDON):
        print(f"wrote {written}")
