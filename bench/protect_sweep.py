"""The McAdams α trade-off, measured: ``python -m bench protect --alphas 0.6,0.7,0.8,0.9,0.5-0.9``.

Each α (a fixed value, or ``LOW-HIGH`` drawn per utterance) is audited by the same command a
user runs (``voxmeter evaluate --protect mcadams --protect-alpha ...``) on one subset of the
corpus's test speakers, so every setting scores the same trials and decodes the same prompts:
EER, MeanD, ALID, ZEBRA for the original, ignorant and lazy-informed attackers and
pocketsphinx's WER before and after. The subset (every k-th test speaker, ``--speakers``) keeps
the whole sweep within a shared 2-core machine's budget; its per-trial reports stay in a
temporary folder, only the summary goes to bench/results/protect-curve.json (the common
schema) and the curve to docs/images/protect-curve.png: the semi-informed attacker's EER
and MeanD against the command accuracy (:mod:`monitor.evaluate.asr`), one point per α. Each
α is attacked by a back-end trained for it: the shipped one where it was trained for that α,
else one trained here on 42 of the 125 train speakers (:data:`TRAIN_SPEAKERS`).

Targets: command accuracy ≥ 70 % on original speech, the default α losing ≤ 10 points.
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

from bench.common import CORPUS, Run

CURVE = Path(__file__).resolve().parents[1] / "docs/images/protect-curve.png"
"""The curve, on the protection page."""


def subset_corpus(destination: Path, speakers: int, split: str = "test") -> list[str]:
    """``speakers`` of the corpus's ``split`` speakers, evenly spread over its order, linked
    into ``destination`` with the rows of speakers.tsv and utterances.tsv that concern them."""
    rows = (CORPUS / "speakers.tsv").read_text().splitlines()
    test = [r.split("\t")[0] for r in rows[1:] if r.split("\t")[-1] == split]
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


TRAIN_SPEAKERS = 42
"""Train speakers of the back-ends the sweep trains for an α the release has none for (every
2nd in corpus order, the first 42): a third of the shipped back-end's 125, to keep each α
within a shared machine's budget."""


def attacker_for(alpha: str, scratch: Path) -> tuple[Path | None, dict[str, Any]]:
    """The semi-informed back-end of ``alpha``: the shipped one when it was trained for it
    (None: ``evaluate`` finds it), else one trained here on :data:`TRAIN_SPEAKERS` train
    speakers anonymised with that α."""
    from monitor.corpus.jobs import CorpusJob
    from monitor.evaluate.anonymiser_audit import anonymised_speakers
    from monitor.evaluate.semi_informed import FEATURE, TRAIN_SEED, fit_chosen, labelled
    from monitor.features.base import embedding_backend
    from monitor.protect.backend import shipped_backend
    from monitor.protect.mcadams import parse_alpha

    parsed = parse_alpha(alpha.replace("-", ","))
    shipped = shipped_backend(embedding_backend())
    if shipped is not None and shipped.facts.get("alpha") == str(parsed):
        return None, {"backend": "shipped", "speakers": len(shipped.facts["speakers"])}  # type: ignore[arg-type]
    corpus = scratch / f"train-{alpha}"
    corpus.mkdir()
    subset_corpus(corpus, TRAIN_SPEAKERS, split="train")
    jobs = int(os.environ.get("VOXMETER_JOBS", "2"))
    speakers = anonymised_speakers(
        corpus,
        split="train",
        alpha=parsed,
        seed=TRAIN_SEED,
        features=[FEATURE],
        job=CorpusJob(jobs=jobs),
    )
    vectors, labels = labelled(speakers.speakers)
    backend, figures = fit_chosen(
        vectors, labels, alpha=parsed, seed=TRAIN_SEED, embedding=embedding_backend()
    )
    path = scratch / f"attacker-{alpha}.npz"
    backend.save(path)
    return path, {"backend": "trained by the sweep", **figures}


