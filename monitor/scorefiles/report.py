"""What ``voxmeter score`` computes and prints: the report, its JSON and its rich tables.

The CLI stays a thin parser: it calls :func:`score_report_from_files` and hands the result to
:func:`render_report` or to :func:`to_json_text`. Units: bits for disclosures,
rates stored as fractions (printed as %). Pooled trials need numpy and pyarrow only; the matrix
report lives in :mod:`monitor.scorefiles.matrix` and ``voxmeter compose`` in
:mod:`monitor.scorefiles.compose`.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.disclosure.baselines import baselines_of_blocks, cllr, linkability
from monitor.disclosure.blocks import gap_values, pooled_blocks
from monitor.disclosure.zebra import ZebraResult, finite_scores, zebra_of_blocks
from monitor.jsonsafe import jsonable
from monitor.scorefiles.trials import PairScores

if TYPE_CHECKING:
    from rich.console import Console

    from monitor.disclosure.lid import LidSummary
    from monitor.disclosure.srd import RankFit, SrdStats

FIT_LOSSES = ("ll", "ms", "wms", "rwms", "cll")
#: Where the LID calibration came from, as printed.
LID_SOURCES = {
    "dev": "fitted on the dev matrix",
    "given": "given weight and bias",
    "eval": "fitted on the EVALUATION matrix itself (no dev data: optimistic)",
}


@dataclass(frozen=True)
class ScoreReport:
    """Every figure of one ``voxmeter score`` run; SRD/LID/top-1 exist only for a matrix."""

    n_tar: int
    n_non: int
    zebra: ZebraResult
    EER: float  # threshold sweep, fraction
    EER_rocch: float  # ROC convex hull, fraction
    Cllr: float  # bits
    min_Cllr: float  # bits
    linkability: float  # D<->sys, fraction; NaN with fewer than 10 mated scores
    srd: SrdStats | None = None
    fit: RankFit | None = None
    lid: LidSummary | None = None
    lid_source: str | None = None  # key of LID_SOURCES
    top1_linkage: float | None = None  # fraction
    T: int | None = None
    N: int | None = None
    notes: tuple[str, ...] = ()


def _pooled_metrics(tar: np.ndarray, non: np.ndarray) -> dict[str, Any]:
    """ZEBRA and the baselines from one sorted core (the targets sorted once, shared)."""
    tar, non = finite_scores(tar, "targets"), finite_scores(non, "non-targets")
    blocks = pooled_blocks(tar, non)
    eer, eer_hull, min_cost = baselines_of_blocks(blocks, gap_values(non))
    return {
        "n_tar": int(tar.size),
        "n_non": int(non.size),
        "zebra": zebra_of_blocks(blocks),
        "EER": eer,
        "EER_rocch": eer_hull,
        "min_Cllr": min_cost,
        "linkability": linkability(tar, non),
    }


def collect_notes(caught: list[warnings.WarningMessage]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(w.message) for w in caught))


def pairs_report(pairs: PairScores) -> ScoreReport:
    """Pooled-trial report: scores are read as natural-log LLRs for Cllr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = _pooled_metrics(pairs.tar, pairs.non)
        value = cllr(pairs.tar, pairs.non)
    return ScoreReport(Cllr=value, notes=collect_notes(caught), **metrics)


# ---- JSON ------------------------------------------------------------------------------------


def _srd_stats_json(stats: SrdStats) -> dict[str, Any]:
    return {k: v for k, v in asdict(stats).items() if k != "N"}


def report_json(report: ScoreReport) -> dict[str, Any]:
    """The ``--json`` object: keys srd, lid, zebra, EER, EER_rocch, Cllr, min_Cllr, linkability
    (plus top1_linkage and notes); srd and lid are null for pooled trials."""
    srd = None
    if report.srd is not None and report.fit is not None:
        fit = report.fit
        srd = {
            **_srd_stats_json(report.srd),
            "N": report.srd.N,
            "fit": {
                "loss": fit.loss,
                "alpha": fit.alpha,
                "beta": fit.beta,
                "KL_bits": fit.KL_bits,
                "rank1_match_bits": fit.rank1_match_bits,
                **_srd_stats_json(fit.stats),
            },
        }
    lid = None
    if report.lid is not None:
        lid = {**asdict(report.lid), "calibrated_on": report.lid_source}
    out = {
        "srd": srd,
        "lid": lid,
        "zebra": asdict(report.zebra),
        "EER": report.EER,
        "EER_rocch": report.EER_rocch,
        "Cllr": report.Cllr,
        "min_Cllr": report.min_Cllr,
        "linkability": report.linkability,
        "top1_linkage": report.top1_linkage,
        "notes": list(report.notes),
    }
    return jsonable(out, inf="null")  # NaN and ±inf -> null: every figure is a number or null


