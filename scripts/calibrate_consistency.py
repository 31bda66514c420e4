"""Fit the window-consistency test's thresholds (monitor/calibration/shipped/consistency.json).

    PYTHONPATH=. .venv/bin/python scripts/calibrate_consistency.py [--streams 16] [--minutes 4]

A window whose parts are not one voice (a television filling a pause, the next speaker's
first words) must not be scored as one voice (:mod:`monitor.tracking.consistency`). The test is
the window's best change score (:func:`monitor.features.change.mean_shift_scores` on the turn
splitter's projected cepstra, ``turns.json``: no loudness in them, so no level cue). Its
threshold is the quantile of *one-voice* windows' best scores at each window length, read at
the configured false-inconsistent rate.

The windows are the daemon's own: seeded household streams (bench/household.py) of corpus
*train* speakers — the half of them ``turns.json``'s projection was *not* fitted on; the
tracking benchmark uses the test split — through the daemon's VAD and windower (the
configured defaults), both dry and in a simulated room (bench/rooms.py: image-source
responses, RT60 0.2–0.8 s, each person 0.5–4 m from the microphone, pink noise 30 dB below in
the room). (Clean speech cut into windows by hand leaves out what the VAD keeps — a hangover,
a breath, a reverberant tail — and its one-voice scores were far lower: a threshold read off
them refused 13 % of real reverberant windows.) A window is *one voice* when one person holds
≥ 95 % of the truth's speech in its span; its quantiles are taken over dry and room windows
together. Lengths with fewer than ``MIN_WINDOWS`` one-voice windows take the next longer
length's thresholds (a shorter window's best score has fewer candidates: no higher).

Measured and written beside them: at each shipped rate, the share refused of one-voice
windows (dry, room, and room with a television 18 dB below: ``tv``), of windows holding two
household voices (each ≥ 0.3 s), and of windows holding a television part (tv windows whose
truth covers < 80 % of their span).
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

from bench.household import make_stream, overlaps, trimmed
from bench.rooms import daemon_windows, in_room
from monitor.audio.windows import SpeechWindow
from monitor.corpus.scan import scan_corpus
from monitor.features.change import cepstra, mean_shift_scores
from monitor.features.fbank import ecapa_db
from monitor.tracking.consistency import LENGTHS, LEVELS, SHIPPED
from monitor.tracking.turns import load_change_models
from scripts.calibrate_turns import CORPUS, SEED

MIN_WINDOWS = 300
ONE_VOICE = 0.95
CONDITIONS = ("dry", "room", "tv")


def kind_of(stream: Any, window: SpeechWindow, condition: str) -> str:
    """one (one voice), two (two household voices), tv (a television part), else other."""
    held = overlaps(stream.truth, window.start_seconds, window.end_seconds)
    total = sum(held.values())
    span = window.end_seconds - window.start_seconds
    if condition == "tv" and total < 0.8 * span:
        return "tv"
    if total > 0 and max(held.values()) >= ONE_VOICE * total:
        return "one"
    if sum(s >= 0.3 for s in held.values()) >= 2:
        return "two"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args()
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        rows = [r["speaker"] for r in csv.DictReader(handle, delimiter="\t")
                if r["original_split"] == "train"]  # fmt: skip
    held = sorted(rows)[1::2]  # calibrate_turns.py fitted its projection on [::2]
    corpus = scan_corpus(CORPUS)
    speech = {s: [trimmed(u.path) for u in corpus.utterances_of(s)] for s in held}
    model = load_change_models()["ecapa"]
    seed = SEED + 29
    scores: dict[str, dict[str, list[tuple[float, float]]]] = {
        c: {"one": [], "two": [], "tv": [], "other": []} for c in CONDITIONS
    }
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.streams):
            for condition in CONDITIONS:
                stream = make_stream(
                    index, speech=speech, pool=held, minutes=args.minutes, seed=seed,
                    folder=Path(folder),
                )  # fmt: skip
                if condition != "dry":
                    people = {*stream.household.members, *stream.household.strangers}
                    tv = [speech[s] for s in held if s not in people][:3]
                    stream, _ = in_room(
                        stream, seed=seed, index=index, tv_speech=tv if condition == "tv" else None
                    )
                for window in daemon_windows(stream.path):
                    projected = cepstra(ecapa_db(window.samples), model.cepstra) @ model.projection
                    best = mean_shift_scores(projected).best()[1]
                    kind = kind_of(stream, window, condition)
                    scores[condition][kind].append((window.speech_seconds, best))
            counts = {c: {k: len(v) for k, v in s.items()} for c, s in scores.items()}
            print(f"stream {index + 1}/{args.streams} {json.dumps(counts)}", flush=True)
    one = np.array(scores["dry"]["one"] + scores["room"]["one"])
    bucket = np.searchsorted(np.array(LENGTHS), one[:, 0] + 1e-9, side="right") - 1
    quantiles = np.zeros((len(LENGTHS), len(LEVELS)))
    used = [0] * len(LENGTHS)
    for j in reversed(range(len(LENGTHS))):
        values = one[bucket == j, 1] if j < len(LENGTHS) - 1 else one[bucket >= j, 1]
        used[j] = int(values.size)
        if values.size >= MIN_WINDOWS or j == len(LENGTHS) - 1:
            quantiles[j] = np.quantile(values, LEVELS)
        else:
            quantiles[j] = quantiles[j + 1]

    def refused(pairs: list[tuple[float, float]], k: int) -> float | None:
        if not pairs:
            return None
        a = np.array(pairs)
        j = np.clip(np.searchsorted(np.array(LENGTHS), a[:, 0] + 1e-9, side="right") - 1, 0, None)
        return round(float(np.mean(a[:, 1] > quantiles[j, k])), 4)

    measured = {
        f"{1 - level:g}": {
            f"{c}_{kind}": refused(scores[c][kind], k)
            for c in CONDITIONS
            for kind in ("one", "two", "tv")
            if scores[c][kind]
        }
        for k, level in enumerate(LEVELS)
    }
    print(json.dumps(measured, indent=1))
    report = {
        "command": "PYTHONPATH=. python scripts/calibrate_consistency.py "
        f"--streams {args.streams} --minutes {args.minutes:g}",
        "date": time.strftime("%Y-%m-%d"),
        "split": "train",
        "speakers": len(held),
        "seed": seed,
        "statistic": "best GLR change score of the window (turns.json's ecapa projection)",
        "windows": {c: {k: len(v) for k, v in s.items()} for c, s in scores.items()},
        "one_voice_windows_per_length": used,
        "lengths_seconds": list(LENGTHS),
        "levels": list(LEVELS),
        "quantiles": np.round(quantiles, 4).tolist(),
        "measured_refused_share_by_rate": measured,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
