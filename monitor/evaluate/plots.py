"""The audit's figures as PNG files (matplotlib, Agg backend: no display needed).

Rank histograms with fitted models (paper 000 Fig. 5), LID CCDF (paper 003 Fig. 4),
per-speaker mean disclosure (paper 000 Fig. 6), disclosure versus length with the composition
curves and log2 N (paper 000 Fig. 8), and voice similarity matrices (paper 002 Fig. 1).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from monitor.calibration.buckets import LOSSES
from monitor.disclosure.lid import lid_ccdf
from monitor.disclosure.srd import betabinom_pmf
from monitor.evaluate.results import Audit, composition_curves

DPI = 110


def _grid(n: int) -> tuple[Figure, np.ndarray]:
    columns = min(n, 2)
    rows = math.ceil(n / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.9 * rows), squeeze=False)
    for extra in axes.ravel()[n:]:
        extra.set_visible(False)
    return figure, axes.ravel()


def _save(figure: Figure, directory: Path, name: str) -> str:
    figure.tight_layout()
    figure.savefig(directory / name, dpi=DPI)
    plt.close(figure)
    return name


def rank_histograms(audit: Audit, directory: Path) -> str:
    """Fig. 5: p̃_k on log-log axes, the five fitted models and the chance line 1/N."""
    main = audit.main
    figure, axes = _grid(len(main.features))
    for ax, (name, fa) in zip(axes, main.features.items(), strict=False):
        N = fa.histogram.size
        ranks = np.arange(1, N + 1)
        p = fa.histogram / fa.histogram.sum()
        present = p > 0
        ax.loglog(ranks[present], p[present], "o", ms=3, color="black", label="histogram")
        for loss in LOSSES:
            fit = fa.fits[loss]
            style = "-" if loss == fa.loss else ":"
            ax.loglog(
                ranks,
                betabinom_pmf(N, fit.alpha, fit.beta),
                style,
                lw=1.6 if loss == fa.loss else 1.0,
                label=f"{loss.upper()} α={fit.alpha:.3g} β={fit.beta:.3g}",
            )
        ax.axhline(1.0 / N, color="grey", ls="--", lw=1, label="chance 1/N")
        ax.set_title(f"{name}: MeanD {fa.histogram_stats.MeanD:.2f} bits (N = {N})")
        ax.set_xlabel("rank of the true identity")
        ax.set_ylabel("probability")
        lowest = min(p[present].min() if present.any() else 1.0, 1.0 / N)
        ax.set_ylim(bottom=max(lowest / 3, 1e-8), top=1.5)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.legend(fontsize=6)
    return _save(figure, directory, "rank_histograms.png")


def lid_ccdfs(audit: Audit, directory: Path) -> str:
    """Paper 003 Fig. 4: fraction of trials whose LID exceeds x, one line per feature."""
    figure, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, fa in audit.main.features.items():
        x, y = lid_ccdf(fa.lid[np.isfinite(fa.lid)])
        ax.step(x, y, where="post", label=f"{name} (ALID {fa.lid_summary.ALID:.2f})")
    ax.axvline(0.0, color="grey", lw=0.8)
    ax.axvline(math.log2(audit.main.N), color="grey", ls="--", lw=0.8, label="log2 N")
    ax.set_xlabel("LID (bits)")
    ax.set_ylabel("P(LID > x)")
    ax.set_title("LID complementary CDF")
    ax.legend(fontsize=7)
    return _save(figure, directory, "lid_ccdf.png")


def per_speaker(audit: Audit, directory: Path) -> str:
    """Paper 000 Fig. 6: distribution of per-speaker MeanD (LL fits), one panel per feature."""
    main = audit.main
    figure, axes = _grid(len(main.features))
    ceiling = math.log2(main.N)
    for ax, (name, fa) in zip(axes, main.features.items(), strict=False):
        values = np.array([v for v in fa.per_speaker.values() if np.isfinite(v)])
        if values.size:
            ax.hist(values, bins=np.linspace(0, ceiling, 25), color="tab:blue", alpha=0.8)
            ax.axvline(values.mean(), color="black", lw=1, label=f"mean {values.mean():.2f}")
        ax.axvline(ceiling, color="grey", ls="--", lw=1, label="log2 N")
        ax.set_title(f"{name}: per-speaker MeanD")
        ax.set_xlabel("MeanD (bits)")
        ax.set_ylabel("speakers")
        ax.legend(fontsize=7)
    return _save(figure, directory, "per_speaker.png")


def length_dependence(audit: Audit, directory: Path) -> str | None:
    """Paper 000 Fig. 8: MeanD versus test length (and template length), with the basic and
    advanced composition curves anchored at the shortest length and the log2 N ceiling."""
    main = audit.main
    by_test = sorted(
        (s for s in audit.settings if s.template_seconds == main.template_seconds),
        key=lambda s: s.mean_test_seconds,
    )
    by_template = sorted(
        (s for s in audit.settings if s.test_seconds == main.test_seconds),
        key=lambda s: s.mean_template_seconds,
    )
    panels = [("test", by_test)] + ([("template", by_template)] if len(by_template) > 1 else [])
    if len(by_test) < 2 and len(panels) == 1:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 4.4), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (axis_name, settings) in zip(axes[0], panels, strict=True):
        attribute = "mean_test_seconds" if axis_name == "test" else "mean_template_seconds"
        lengths = np.array([getattr(s, attribute) for s in settings])
        for colour, name in zip(colours, main.features, strict=False):
            measured = np.array([s.features[name].histogram_stats.MeanD for s in settings])
            ax.plot(lengths, measured, "o-", color=colour, label=name)
            if axis_name == "test" and lengths.size > 1:
                ceilings = np.log2([s.N for s in settings])
                curves = composition_curves(lengths, measured, ceilings)
                ax.plot(lengths, curves["basic"], "--", color=colour, lw=0.8)
                ax.plot(lengths, curves["advanced"], ":", color=colour, lw=0.8)
        ax.plot(lengths, [math.log2(s.N) for s in settings], "k-", lw=1.2, label="log2 N")
        ax.set_xlabel(f"{axis_name} speech (s, mean)")
        ax.set_ylabel("MeanD (bits)")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(ScalarFormatter())
        if axis_name == "test":
            ax.set_title("disclosure vs test length (-- basic, ·· advanced)")
            top = max(math.log2(s.N) for s in settings) * 1.08
            ax.set_ylim(0, top)
            counts = [s.N for s in settings]
            if len(set(counts)) > 1:
                ax.annotate(
                    f"N changes: {' → '.join(str(n) for n in counts)}",
                    (0.02, 0.02),
                    xycoords="axes fraction",
                    fontsize=7,
                )
        else:
            ax.set_title("disclosure vs template length")
        ax.legend(fontsize=7)
    return _save(figure, directory, "length.png")


def similarity_matrices(protected: object, directory: Path) -> str:
    """Paper 002 Fig. 1: M_OO, M_OP, M_PP side by side with DeID and GVD."""
    matrices = [
        ("M_OO", protected.M_OO),  # type: ignore[attr-defined]
        ("M_OP", protected.M_OP),  # type: ignore[attr-defined]
        ("M_PP", protected.M_PP),  # type: ignore[attr-defined]
    ]
    figure, axes = plt.subplots(1, 3, figsize=(13, 4.4))
    for ax, (title, M) in zip(axes, matrices, strict=True):
        image = ax.imshow(M, vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(title)
        ax.set_xlabel("speaker")
        ax.set_ylabel("speaker")
    figure.colorbar(image, ax=axes, shrink=0.8)
    figure.suptitle(
        f"DeID {100 * protected.DeID:.1f} %, GVD {protected.GVD_dB:.2f} dB"  # type: ignore[attr-defined]
    )
    figure.savefig(directory / "similarity_matrices.png", dpi=DPI)
    plt.close(figure)
    return "similarity_matrices.png"


def write_plots(audit: Audit, directory: str | Path) -> dict[str, str]:
    """Every plot the audit supports; returns {title: file name} for the report."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    plots = {
        "Rank histograms and fitted models (paper 000 Fig. 5)": rank_histograms(audit, target),
        "LID CCDF (paper 003 Fig. 4)": lid_ccdfs(audit, target),
        "Per-speaker mean disclosure (paper 000 Fig. 6)": per_speaker(audit, target),
    }
    length = length_dependence(audit, target)
    if length is not None:
        plots["Disclosure versus length (paper 000 Fig. 8)"] = length
    if audit.protected is not None:
        plots["Voice similarity matrices (paper 002 Fig. 1)"] = similarity_matrices(
            audit.protected, target
        )
    return plots
