"""Fit the turn splitter's change models (monitor/calibration/shipped/turns.json).

    PYTHONPATH=. .venv/bin/python scripts/calibrate_turns.py [--speakers 125]

Corpus *train* split only (the tracking benchmark's speakers are the test split), halved: the
discriminant projection (:func:`monitor.features.change.fit_projection`, cepstra 1..30 → 12
directions) is fitted on the 1 s segment means of one half's speakers, the band on windows of
the other half. Windows as the daemon's windower makes them: webrtcvad speech of each
speaker's utterances, each trimmed of its leading and trailing silence, joined; 2–3 s of
speech (70 % full 3 s windows). *One-speaker* windows are cut from one speaker's joined speech
(so they cross that speaker's utterance joins, as a turn's windows do); *two-speaker* windows
join speaker A's speech and speaker B's at a uniform point ≥ 0.5 s from either end (nearer an
end, under 0.5 s of the other voice is left, which neither splitter can place).

Per front end (ECAPA's filterbanks; CAM++'s Kaldi ones are measured too, not shipped: they
separate voices worse, so the daemon computes ECAPA's frames for CAM++): ``high`` = the 99.5 %
quantile of one-speaker windows' best scores (half the 1 % false-change rate of the part
cosines goes to the score alone), ``low`` = the 5 % quantile of two-speaker windows'. Then
both splitters run on a fresh draw of windows of the same speakers, with the ECAPA embedding
and the shipped calibration's ``change_cosine``: the one that embedded every 1 s part, and the
scored one (:class:`monitor.tracking.turns.TurnSplitter`): windows cut, changes missed, cut
error, parts embedded per window; all into the file.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np

from monitor.audio.file import read_audio
from monitor.audio.frames import RATE_HZ
from monitor.audio.vad import speech_only
from monitor.audio.windows import SpeechWindow
from monitor.calibration.buckets import load_default
from monitor.corpus.scan import scan_corpus
from monitor.features.base import get_feature, set_embedding_backend
from monitor.features.change import cepstra, fit_projection, mean_shift_scores, segment_means
from monitor.features.fbank import ecapa_db
from monitor.features.fbank import kaldi_fbank as _kaldi
from monitor.settings.config import load_config
from monitor.tracking.thresholds import tracker_thresholds_for
from monitor.tracking.turns import SHIPPED, ChangeModel, TurnSplitter, WindowFrames

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "speechocean762"
SEED = 20261126
EDGE_SECONDS = 0.5
CEPSTRA = 30
DIMS = 12
HIGH_LEVEL = 0.995  # of one-speaker windows' best scores
LOW_LEVEL = 0.05  # of two-speaker windows' best scores


def _trimmed(audio: np.ndarray) -> np.ndarray:
    """As bench/household.trimmed: 50 ms frames 40 dB below the peak dropped at both ends."""
    frame = RATE_HZ // 20
    n = audio.shape[0] // frame
    if n == 0:
        return audio
    energy = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1))
    loud = np.flatnonzero(energy > energy.max() * 10 ** (-40 / 20))
    return audio[loud[0] * frame : (loud[-1] + 1) * frame]


def speech_of(speakers: list[str], seconds: float) -> dict[str, np.ndarray]:
    """Each speaker's VAD speech of trimmed utterances, joined, up to ``seconds``."""
    corpus = scan_corpus(CORPUS)
    out = {}
    for speaker in speakers:
        pieces, total = [], 0
        for utterance in corpus.utterances_of(speaker):
            piece = speech_only(_trimmed(read_audio(utterance.path)[0]), RATE_HZ)
            pieces.append(piece.astype(np.float32))
            total += piece.shape[0]
            if total >= seconds * RATE_HZ:
                break
        out[speaker] = np.concatenate(pieces)
    return out


