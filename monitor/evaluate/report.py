"""report.json (every figure) and report.md (tables and plots, readable alone) of an audit.

Both are built from one dictionary (:func:`report_dict`) and the Markdown prints numbers from
that dictionary with fixed formats (:func:`bits`, :func:`percent`), so the two always agree.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from monitor.calibration.buckets import COMBINED
from monitor.evaluate.markdown import markdown
from monitor.evaluate.results import (
    Audit,
    FeatureAudit,
    ProtectionAudit,
    SettingAudit,
    composition_curves,
)
from monitor.jsonsafe import jsonable

PROTOCOL_NAME = "paper 000 eq. 6: per speaker, test and template blocks of consecutive utterances"


def _stats(stats: Any) -> dict[str, float]:
    return {k: getattr(stats, k) for k in ("MeanD", "IdR", "MaxD", "StDD", "Spread")}


def feature_dict(audit: FeatureAudit) -> dict[str, Any]:
    """The ``features[f]`` entry of report.json."""
    model = audit.model
    lid = audit.lid_summary
    return {
        "histogram": _stats(audit.histogram_stats),
        "model": {
            "loss": model.loss,
            "alpha": model.alpha,
            "beta": model.beta,
            "at_bound": model.at_bound,
            **_stats(model.stats),
        },
        "fits": {
            loss: {
                "alpha": fit.alpha,
                "beta": fit.beta,
                "KL_bits": fit.KL_bits,
                "rank1_match_bits": fit.rank1_match_bits,
                "at_bound": fit.at_bound,
                "MeanD": fit.stats.MeanD,
            }
            for loss, fit in audit.fits.items()
        },
        "lid": {
            "ALID": lid.ALID,
            "PDR": lid.PDR,
            "NDR": lid.NDR,
            "LID_plus": lid.LID_plus,
            "LID_minus": lid.LID_minus,
            "LID_max": lid.LID_max,
            "weight": lid.weight,
            "bias": lid.bias,
        },
        "zebra": {
            "D_ECE": audit.zebra.D_ECE,
            "log10_lr_max": audit.zebra.log10_lr_max,
            "tag": audit.zebra.tag,
        },
        "EER": audit.EER,
        "EER_rocch": audit.EER_rocch,
        "per_speaker": dict(audit.per_speaker),
        "rank_histogram": audit.histogram,
    }


def length_dict(setting: SettingAudit) -> dict[str, Any]:
    """One ``by_length`` entry: the headline figures of every feature at one setting."""
    return {
        "test_seconds": setting.test_seconds,
        "template_seconds": setting.template_seconds,
        "mean_test_seconds": setting.mean_test_seconds,
        "mean_template_seconds": setting.mean_template_seconds,
        "N": setting.N,
        "trials": setting.T,
        "features": {
            name: {
                "MeanD_histogram": fa.histogram_stats.MeanD,
                "MeanD_model": fa.model.stats.MeanD,
                "IdR": fa.histogram_stats.IdR,
                "MaxD": fa.histogram_stats.MaxD,
                "ALID": fa.lid_summary.ALID,
                "LID_max": fa.lid_summary.LID_max,
                "EER": fa.EER,
                "D_ECE": fa.zebra.D_ECE,
            }
            for name, fa in setting.features.items()
        },
    }


def composition_dict(audit: Audit) -> dict[str, Any]:
    """Measured MeanD against test length, with the composition curves anchored at the shortest."""
    main_template = audit.main.template_seconds
    settings = [s for s in audit.settings if s.template_seconds == main_template]
    settings.sort(key=lambda s: s.test_seconds)
    if not settings:
        return {}
    lengths = np.array([s.mean_test_seconds for s in settings])
    out: dict[str, Any] = {}
    for name in audit.main.features:
        measured = np.array([s.features[name].histogram_stats.MeanD for s in settings])
        ceilings = np.log2([s.N for s in settings])
        curves = composition_curves(lengths, measured, ceilings)
        out[name] = {
            "test_seconds": [s.test_seconds for s in settings],
            "mean_test_seconds": lengths,
            "N": [s.N for s in settings],
            "MeanD": measured,
            "basic": curves["basic"],
            "advanced": curves["advanced"],
            "ceiling_bits": [math.log2(s.N) for s in settings],
        }
    return out


def protection_dict(protection: ProtectionAudit | None) -> dict[str, Any] | None:
    """``evaluate --protect``: the main setting's headline figures per attacker, and the WER."""
    if protection is None:
        return None
    wer, commands = protection.wer, protection.commands
    return {
        "method": protection.method,
        "alpha": protection.alpha,
        "seed": protection.seed,
        "conditions": {name: length_dict(s) for name, s in protection.conditions.items()},
        "lid_calibration": {name: s.lid_source for name, s in protection.conditions.items()},
        "wer": None if wer is None else dataclasses.asdict(wer),
        "commands": None if commands is None else dataclasses.asdict(commands),
        "attacker": None if protection.attacker is None else dict(protection.attacker),
        "not_measured": (
            "an attacker who also retrains the embedding network on anonymised speech"
            if protection.attacker is not None
            else "semi-informed attacker (no back-end for this embedding network and α)"
        ),
    }


def report_dict(audit: Audit, plots: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything report.json holds (JSON-safe)."""
    main = audit.main
    features = {name: feature_dict(fa) for name, fa in main.features.items()}
    if COMBINED in features:
        features[COMBINED]["fusion_weights"] = dict(main.fusion)
    singles = [n for n in main.features if n != COMBINED]
    document: dict[str, Any] = {
        "N": main.N,
        **{k: v for k, v in audit.metadata.items() if k not in ("N", "protocol")},
        "protocol": {
            "name": PROTOCOL_NAME,
            "delta": "floor((K - T - D) / 2)",
            "starts": "every utterance (K-fold), pooled",
            "test_seconds": main.test_seconds,
            "template_seconds": main.template_seconds,
            "mean_test_seconds": main.mean_test_seconds,
            "mean_template_seconds": main.mean_template_seconds,
            "trials": main.T,
            "ties": "fractional",
            "loss": next(iter(main.features.values())).loss,
            "lid_calibration": main.lid_source,
            "combined": "sum_f w_f * znorm_rows(S_f), w fitted on dev trials to maximise the mean "
            "log posterior of the true identity, audited as one more feature",
            "per_speaker": "MeanD of an LL fit to each speaker's own rank histogram",
            "dropped_speakers": list(main.dropped),
            **dict(audit.metadata.get("protocol", {})),
        },
        "features": features,
        "additive": {
            "features": singles,
            "MeanD_sum": float(sum(main.features[n].histogram_stats.MeanD for n in singles)),
            "ceiling_bits": math.log2(main.N),
        },
        "modelled": {name: dict(row) for name, row in main.modelled.items()},
        "by_length": [length_dict(s) for s in audit.settings],
        "composition": composition_dict(audit),
        "protected": audit.protected.to_dict() if audit.protected is not None else None,
        "protection": protection_dict(audit.protection),
        "skipped": [{"item": item, "reason": reason} for item, reason in audit.skipped],
        "plots": dict(plots or {}),
    }
    return jsonable(document)


# ---- Markdown ---------------------------------------------------------------------------


def write_report(
    audit: Audit, directory: str | Path, plots: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Write report.json and report.md into ``directory``; returns the JSON document."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    document = report_dict(audit, plots)
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    (target / "report.json").write_text(text, encoding="utf-8")
    (target / "report.md").write_text(markdown(document), encoding="utf-8")
    return document
