"""report.md of an audit, section by section, from the document that
:func:`monitor.evaluate.report.report_dict` makes; bits and percentages as printed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from monitor.calibration.buckets import COMBINED, LOSSES


def bits(value: Any, digits: int = 3) -> str:
    """A number of bits (or any plain number) as the report prints it."""
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return f"{value:.{digits}f}"


def percent(value: Any) -> str:
    """A fraction printed as a percentage with 2 decimals."""
    if value is None:
        return "–"
    return f"{100.0 * value:.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def markdown(report: Mapping[str, Any]) -> str:
    """report.md from :func:`report_dict` output, section by section."""
    out: list[str] = []
    for section in (
        _md_header,
        _md_disclosure,
        _md_modelled,
        _md_fits,
        _md_lid,
        _md_zebra,
        _md_exposed,
        _md_lengths,
        _md_protected,
        _md_protection,
        _md_tail,
    ):
        out += section(report)
    return "\n".join(out)


def _md_header(report: Mapping[str, Any]) -> list[str]:
    """Corpus, protocol, LID calibration and fusion of the main setting."""
    p = report["protocol"]
    feats = report["features"]
    N = report["N"]
    out = ["# voxmeter audit", ""]
    corpus = report.get("corpus", "?")
    split = report.get("split")
    out += [
        f"Corpus `{corpus}`" + (f", split `{split}`" if split else "") + f": **N = {N}** "
        f"identities, {p['trials']} trials. Ceiling log2 N = {bits(math.log2(N))} bits.",
        "",
        f"Protocol: {p['name']}; Δ = {p['delta']}; starts: {p['starts']}. Test segments of "
        f"≥ {p['test_seconds']:g} s of speech (mean {p['mean_test_seconds']:.2f} s), templates of "
        + (
            f"≥ {p['template_seconds']:g} s"
            if p["template_seconds"] is not None
            else "all remaining speech"
        )
        + f" (mean {p['mean_template_seconds']:.2f} s). Ties: {p['ties']}. "
        f"Model loss: {p['loss'].upper()}.",
        "",
        f"LID calibration: {p['lid_calibration']}.",
        "",
        f"`combined`: {p['combined']}"
        + (
            " (weights "
            + ", ".join(f"{k} {bits(v)}" for k, v in feats[COMBINED]["fusion_weights"].items())
            + ")."
            if COMBINED in feats
            else "."
        ),
        "",
    ]
    if p["dropped_speakers"]:
        out += [
            f"Speakers without enough speech for this setting: {', '.join(p['dropped_speakers'])}.",
            "",
        ]
    out += ["Bits for disclosures, percentages for rates.", ""]
    return out


def _md_disclosure(report: Mapping[str, Any]) -> list[str]:
    """The disclosure table (paper 000 Table II) and the paper-style additive sum."""
    feats = report["features"]
    out: list[str] = []
    out += ["## Disclosure (paper 000 Table II)", ""]
    rows = []
    for name, f in feats.items():
        h, m = f["histogram"], f["model"]
        rows.append(
            [
                f"`{name}`",
                bits(h["MeanD"]),
                bits(m["MeanD"]),
                percent(h["IdR"]),
                percent(m["IdR"]),
                bits(h["MaxD"]),
                bits(m["MaxD"]),
                bits(h["StDD"]),
                percent(h["Spread"]),
                percent(f["EER"]),
                bits(m["alpha"], 4),
                bits(m["beta"], 4),
            ]
        )
    out += _table(
        [
            "feature",
            "MeanD hist",
            "MeanD model",
            "IdR hist %",
            "IdR model %",
            "MaxD hist",
            "MaxD model",
            "StDD hist",
            "Spread hist %",
            "EER %",
            "α",
            "β",
        ],
        rows,
    )
    add = report["additive"]
    out += [
        f"Paper-style additive sum of the single features' MeanD: {bits(add['MeanD_sum'])} bits "
        f"(not bounded by log2 N = {bits(add['ceiling_bits'])}; the features are not "
        "independent, so the sum overstates the joint disclosure that `combined` measures).",
        "",
    ]
    return out


def _md_modelled(report: Mapping[str, Any]) -> list[str]:
    """The measured figures beside the population model's, at N and at N_pop."""
    rows_in = report.get("modelled") or {}
    if not rows_in:
        return []
    first = next(iter(rows_in.values()))
    out = [
        "## Measured and modelled (population model)",
        "",
        f"Each trial measured against the N = {first['N']:.0f} speakers here, beside what the "
        "population model shipped with the reference population predicts for the same trials "
        f"at that N, and at N_pop = {first['N_pop']:,.0f} (`population.size`'s default, "
        f"ceiling {bits(first['ceiling_bits_at_N_pop'], 2)} bits): the figures the daemon "
        "shows. *beyond %*: trials whose evidence lies beyond what the reference voices "
        'validate (shown there as the model\'s estimate, with an "at least" bound).',
        "",
    ]
    rows = [
        [
            f"`{name}`",
            bits(r["ALID_measured"]),
            bits(r["ALID_modelled"]),
            percent(r["rank1_measured"]),
            percent(r["rank1_modelled"]),
            bits(r["ALID_at_N_pop"]),
            percent(r["rank1_at_N_pop"]),
            percent(r["beyond_reference_share"]),
        ]
        for name, r in rows_in.items()
    ]
    header = ["feature", "ALID measured", "ALID modelled", "rank-1 measured %"]
    header += ["rank-1 modelled %", "ALID at N_pop", "rank-1 at N_pop %", "beyond %"]
    return out + _table(header, rows)