def windows(
    speech: dict[str, np.ndarray], per_speaker: int, rng: np.random.Generator
) -> tuple[list[np.ndarray], list[np.ndarray], list[int]]:
    """(one-speaker windows, two-speaker windows, each one's change sample)."""
    names = sorted(speech)
    same, two, change = [], [], []
    edge = round(EDGE_SECONDS * RATE_HZ)
    for k, name in enumerate(names):
        audio = speech[name]
        for _ in range(per_speaker):
            length = round(RATE_HZ * (3.0 if rng.random() < 0.7 else rng.uniform(2.0, 3.0)))
            if audio.shape[0] > length:
                start = int(rng.integers(0, audio.shape[0] - length))
                same.append(audio[start : start + length])
            other = speech[names[(k + 1 + int(rng.integers(len(names) - 1))) % len(names)]]
            cut = int(rng.integers(edge, length - edge + 1))
            if audio.shape[0] > cut and other.shape[0] > length - cut:
                a0 = int(rng.integers(0, audio.shape[0] - cut + 1))
                b0 = int(rng.integers(0, other.shape[0] - (length - cut) + 1))
                two.append(np.concatenate([audio[a0 : a0 + cut], other[b0 : b0 + length - cut]]))
                change.append(cut)
    return same, two, change


def kaldi_fbank(signal: np.ndarray) -> np.ndarray:
    """CAM++'s frames before their mean (the stream's ``computed()``; the mean changes no score)."""
    return _kaldi(signal)


def projection_of(speech: dict[str, np.ndarray], fbank: Any) -> np.ndarray:
    """The discriminant fitted on these speakers' 1 s segment means."""
    means, labels = [], []
    for name, audio in speech.items():
        rows = segment_means(cepstra(fbank(audio), CEPSTRA), 100)
        means.append(rows)
        labels += [name] * rows.shape[0]
    return fit_projection(np.concatenate(means), labels, DIMS)


def best_scores(fbanks: list[np.ndarray], projection: np.ndarray) -> np.ndarray:
    """Each window's best change score (the splitter's first step)."""
    return np.array([mean_shift_scores(cepstra(f, CEPSTRA) @ projection).best()[1] for f in fbanks])