def to_json_text(obj: Any) -> str:
    """Strict JSON (no NaN tokens) with NaN/inf already turned into null."""
    return json.dumps(jsonable(obj, inf="null"), indent=2, allow_nan=False)


# ---- human output ----------------------------------------------------------------------------


def _bits(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return f"{x:.3f} bits" if math.isfinite(x) else ("+∞" if x > 0 else "−∞")


def _pct(x: float | None) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100.0 * x:.2f} %"


def _num(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:.{digits}g}"


def render_report(report: ScoreReport, console: Console) -> None:
    """Print the report as rich tables (percentages for rates, bits for disclosures)."""
    from rich.table import Table  # only when a table is printed: not for --json

    if report.srd is not None and report.fit is not None:
        fit = report.fit
        table = Table(
            title=f"SRD: rank of the true identity (N = {report.N}, T = {report.T}, "
            f"ceiling log2 N = {math.log2(report.N or 1):.3f} bits)"
        )
        table.add_column("statistic")
        table.add_column("histogram", justify="right")
        table.add_column(f"beta-binomial ({fit.loss})", justify="right")
        hist, model = report.srd, fit.stats
        table.add_row("MeanD", _bits(hist.MeanD), _bits(model.MeanD))
        table.add_row("IdR", _pct(hist.IdR), _pct(model.IdR))
        table.add_row("MaxD", _bits(hist.MaxD), _bits(model.MaxD))
        table.add_row("StDD", _bits(hist.StDD), _bits(model.StDD))
        table.add_row("Spread", _pct(hist.Spread), _pct(model.Spread))
        table.add_row("α, β", "", f"{_num(fit.alpha)}, {_num(fit.beta)}")
        table.add_row("KL(hist ‖ model)", "", _bits(fit.KL_bits))
        table.add_row("rank-1 match", "", _bits(fit.rank1_match_bits))
        console.print(table)
    if report.lid is not None:
        lid = report.lid
        table = Table(title=f"LID: calibration {LID_SOURCES[report.lid_source or 'eval']}")
        table.add_column("statistic")
        table.add_column("value", justify="right")
        table.add_row("ALID", _bits(lid.ALID))
        table.add_row("PDR", _pct(lid.PDR))
        table.add_row("NDR", _pct(lid.NDR))
        table.add_row("LID+", _bits(lid.LID_plus))
        table.add_row("LID−", _bits(lid.LID_minus))
        table.add_row("LIDmax", _bits(lid.LID_max))
        table.add_row("weight w, bias b", f"{_num(lid.weight)}, {_num(lid.bias)}")
        console.print(table)
    split = "mated / non-mated split" if report.srd is not None else "pooled trials"
    table = Table(title=f"ZEBRA and baselines ({split}: {report.n_tar} / {report.n_non})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    z = report.zebra
    table.add_row("ZEBRA expected disclosure D_ECE", _bits(z.D_ECE))
    table.add_row("ZEBRA worst case log10 LR, tag", f"{z.log10_lr_max:.3f}  ({z.tag})")
    table.add_row("EER (threshold sweep)", _pct(report.EER))
    table.add_row("EER (ROC convex hull)", _pct(report.EER_rocch))
    on = "calibrated LLRs" if report.srd is not None else "scores read as LLRs"
    table.add_row(f"Cllr ({on})", _bits(report.Cllr))
    table.add_row("min Cllr", _bits(report.min_Cllr))
    table.add_row("linkability D↔sys", _pct(report.linkability))
    if report.top1_linkage is not None:
        table.add_row("top-1 linkage (strict)", _pct(report.top1_linkage))
    console.print(table)
    for note in report.notes:
        console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
