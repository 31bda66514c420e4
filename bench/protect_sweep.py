"""The McAdams α trade-off, measured: ``python -m bench protect --alphas 0.6,0.7,0.8,0.9,0.5-0.9``.

Each α (a fixed value, or ``LOW-HIGH`` drawn per utterance) is audited by the same command a
user runs (``voxmeter evaluate --protect mcadams --protect-alpha ...``) on one subset of the
corpus's test speakers, so every setting scores the same trials and decodes the same prompts:
EER, MeanD, ALID, ZEBRA for the original, ignorant and lazy-informed attackers and
pocketsphinx's WER before and after. The subset (every k-th test speaker, ``--speakers``) keeps
the whole sweep within a shared 2-core machine's budget; its per-trial reports stay in a
temporary folder, only the summary goes to bench/results/protect-alphas.json.

Targets (issue 30): ignorant EER ≥ 35 % and MeanD ≤ 25 % of the original; WER rise ≤ 5 points.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import CORPUS, RESULTS_DIR, Run

RESULTS = RESULTS_DIR / "protect-alphas.json"


def subset_corpus(destination: Path, speakers: int) -> list[str]:
    """``speakers`` of the corpus's test speakers, evenly spread over its order, linked into
    ``destination`` with the rows of speakers.tsv and utterances.tsv that concern them."""
    rows = (CORPUS / "speakers.tsv").read_text().splitlines()
    test = [r.split("\t")[0] for r in rows[1:] if r.split("\t")[-1] == "test"]
    step = max(1, len(test) // speakers)
    chosen = test[::step][:speakers]
    keep = set(chosen)
    for name in chosen:
        (destination / name).symlink_to(CORPUS / name, target_is_directory=True)
    (destination / "speakers.tsv").write_text(
        "\n".join([rows[0], *[r for r in rows[1:] if r.split("\t")[0] in keep]]) + "\n"
    )
    utterances = (CORPUS / "utterances.tsv").read_text().splitlines()
    (destination / "utterances.tsv").write_text(
        "\n".join([utterances[0], *[r for r in utterances[1:] if r.split("\t")[1] in keep]]) + "\n"
    )
    return chosen


def one_alpha(corpus: Path, out: Path, alpha: str, wer_utterances: int) -> dict[str, Any]:
    """One ``evaluate --protect`` run; its protection figures and the child's CPU seconds."""
    command = [
        sys.executable, "-m", "monitor.cli", "evaluate", str(corpus), "--out", str(out),
        "--features", "embedding", "--test-seconds", "3", "--template-seconds", "12",
        "--protect", "mcadams", "--protect-alpha", alpha.replace("-", ","),
        "--wer-utterances", str(wer_utterances), "--jobs", os.environ.get("VOXMETER_JOBS", "2"),
    ]  # fmt: skip
    c0, w0 = os.times(), time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    c1 = os.times()
    report = json.loads((out / "report.json").read_text())
    return {
        "command": " ".join(command[2:]),
        "child_cpu_seconds": (c1.children_user - c0.children_user)
        + (c1.children_system - c0.children_system),
        "wall_seconds": time.monotonic() - w0,
        "protection": report["protection"],
        "paper_002": {k: report["protected"][k] for k in ("DeID", "GVD_dB")},
    }


def row(alpha: str, run: dict[str, Any]) -> dict[str, Any]:
    """The sweep table's figures of one α."""
    protection = run["protection"]
    figures = {
        name: protection["conditions"][name]["features"]["embedding"]
        for name in ("original", "ignorant", "lazy-informed")
    }
    wer = protection["wer"]
    ratio = figures["ignorant"]["MeanD_histogram"] / figures["original"]["MeanD_histogram"]
    rise = 100 * (wer["after"] - wer["before"])
    return {
        "alpha": alpha,
        "eer_original": figures["original"]["EER"],
        "eer_ignorant": figures["ignorant"]["EER"],
        "eer_lazy": figures["lazy-informed"]["EER"],
        "meand_original": figures["original"]["MeanD_histogram"],
        "meand_ignorant": figures["ignorant"]["MeanD_histogram"],
        "meand_lazy": figures["lazy-informed"]["MeanD_histogram"],
        "ignorant_meand_ratio": ratio,
        "wer_before": wer["before"],
        "wer_after": wer["after"],
        "wer_rise_points": rise,
        "eer_met": figures["ignorant"]["EER"] >= 0.35,
        "meand_met": ratio <= 0.25,
        "wer_met": rise <= 5.0,
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| α | EER % ignorant | EER % lazy | MeanD ignorant (bits, % of orig.) | MeanD lazy | "
        "WER % after (rise) | all three met |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        met = "yes" if r["eer_met"] and r["meand_met"] and r["wer_met"] else "no"
        lines.append(
            f"| {r['alpha']} | {100 * r['eer_ignorant']:.1f} | {100 * r['eer_lazy']:.1f} | "
            f"{r['meand_ignorant']:.2f} ({100 * r['ignorant_meand_ratio']:.0f} %) | "
            f"{r['meand_lazy']:.2f} | {100 * r['wer_after']:.1f} "
            f"({r['wer_rise_points']:+.1f}) | {met} |"
        )
    return "\n".join(lines)


def sweep(alphas: list[str], speakers: int, wer_utterances: int, machine: Any) -> None:
    """Every α on the same subset; the summary written after each α (a long sweep that is
    stopped keeps what it measured)."""
    record = Run("protect-alphas", command=f"python -m bench protect --alphas {','.join(alphas)} "
                 f"--speakers {speakers} --wer {wer_utterances}")  # fmt: skip
    results = record.figures
    results.update({"machine": machine(), "runs": {}})
    with tempfile.TemporaryDirectory(prefix="voxmeter-sweep-") as scratch:
        corpus = Path(scratch) / "corpus"
        corpus.mkdir()
        chosen = subset_corpus(corpus, speakers)
        results["subset"] = {
            "speakers": len(chosen),
            "rule": f"every {max(1, 125 // speakers)}th test speaker of {CORPUS.name}",
            "wer_utterances": wer_utterances,
        }
        rows = []
        for alpha in alphas:
            run = one_alpha(corpus, Path(scratch) / f"report-{alpha}", alpha, wer_utterances)
            results["runs"][alpha] = run
            rows.append(row(alpha, run))
            results["table"] = rows
            record.write(path=RESULTS)
            print(table(rows[-1:]).splitlines()[-1], f"({run['wall_seconds']:.0f} s)", flush=True)
    print(table(rows))