def _old_cuts(vectors: np.ndarray, change_cosine: float) -> list[int]:
    """The splitter of before: adjacent 1 s parts' cosine below ``change_cosine`` is a change."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = np.einsum("ij,ij->i", unit[:-1], unit[1:])
    return [(int(k) + 1) * RATE_HZ for k in np.flatnonzero(cosines < change_cosine)]


def compare(
    same: list[np.ndarray], two: list[np.ndarray], change: list[int], model: ChangeModel
) -> dict[str, Any]:
    """Both splitters on the same windows (ECAPA, the shipped calibration's change cosine)."""
    set_embedding_backend("ecapa")
    embedding = get_feature("embedding")
    calibration = load_default("ecapa")
    thresholds = tracker_thresholds_for(load_config(None, []), calibration)
    assert thresholds is not None, "the shipped ECAPA calibration has no tracker statistics"

    def embed(samples: np.ndarray) -> np.ndarray:
        return embedding.observe(samples, RATE_HZ).values

    new = TurnSplitter(embed, change_cosine=thresholds.change, models={"ecapa": model})
    result: dict[str, Any] = {"change_cosine": thresholds.change}
    for kind, group in (("one_speaker", same), ("two_speakers", two)):
        old_cut, new_cut, old_parts, errors_old, errors_new = 0, 0, 0, [], []
        before = new.embedded
        for k, samples in enumerate(group):
            edges = [*range(0, samples.shape[0] - RATE_HZ + 1, RATE_HZ), samples.shape[0]]
            vectors = np.stack([embed(samples[a:b]) for a, b in itertools.pairwise(edges)])
            old_parts += vectors.shape[0]
            cuts = _old_cuts(vectors, thresholds.change)
            seconds = samples.shape[0] / RATE_HZ
            window = SpeechWindow(samples, 0.0, seconds, seconds)
            pieces = new.split(window, WindowFrames(ecapa_db(samples), "ecapa"))
            found = list(itertools.accumulate(p.samples.shape[0] for p in pieces))[:-1]
            old_cut += bool(cuts)
            new_cut += bool(found)
            if kind == "two_speakers":
                errors_old += [min(abs(c - change[k]) for c in cuts) / RATE_HZ] if cuts else []
                errors_new += [min(abs(c - change[k]) for c in found) / RATE_HZ] if found else []
        n = len(group)
        row = {
            "windows": n,
            "cut_old": round(old_cut / n, 4),
            "cut_new": round(new_cut / n, 4),
            "parts_embedded_per_window_old": round(old_parts / n, 3),
            "parts_embedded_per_window_new": round((new.embedded - before) / n, 3),
        }
        if kind == "two_speakers":
            row["cut_error_median_seconds_old"] = round(float(np.median(errors_old)), 3)
            row["cut_error_median_seconds_new"] = round(float(np.median(errors_new)), 3)
        result[kind] = row
        print(kind, json.dumps(row), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--speakers", type=int, default=125)
    parser.add_argument("--per-speaker", type=int, default=24, help="windows for the band")
    parser.add_argument("--compare-per-speaker", type=int, default=8, help="a fresh draw")
    parser.add_argument("--no-compare", action="store_true", help="the models only (no network)")
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument("--speech-cache", type=Path, help="a pickle of the joined speech")
    args = parser.parse_args()
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        rows = [r["speaker"] for r in csv.DictReader(handle, delimiter="\t")
                if r["original_split"] == "train"]  # fmt: skip
    if args.speech_cache and args.speech_cache.is_file():
        speech = pickle.loads(args.speech_cache.read_bytes())
    else:
        speech = speech_of(rows[: args.speakers], 40.0)
        if args.speech_cache:
            args.speech_cache.write_bytes(pickle.dumps(speech))
    speech = {k: speech[k] for k in rows[: args.speakers]}
    names = sorted(speech)
    fit = {k: speech[k] for k in names[::2]}
    held = {k: speech[k] for k in names[1::2]}
    same, two, _ = windows(held, args.per_speaker, np.random.default_rng(SEED))
    report: dict[str, Any] = {
        "command": "PYTHONPATH=. python scripts/calibrate_turns.py",
        "date": time.strftime("%Y-%m-%d"),
        "split": "train",
        "speakers": {"projection": len(fit), "band": len(held)},
        "seed": SEED,
        "windows": {"one_speaker": len(same), "two_speakers": len(two)},
        "levels": {"high": HIGH_LEVEL, "low": LOW_LEVEL},
        "models": {},
        # CAM++'s Kaldi frames separate voices worse: the daemon computes ECAPA's for it
        "not_shipped": {},
    }
    models = {}
    for front_end, fbank in (("ecapa", ecapa_db), ("kaldi", kaldi_fbank)):
        projection = projection_of(fit, fbank)
        s = best_scores([fbank(w) for w in same], projection)
        t = best_scores([fbank(w) for w in two], projection)
        model = ChangeModel(
            cepstra=CEPSTRA,
            projection=projection,
            low=round(float(np.quantile(t, LOW_LEVEL)), 3),
            high=round(float(np.quantile(s, HIGH_LEVEL)), 3),
        )
        models[front_end] = model
        measured = {
            "auc": round(float(np.mean(t[:, None] > s[None, :])), 4),
            "one_speaker_below_low": round(float(np.mean(s < model.low)), 4),
            "one_speaker_above_high": round(float(np.mean(s > model.high)), 4),
            "two_speakers_above_high": round(float(np.mean(t > model.high)), 4),
        }
        print(front_end, model.low, model.high, json.dumps(measured), flush=True)
        report["models" if front_end == "ecapa" else "not_shipped"][front_end] = {
            "cepstra": CEPSTRA,
            "low": model.low,
            "high": model.high,
            "measured": measured,
            "projection": np.round(projection, 6).tolist(),
        }
    if not args.no_compare:  # on a fresh draw of windows: the band measured out of sample
        fresh = windows(held, args.compare_per_speaker, np.random.default_rng(SEED + 1))
        report["splitters"] = compare(*fresh, models["ecapa"])
    args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
