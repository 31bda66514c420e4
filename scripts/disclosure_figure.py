"""Render docs/images/disclosure-over-time.png from a real run of the daemon on corpus speech.

The README's picture is a measurement, not a drawing: this script builds a small household from
the corpus (120 test-split speakers as the reference population, two adults enrolled as local
profiles from four utterances each), writes one stream in which the two members and a stranger
take turns with their held-out utterances, runs ``voxmeter run`` on it (the whole daemon: VAD,
windows, tracker, scorer, ledger; a file source read as fast as possible) and plots the
cumulative ``combined.lid`` figure of every track the ledger holds against the stream's time,
with the budget and the ceiling log2 N.

    PYTHONPATH=. python scripts/disclosure_figure.py [CORPUS] [--out docs/images/...png]

Nothing is stored but the PNG: the audio, the database and the log live in a temporary folder.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import soundfile as sf

from monitor.audio.file import read_audio

REPO = Path(__file__).resolve().parent.parent
RATE = 16000
REFERENCE_SPEAKERS = 120
BUDGET_BITS = 5.0
MEASURE = "combined.lid"


def household(corpus: Path) -> tuple[list[str], list[str], str]:
    """(reference speakers, the two members, the stranger) from the corpus's test split."""
    with open(corpus / "speakers.tsv", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["original_split"] == "test"]
    adults = [r["speaker"] for r in rows if int(r["age"]) >= 18]
    members, stranger = adults[:2], adults[2]
    chosen = set(members) | {stranger}
    reference = [r["speaker"] for r in rows if r["speaker"] not in chosen][:REFERENCE_SPEAKERS]
    return reference, members, stranger


def link_folder(target: Path, files: list[Path]) -> None:
    """A speaker folder of symlinks: enrolment reads the corpus in place (no audio copied)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in files:
        (target / path.name).symlink_to(path)


def build_household(corpus: Path, work: Path) -> tuple[list[str], str]:
    """Link the reference population and the members into ``work``; (members, stranger)."""
    reference, members, stranger = household(corpus)
    for speaker in reference:
        link_folder(work / "reference" / speaker, sorted((corpus / speaker).glob("*.flac")))
    for alias, speaker in zip(("member-a", "member-b"), members, strict=True):
        link_folder(work / "household" / alias, sorted((corpus / speaker).glob("*.flac"))[:4])
    return members, stranger


def write_stream(corpus: Path, members: list[str], stranger: str, out: Path) -> None:
    """Turns of held-out speech: member a, member b, the stranger, then each again."""
    held = {m: sorted((corpus / m).glob("*.flac"))[4:] for m in members}
    strange = sorted((corpus / stranger).glob("*.flac"))
    turns = [held[members[0]][:3], held[members[1]][:3], strange[:5],
             held[members[0]][3:], held[members[1]][3:], strange[5:]]  # fmt: skip
    pieces = []
    for turn in turns:
        for path in turn:
            audio, _ = read_audio(path)
            pieces += [audio, np.zeros(RATE // 2, dtype=np.float32)]
        pieces.append(np.zeros(RATE, dtype=np.float32))
    sf.write(out, np.concatenate(pieces), RATE, subtype="PCM_16")


def run(args: list[str], env: dict[str, str]) -> None:
    """One voxmeter command; its output goes to the terminal, a failure stops the script."""
    subprocess.run([sys.executable, "-m", "monitor.cli", *args], check=True, env=env)


Series = dict[str, list[dict]]


def ledger_records(db: Path) -> tuple[Series, int]:
    """Per track, its figure records in stream order (with ``stream_end``); and N, the templates."""
    series: Series = {}
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT track, stream_end, figures FROM ledger_windows ORDER BY stream_end"
        ).fetchall()
    templates = 0
    for track, stream_end, figures in rows:
        record = json.loads(figures)
        templates = max(templates, int(record["templates"]))
        series.setdefault(track, []).append({**record, "stream_end": stream_end})
    return series, templates


def plot(series: Series, ceiling_bits: float, out: Path) -> None:
    """Left: one member's disclosure per feature as speech pools; right: every track's budget
    figure over the stream, with the budget and the ceiling."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.4), dpi=100)
    member = series["member-a"]
    seconds = [r["pooled_speech_seconds"] for r in member]
    for feature in ("f0", "phone", "embedding", "combined"):
        bits = [r["disclosures"][f"{feature}.lid"][0] for r in member]
        left.plot(seconds, bits, marker="o", markersize=3, label=feature)
    left.set_title("member-a, per feature (LID)", fontsize=10)
    left.set_xlabel("seconds of speech heard")
    for track, records in sorted(series.items()):
        minutes = np.asarray([r["stream_end"] for r in records]) / 60
        bits = [r["disclosures"][MEASURE][0] for r in records]
        right.step(minutes, bits, where="post", marker="o", markersize=3, label=track)
    right.axhline(BUDGET_BITS, color="tab:red", linestyle="--", linewidth=1, label="budget")
    right.set_title(f"every voice heard, {MEASURE}", fontsize=10)
    right.set_xlabel("minutes into the stream")
    for ax, where in ((left, (0.02, 0.6)), (right, (0.45, 0.05))):
        ax.axhline(ceiling_bits, color="grey", linestyle=":", linewidth=1, label="ceiling log2 N")
        ax.set_ylabel("disclosure (bits)")
        ax.set_ylim(0, ceiling_bits + 0.4)
        ax.legend(loc="lower left", bbox_to_anchor=where, fontsize=7, ncols=2)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, pil_kwargs={"optimize": True})


def measure(corpus: Path, work: Path) -> tuple[Series, int]:
    """Enrol, run the daemon on the stream, and read the ledger back."""
    members, stranger = build_household(corpus, work)
    write_stream(corpus, members, stranger, work / "stream.wav")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    db = str(work / "figure.db")
    run(["enroll", str(work / "reference"), "--db", db, "--utterances", "3"], env)
    run(["enroll", str(work / "household"), "--db", db, "--utterances", "4", "--local"], env)
    settings = ["--set", "prometheus.enabled=false", "--set", f"budget.bits={BUDGET_BITS}"]
    source = f"file:{work / 'stream.wav'}"
    run(["run", "--config", str(REPO / "config.toml"), "--db", db, "--source", source, "--fast",
         *settings], env)  # fmt: skip
    return ledger_records(work / "figure.db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus = REPO.parent / "shared" / "data" / "speechocean762"
    parser.add_argument("corpus", nargs="?", type=Path, default=corpus)
    parser.add_argument("--out", type=Path, default=REPO / "docs/images/disclosure-over-time.png")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="voxmeter-figure-") as tmp:
        series, n = measure(options.corpus.resolve(), Path(tmp))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    plot(series, float(np.log2(n)), options.out)
    print(f"{options.out}: {len(series)} tracks, N = {n}, {options.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