def _md_fits(report: Mapping[str, Any]) -> list[str]:
    """KL and rank-1 match of every loss (paper 000 Table III)."""
    feats = report["features"]
    out: list[str] = []
    out += ["## Goodness of fit (paper 000 Table III): KL / rank-1 match, bits", ""]
    rows = []
    for name, f in feats.items():
        rows.append(
            [f"`{name}`"]
            + [
                f"{bits(f['fits'][loss]['KL_bits'], 4)} / "
                f"{bits(f['fits'][loss]['rank1_match_bits'], 4)}"
                for loss in LOSSES
            ]
        )
    out += _table(["feature", *[loss.upper() for loss in LOSSES]], rows)
    return out


def _md_lid(report: Mapping[str, Any]) -> list[str]:
    """The LID family (paper 003 Table 4)."""
    feats = report["features"]
    out: list[str] = []
    out += ["## Local information disclosure (paper 003 Table 4)", ""]
    rows = [
        [
            f"`{name}`",
            bits(f["lid"]["ALID"]),
            percent(f["lid"]["PDR"]),
            percent(f["lid"]["NDR"]),
            bits(f["lid"]["LID_plus"]),
            bits(f["lid"]["LID_minus"]),
            bits(f["lid"]["LID_max"]),
            bits(f["lid"]["weight"]),
            bits(f["lid"]["bias"]),
        ]
        for name, f in feats.items()
    ]
    out += _table(["feature", "ALID", "PDR %", "NDR %", "LID+", "LID−", "LIDmax", "w", "b"], rows)
    return out


def _md_zebra(report: Mapping[str, Any]) -> list[str]:
    """ZEBRA (paper 001) and the ROCCH EER."""
    feats = report["features"]
    out: list[str] = []
    out += ["## ZEBRA (paper 001)", ""]
    rows = [
        [
            f"`{name}`",
            bits(f["zebra"]["D_ECE"]),
            bits(f["zebra"]["log10_lr_max"]),
            f["zebra"]["tag"],
            percent(f["EER_rocch"]),
        ]
        for name, f in feats.items()
    ]
    out += _table(["feature", "D_ECE", "log10 LR max", "tag", "EER (ROCCH) %"], rows)
    return out


def _md_exposed(report: Mapping[str, Any]) -> list[str]:
    """Per-speaker MeanD: who is most exposed (paper 000 Fig. 6)."""
    feats = report["features"]
    out: list[str] = []
    out += ["## Who is most exposed (paper 000 Fig. 6)", ""]
    rows = []
    for name, f in feats.items():
        values = {k: v for k, v in f["per_speaker"].items() if v is not None}
        if not values:
            continue
        v = np.array(list(values.values()))
        top = sorted(values.items(), key=lambda kv: -kv[1])[:5]
        rows.append(
            [
                f"`{name}`",
                bits(float(v.mean())),
                bits(float(v.std())),
                bits(float(v.min())),
                bits(float(v.max())),
                ", ".join(f"{alias} ({bits(d, 2)})" for alias, d in top),
            ]
        )
    out += _table(["feature", "mean", "SD", "min", "max", "most exposed (MeanD)"], rows)
    return out


