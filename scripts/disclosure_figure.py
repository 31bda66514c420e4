"""Render docs/images/disclosure-over-time.png from a real run of the daemon on corpus speech.

The README's picture is a measurement, not a drawing of what a household gets out of the box: a
database that does not exist yet, two test-split adults enrolled into it with
``voxmeter enroll --local`` (four utterances each) and no reference enrolment at all (the shipped
reference population, the corpus's train speakers, stands in). It writes one stream in which the
two members and a stranger (test split, so no one the shipped population holds) take turns with
their held-out utterances, runs ``voxmeter run`` on it with the daemon's defaults (the whole
daemon: VAD, windows, tracker, scorer, ledger; a file source read as fast as possible) and plots
the cumulative budget figure of every track the ledger holds against the stream's time, with the
default budget, the ceiling log2 N_pop and, where the reference cannot validate a figure, the
"at least" bound it vouches for.

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
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import soundfile as sf
from matplotlib.axes import Axes

from monitor.audio.file import read_audio
from monitor.settings.population import PopulationSettings
from monitor.settings.sections import BudgetSettings

REPO = Path(__file__).resolve().parent.parent
RATE = 16000
BUDGET = BudgetSettings()  # the daemon's defaults: the figure shows what a household gets
MEASURE = BUDGET.measure
POPULATION_SIZE = PopulationSettings().size


def household(corpus: Path) -> tuple[list[str], str]:
    """(the two members, the stranger): adults of the corpus's test split, whom the shipped
    reference population (train speakers) does not hold."""
    with open(corpus / "speakers.tsv", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["original_split"] == "test"]
    adults = [r["speaker"] for r in rows if int(r["age"]) >= 18]
    return adults[:2], adults[2]


def link_folder(target: Path, files: list[Path]) -> None:
    """A speaker folder of symlinks: enrolment reads the corpus in place (no audio copied)."""
    target.mkdir(parents=True, exist_ok=True)
    for path in files:
        (target / path.name).symlink_to(path)


def build_household(corpus: Path, work: Path) -> tuple[list[str], str]:
    """Link the members' enrolment utterances into ``work``; (members, stranger)."""
    members, stranger = household(corpus)
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


Series = dict[str, list[dict[str, Any]]]


def ledger_records(db: Path) -> tuple[Series, float]:
    """Per track, its figure records in stream order (with ``stream_end``); and the ceiling,
    log2 N_pop, the figures are stated against."""
    series: Series = {}
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT track, stream_end, figures FROM ledger_windows ORDER BY stream_end"
        ).fetchall()
    ceiling = float(np.log2(POPULATION_SIZE))
    for track, stream_end, figures in rows:
        record = json.loads(figures)
        ceiling = float(record["ceiling_bits"])
        series.setdefault(track, []).append({**record, "stream_end": stream_end})
    return series, ceiling


def plot_tracks(ax: Axes, series: Series) -> None:
    """Every track's budget figure over the stream, and (dashed, same colour) the "at least"
    bound the reference population vouches for where the figure lies beyond it."""
    label = "at least (vouched for)"
    for track, records in sorted(series.items()):
        minutes = np.asarray([r["stream_end"] for r in records]) / 60
        bits = [r["disclosures"][MEASURE][0] for r in records]
        (line,) = ax.step(minutes, bits, where="post", marker="o", markersize=3, label=track)
        bound = np.asarray([r.get("at_least", {}).get(MEASURE, np.nan) for r in records])
        if not np.all(np.isnan(bound)):
            ax.step(minutes, bound, where="post", color=line.get_color(), linestyle="--",
                    linewidth=1, alpha=0.8, label=label)  # fmt: skip
            label = "_"
    ax.axhline(BUDGET.bits, color="tab:red", linestyle="--", linewidth=1,
               label=f"budget {BUDGET.bits:g} bits")  # fmt: skip
    ax.set_title(f"every voice heard, {MEASURE}", fontsize=10)
    ax.set_xlabel("minutes into the stream")


def plot(series: Series, ceiling_bits: float, out: Path) -> None:
    """Left: one member's disclosure per feature as speech pools; right: every track's budget
    figure over the stream, with the budget and the ceiling."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6), dpi=100)
    member = series["member-a"]
    seconds = [r["pooled_speech_seconds"] for r in member]
    for feature in ("f0", "phone", "embedding", "combined"):
        bits = [r["disclosures"][f"{feature}.lid"][0] for r in member]
        left.plot(seconds, bits, marker="o", markersize=3, label=feature)
    left.set_title("member-a, per feature (LID)", fontsize=10)
    left.set_xlabel("seconds of speech heard")
    plot_tracks(right, series)
    ceiling = f"ceiling log2 N_pop = {ceiling_bits:.1f}"
    # A stranger's figure is about the closest identity and may be negative (the voice argues
    # against every one of them): the axis goes down as far as the lowest figure.
    lowest = min(r["disclosures"][MEASURE][0] for records in series.values() for r in records)
    for ax in (left, right):
        ax.axhline(ceiling_bits, color="grey", linestyle=":", linewidth=1, label=ceiling)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_ylabel("disclosure (bits)")
        ax.set_ylim(min(0.0, lowest) - 1.5, ceiling_bits + 1.5)
        ax.legend(loc="upper right", bbox_to_anchor=(1.0, 0.94), fontsize=7, ncols=2)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, pil_kwargs={"optimize": True})


def measure(corpus: Path, work: Path) -> tuple[Series, float]:
    """Enrol the members into a new database, run the daemon on the stream with its defaults
    (only the metrics endpoint off: the machine may be running a daemon already), and read
    the ledger back."""
    members, stranger = build_household(corpus, work)
    write_stream(corpus, members, stranger, work / "stream.wav")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    db = str(work / "figure.db")
    run(["enroll", str(work / "household"), "--db", db, "--utterances", "4", "--local"], env)
    source = f"file:{work / 'stream.wav'}"
    run(["run", "--db", db, "--source", source, "--fast", "--set", "prometheus.enabled=false"], env)
    return ledger_records(work / "figure.db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    corpus = REPO.parent / "shared" / "data" / "speechocean762"
    parser.add_argument("corpus", nargs="?", type=Path, default=corpus)
    parser.add_argument("--out", type=Path, default=REPO / "docs/images/disclosure-over-time.png")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="voxmeter-figure-") as tmp:
        series, ceiling = measure(options.corpus.resolve(), Path(tmp))
    options.out.parent.mkdir(parents=True, exist_ok=True)
    plot(series, ceiling, options.out)
    print(f"{options.out}: {len(series)} tracks, ceiling {ceiling:.2f} bits, "
          f"{options.out.stat().st_size} bytes")  # fmt: skip


if __name__ == "__main__":
    main()
