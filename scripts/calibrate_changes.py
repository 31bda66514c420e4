"""Fit the pause change detector's thresholds (monitor/calibration/shipped/changes.json).

    PYTHONPATH=. .venv/bin/python scripts/calibrate_changes.py [--streams 6] [--level 0.998]

The windows are the daemon's own, as ``scripts/calibrate_consistency.py`` makes them: seeded
household streams (bench/household.py) of corpus *train* speakers — the half the turn
splitter's projection was not fitted on; the benchmarks use the test split — through the
daemon's VAD and windower, dry, in a simulated room, and in the room with a television. Each
window's best loud-frame change score at a pause and anywhere
(:func:`monitor.tracking.pauses.window_scores`) is taken; ``pause_threshold`` and
``anywhere_threshold`` are the ``--level`` quantiles of each over the windows of *one voice*
(one person ≥ 95 % of the truth's speech in its span, and the truth ≥ 80 % of the span: not a
television's part), all conditions together. Measured beside them: the share of two-voice
windows (two household voices of ≥ 0.5 s each) and of one-voice windows that the thresholds
split, per condition.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.acoustics import in_room
from bench.household import make_stream, overlaps, trimmed
from bench.rooms import daemon_windows
from monitor.audio.windows import SpeechWindow
from monitor.corpus.scan import scan_corpus
from monitor.features.change import cepstra
from monitor.features.fbank import ecapa_db
from monitor.tracking.pauses import SHIPPED, PauseModel, window_scores
from monitor.tracking.turns import load_change_models
from scripts.calibrate_turns import CORPUS, SEED

CONDITIONS = ("dry", "room", "tv")
ONE_VOICE = 0.95
SIDE_SECONDS = 0.5  # each voice's least speech in a two-voice window
COVERED = 0.8  # a one-voice window's truth covers this much of its span (else a television's)
SEARCH = {"prominence_db": 6.0, "loud_db": 25.0, "side_seconds": 0.3}


def kind_of(stream: Any, window: SpeechWindow) -> str:
    """one (one voice), two (two household voices of ≥ SIDE_SECONDS each), else other."""
    held = overlaps(stream.truth, window.start_seconds, window.end_seconds)
    total = sum(held.values())
    covered = total >= COVERED * (window.end_seconds - window.start_seconds)
    if covered and max(held.values()) >= ONE_VOICE * total:
        return "one"
    if sum(s >= SIDE_SECONDS for s in held.values()) >= 2:
        return "two"
    return "other"


def scores_of(streams: int, minutes: float) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """(dip, anywhere) scores of every window, per condition and kind."""
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        rows = [r["speaker"] for r in csv.DictReader(handle, delimiter="\t")
                if r["original_split"] == "train"]  # fmt: skip
    held = sorted(rows)[1::2]  # calibrate_turns.py fitted its projection on [::2]
    corpus = scan_corpus(CORPUS)
    speech = {s: [trimmed(u.path) for u in corpus.utterances_of(s)] for s in held}
    projection = load_change_models()["ecapa"]
    search = PauseModel(**SEARCH, pause_threshold=0.0, anywhere_threshold=0.0)
    seed = SEED + 48
    out: dict[str, dict[str, list[tuple[float, float]]]] = {
        c: {"one": [], "two": [], "other": []} for c in CONDITIONS
    }
    with tempfile.TemporaryDirectory() as folder:
        for index in range(streams):
            for condition in CONDITIONS:
                stream = make_stream(
                    index, speech=speech, pool=held, minutes=minutes, seed=seed,
                    folder=Path(folder),
                )  # fmt: skip
                if condition != "dry":
                    people = {*stream.household.members, *stream.household.strangers}
                    tv = [speech[s] for s in held if s not in people][:3]
                    stream, _ = in_room(
                        stream, seed=seed, index=index, tv_speech=tv if condition == "tv" else None
                    )
                for window in daemon_windows(stream.path):
                    fbank = ecapa_db(window.samples)
                    z = cepstra(fbank, projection.cepstra) @ projection.projection
                    out[condition][kind_of(stream, window)].append(window_scores(fbank, z, search))
            counts = {c: {k: len(v) for k, v in s.items()} for c, s in out.items()}
            print(f"stream {index + 1}/{streams} {json.dumps(counts)}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=6)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--level", type=float, default=0.998)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args()
    scores = scores_of(args.streams, args.minutes)
    one = np.array([p for c in CONDITIONS for p in scores[c]["one"]])
    pause, anywhere = (round(float(np.quantile(one[:, k], args.level)), 2) for k in (0, 1))

    def split(pairs: list[tuple[float, float]]) -> float | None:
        if not pairs:
            return None
        a = np.array(pairs)
        return round(float(np.mean((a[:, 0] >= pause) | (a[:, 1] >= anywhere))), 4)

    measured = {f"{c}_{k}": split(scores[c][k]) for c in CONDITIONS for k in ("one", "two")}
    print(json.dumps(measured, indent=1))
    report = {
        "command": "PYTHONPATH=. python scripts/calibrate_changes.py "
        f"--streams {args.streams} --minutes {args.minutes:g} --level {args.level:g}",
        "date": time.strftime("%Y-%m-%d"),
        "split": "train",
        "seed": SEED + 48,
        "windows": {c: {k: len(v) for k, v in s.items()} for c, s in scores.items()},
        "one_voice_quantiles": {
            f"{q:g}": {
                "pause": round(float(np.quantile(one[:, 0], q)), 2),
                "anywhere": round(float(np.quantile(one[:, 1], q)), 2),
            }
            for q in (0.99, 0.995, 0.999, 1.0)
        },
        "level": args.level,
        "model": SEARCH | {"pause_threshold": pause, "anywhere_threshold": anywhere},
        "measured_split_share": measured,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