def _md_lengths(report: Mapping[str, Any]) -> list[str]:
    """Disclosure versus length (paper 000 Fig. 8) and the composition curves."""
    feats = report["features"]
    out: list[str] = []
    out += ["## Disclosure versus length (paper 000 Fig. 8)", ""]
    names = list(feats)
    rows = []
    for entry in report["by_length"]:
        template = entry["template_seconds"]
        rows.append(
            [
                f"{entry['test_seconds']:g} ({entry['mean_test_seconds']:.1f})",
                ("rest" if template is None else f"{template:g}")
                + f" ({entry['mean_template_seconds']:.1f})",
                str(entry["N"]),
                *[
                    f"{bits(entry['features'][n]['MeanD_histogram'])} / "
                    f"{bits(entry['features'][n]['ALID'])}"
                    for n in names
                ],
            ]
        )
    out += _table(
        ["test s (mean)", "template s (mean)", "N", *[f"`{n}` MeanD / ALID" for n in names]],
        rows,
    )
    composition = report.get("composition") or {}
    if composition:
        out += [
            "Composition curves anchored at the shortest test length: basic D(L0)·L/L0, "
            "advanced D(L0)·√(L/L0), both capped at the ceiling log2 N.",
            "",
        ]
        counts = next(iter(composition.values()))["N"]
        if len(set(counts)) > 1:
            out += [
                f"N changes with the test length ({' → '.join(str(n) for n in counts)}): "
                "speakers without enough speech for the longer tests drop out, so the "
                "figures and ceilings at different lengths are over different speaker sets.",
                "",
            ]
        rows = []
        for name, c in composition.items():
            rows.append(
                [
                    f"`{name}`",
                    " → ".join(bits(v, 2) for v in c["MeanD"]),
                    " → ".join(bits(v, 2) for v in c["advanced"]),
                    " → ".join(bits(v, 2) for v in c["basic"]),
                    " → ".join(bits(v, 2) for v in c["ceiling_bits"]),
                ]
            )
        out += _table(["feature", "measured MeanD", "advanced", "basic", "log2 N"], rows)
    return out


def _md_protected(report: Mapping[str, Any]) -> list[str]:
    """Voice similarity matrices of a protected corpus (paper 002), when given."""
    out: list[str] = []
    protected = report.get("protected")
    if protected:
        out += ["## Voice similarity matrices (paper 002)", ""]
        out += [
            f"Protected corpus `{protected['corpus']}` ({protected['feature']} feature, "
            f"{protected['N']} speakers, PAV-calibrated segment-pair LLRs).",
            "",
        ]
        out += _table(
            ["D_diag(M_OO)", "D_diag(M_OP)", "D_diag(M_PP)", "DeID %", "GVD dB"],
            [
                [
                    bits(protected["D_diag_OO"]),
                    bits(protected["D_diag_OP"]),
                    bits(protected["D_diag_PP"]),
                    percent(protected["DeID"]),
                    bits(protected["GVD_dB"], 2),
                ]
            ],
        )
    return out


def _md_protection(report: Mapping[str, Any]) -> list[str]:
    """``--protect``: each attacker's figures at the main setting, and the word error rate."""
    protection = report.get("protection")
    if not protection:
        return []
    out = ["## Protection (`--protect`)", ""]
    out += [
        f"Method `{protection['method']}`, α {protection['alpha']} per utterance (seed "
        f"{protection['seed']}). ignorant: clean templates, anonymised tests; lazy-informed: "
        f"templates anonymised the same way; semi-informed: those trials through a back-end "
        f"trained on speech anonymised the same way. Not measured: {protection['not_measured']}.",
        "",
    ]
    attacker = protection.get("attacker")
    if attacker:
        out += [
            f"Semi-informed back-end: LDA to {attacker.get('dimension')} dimensions on "
            f"{attacker.get('utterances')} utterances of {attacker.get('speakers')} train "
            f"speakers anonymised at α {attacker.get('alpha')} ({attacker.get('embedding')}).",
            "",
        ]
    rows = []
    for condition, setting in protection["conditions"].items():
        for name, f in setting["features"].items():
            rows.append(
                [
                    condition,
                    name,
                    str(setting["N"]),
                    bits(f["MeanD_histogram"]),
                    bits(f["ALID"]),
                    percent(f["EER"]),
                    bits(f["D_ECE"]),
                ]
            )
    out += _table(["attacker", "feature", "N", "MeanD", "ALID", "EER %", "ZEBRA D_ECE"], rows)
    wer = protection.get("wer")
    if wer:
        out += [
            f"Word error rate ({wer['asr']}, {wer['utterances']} utterances, {wer['words']} "
            f"words): {percent(wer['before'])} % before, {percent(wer['after'])} % after.",
            "",
        ]
    commands = protection.get("commands")
    if commands:
        out += [
            f"Command accuracy ({commands['asr']}, grammar of the corpus's {commands['prompts']} "
            f"prompts, {commands['utterances']} utterances): {percent(commands['before'])} % "
            f"exactly right before, {percent(commands['after'])} % after (WER "
            f"{percent(commands['wer_before'])} → {percent(commands['wer_after'])} %).",
            "",
        ]
    return out


def _md_tail(report: Mapping[str, Any]) -> list[str]:
    """The plots and the skipped input."""
    out: list[str] = []
    plots = report.get("plots") or {}
    if plots:
        out += ["## Plots", ""]
        for title, filename in plots.items():
            out += [f"### {title}", "", f"![{title}]({filename})", ""]

    skipped = report.get("skipped") or []
    out += ["## Skipped input", ""]
    if skipped:
        out += [f"{len(skipped)} item(s) were not used:", ""]
        out += [f"- `{s['item']}`: {s['reason']}" for s in skipped]
    else:
        out += ["None: every file was used."]
    out.append("")
    return out