def one_alpha(
    corpus: Path, out: Path, alpha: str, wer_utterances: int, attacker: Path | None = None
) -> dict[str, Any]:
    """One ``evaluate --protect`` run; its protection figures and the child's CPU seconds."""
    command = [
        sys.executable, "-m", "monitor.cli", "evaluate", str(corpus), "--out", str(out),
        "--features", "embedding", "--test-seconds", "3", "--template-seconds", "12",
        "--protect", "mcadams", "--protect-alpha", alpha.replace("-", ","),
        "--wer-utterances", str(wer_utterances), "--jobs", os.environ.get("VOXMETER_JOBS", "2"),
        *(["--attacker", str(attacker)] if attacker is not None else []),
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
        name: setting["features"]["embedding"] for name, setting in protection["conditions"].items()
    }
    semi = figures.get("semi-informed", {})
    wer, commands = protection["wer"], protection.get("commands") or {}
    ratio = figures["ignorant"]["MeanD_histogram"] / figures["original"]["MeanD_histogram"]
    rise = 100 * (wer["after"] - wer["before"])
    return {
        "alpha": alpha,
        "eer_original": figures["original"]["EER"],
        "eer_ignorant": figures["ignorant"]["EER"],
        "eer_lazy": figures["lazy-informed"]["EER"],
        "eer_semi": semi.get("EER"),
        "meand_original": figures["original"]["MeanD_histogram"],
        "meand_ignorant": figures["ignorant"]["MeanD_histogram"],
        "meand_lazy": figures["lazy-informed"]["MeanD_histogram"],
        "meand_semi": semi.get("MeanD_histogram"),
        "alid_semi": semi.get("ALID"),
        "zebra_semi": semi.get("D_ECE"),
        "command_accuracy_before": commands.get("before"),
        "command_accuracy_after": commands.get("after"),
        "command_wer_before": commands.get("wer_before"),
        "command_wer_after": commands.get("wer_after"),
        "ignorant_meand_ratio": ratio,
        "wer_before": wer["before"],
        "wer_after": wer["after"],
        "wer_rise_points": rise,
        "eer_met": figures["ignorant"]["EER"] >= 0.35,
        "meand_met": ratio <= 0.25,
        "wer_met": rise <= 5.0,
    }


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _bits(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| α | EER % ignorant | EER % lazy | EER % semi | MeanD ignorant | MeanD lazy | "
        "MeanD semi | commands % before → after | WER % after (rise) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['alpha']} | {_pct(r['eer_ignorant'])} | {_pct(r['eer_lazy'])} | "
            f"{_pct(r['eer_semi'])} | {_bits(r['meand_ignorant'])} | {_bits(r['meand_lazy'])} | "
            f"{_bits(r['meand_semi'])} | {_pct(r['command_accuracy_before'])} → "
            f"{_pct(r['command_accuracy_after'])} | {_pct(r['wer_after'])} "
            f"({r['wer_rise_points']:+.1f}) |"
        )
    return "\n".join(lines)


def strongest_eer(r: dict[str, Any]) -> float:
    """The lowest EER of the three attackers of the protected speech (the strongest)."""
    return float(
        min(v for k in ("eer_ignorant", "eer_lazy", "eer_semi") if (v := r[k]) is not None)
    )


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Privacy against utility, one point per α: the semi-informed and the strongest
    attacker's EER, and the semi-informed MeanD, against the command accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r["eer_semi"] is not None and r["command_accuracy_after"]]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for i, r in enumerate(measured):
        x = 100 * r["command_accuracy_after"]
        first = i == 0
        left.scatter(x, 100 * r["eer_semi"], color="C0", label="semi-informed" if first else None)
        left.scatter(
            x, 100 * strongest_eer(r), color="C3", marker="x", label="strongest" if first else None
        )
        left.annotate(f"α {r['alpha']}", (x, 100 * r["eer_semi"]))
        right.scatter(x, r["meand_semi"], color="C1")
        right.annotate(f"α {r['alpha']}", (x, r["meand_semi"]))
    if measured:
        base = 100 * measured[0]["command_accuracy_before"]
        for axis in (left, right):
            axis.axvline(base, color="grey", linestyle=":", label="original speech")
            axis.set_xlabel("command accuracy after anonymisation, %")
            axis.legend()
    left.set_ylabel("EER, % (higher: more private)")
    right.set_ylabel("semi-informed MeanD, bits (lower: more private)")
    figure.suptitle("McAdams α: privacy against informed attackers vs command accuracy")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def sweep(alphas: list[str], speakers: int, wer_utterances: int, command: str) -> None:
    """Every α on the same subset, each with its semi-informed back-end; the results (common
    schema) and the curve written after each α (a long sweep that is stopped keeps what it
    measured)."""
    run = Run("protect-curve", command=command)
    runs: dict[str, Any] = {}
    run.figures["runs"] = runs
    with tempfile.TemporaryDirectory(prefix="voxmeter-sweep-") as scratch:
        corpus = Path(scratch) / "corpus"
        corpus.mkdir()
        chosen = subset_corpus(corpus, speakers)
        run.figures["subset"] = {
            "speakers": len(chosen),
            "rule": f"every {max(1, 125 // speakers)}th test speaker of {CORPUS.name}",
            "wer_utterances": wer_utterances,
        }
        rows: list[dict[str, Any]] = []
        for alpha in alphas:
            attacker, training = attacker_for(alpha, Path(scratch))
            one = one_alpha(
                corpus, Path(scratch) / f"report-{alpha}", alpha, wer_utterances, attacker
            )
            runs[alpha] = {**one, "attacker_training": training}
            rows.append(row(alpha, one))
            run.figures["table"] = rows
            run.write()
            plot(rows, CURVE)
            print(table(rows[-1:]).splitlines()[-1], f"({one['wall_seconds']:.0f} s)", flush=True)
    print(table(rows))
