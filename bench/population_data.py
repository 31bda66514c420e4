"""Corpus windows scored for the population benchmark: every score it needs, computed once.

Each speaker's template pools its first TEMPLATE_UTTERANCES utterances (about 12 s of speech,
the calibration's template length); each later utterance is one window (about 3 s: one daemon
window), and the running pools of those windows are the speaker's evidence over a day. Every
window and pool is scored once against all 250 templates per feature; the benchmark then picks
columns (a reference set, a measured set of N) and fuses them as the scorer does.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.calibration.buckets import CalibrationSet
from monitor.corpus import scan_corpus
from monitor.features.base import FEATURE_NAMES, Observation, TemplateBatch, get_feature
from monitor.features.extract import FeatureCache, FileFeatures, default_cache_dir, extract_many
from monitor.scoring.scorer import PreparedTemplates

TEMPLATE_UTTERANCES = 4
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Scored:
    """Evidence (windows or running pools) scored against every template.

    ``raw``: feature → (W, S) similarity to the S speakers' templates; ``speaker`` (W,) index
    of the evidence's speaker; ``seconds`` (W,) of speech behind it; ``order`` (W,): the
    window's place in its speaker's day (1 = first window)."""

    raw: dict[str, FloatArray]
    speaker: npt.NDArray[np.int64]
    seconds: FloatArray
    order: npt.NDArray[np.int64]

    def take(self, rows: npt.NDArray[np.bool_]) -> Scored:
        return Scored(
            {k: v[rows] for k, v in self.raw.items()},
            self.speaker[rows],
            self.seconds[rows],
            self.order[rows],
        )


@dataclass(frozen=True)
class CorpusScores:
    speakers: list[str]  # S speaker ids, template column order
    split: dict[str, str]  # speaker → "train" / "test"
    windows: Scored  # each held-out utterance alone
    days: Scored  # running pools of each speaker's held-out utterances


def read_split(corpus: Path) -> dict[str, str]:
    """speakers.tsv's speaker → original split."""
    with (corpus / "speakers.tsv").open(newline="") as handle:
        return {
            row["speaker"]: row["original_split"] for row in csv.DictReader(handle, delimiter="\t")
        }


def _files(corpus: Path, limit: int | None, jobs: int) -> dict[str, list[FileFeatures]]:
    scanned = scan_corpus(corpus)
    split = read_split(corpus)
    chosen: list[str] = []
    for name in ("train", "test"):
        chosen += sorted(s for s in scanned.speakers if split.get(s) == name)[:limit]
    wanted = {s: [str(Path(u.path).absolute()) for u in scanned.utterances_of(s)] for s in chosen}
    extraction = extract_many(
        [p for paths in wanted.values() for p in paths],
        FeatureCache(default_cache_dir()),
        jobs=jobs,
    )
    out: dict[str, list[FileFeatures]] = {}
    for speaker, paths in sorted(wanted.items()):
        files = [extraction.files.get(p) for p in paths]
        kept = [f for f in files if f is not None and f.speech_seconds > 0]
        if len(kept) > TEMPLATE_UTTERANCES:
            out[speaker] = kept
    return out


def _score(
    prepared: dict[str, PreparedTemplates], evidence: list[dict[str, Observation]]
) -> dict[str, FloatArray]:
    return {
        name: np.array(p.similarities([e[name] for e in evidence]), dtype=np.float64)
        for name, p in prepared.items()
    }


def corpus_scores(corpus: Path, *, limit: int | None = None, jobs: int = 1) -> CorpusScores:
    """Features (cached), templates, windows and day pools of the corpus, scored once."""
    files = _files(corpus, limit, jobs)
    speakers = sorted(files)
    features = {name: get_feature(name) for name in FEATURE_NAMES}
    templates = {
        name: TemplateBatch.from_observations(
            [
                f.pool([x.observations[name] for x in files[s][:TEMPLATE_UTTERANCES]])
                for s in speakers
            ]
        )
        for name, f in features.items()
    }
    prepared = {name: PreparedTemplates(features[name], templates[name]) for name in features}
    windows: list[dict[str, Observation]] = []
    pools: list[dict[str, Observation]] = []
    meta: list[tuple[int, float, int]] = []
    day_meta: list[tuple[int, float, int]] = []
    for index, speaker in enumerate(speakers):
        held = files[speaker][TEMPLATE_UTTERANCES:]
        total = 0.0
        for k, window in enumerate(held, start=1):
            windows.append(window.observations)
            meta.append((index, window.speech_seconds, k))
            total += window.speech_seconds
            pools.append(
                {n: f.pool([w.observations[n] for w in held[:k]]) for n, f in features.items()}
            )
            day_meta.append((index, total, k))

    def scored(
        evidence: list[dict[str, Observation]], rows: list[tuple[int, float, int]]
    ) -> Scored:
        columns = list(zip(*rows, strict=True))
        return Scored(
            _score(prepared, evidence),
            np.array(columns[0], dtype=np.int64),
            np.array(columns[1], dtype=np.float64),
            np.array(columns[2], dtype=np.int64),
        )

    return CorpusScores(
        speakers, read_split(corpus), scored(windows, meta), scored(pools, day_meta)
    )


def _znorm(x: FloatArray) -> FloatArray:
    """Row z-scores (ddof 0), 0 on constant rows: the scorer's _znorm, for (W, n)."""
    centred = x - x.mean(axis=1, keepdims=True)
    sd = np.sqrt((centred**2).mean(axis=1, keepdims=True))
    return np.where(sd > 0, centred / np.where(sd > 0, sd, 1.0), 0.0)


def fused_rows(
    scored: Scored, columns: npt.NDArray[np.int64], calibration: CalibrationSet
) -> FloatArray:
    """The scorer's ``combined`` row (W, n) of each piece of evidence against its own columns
    (W, n) of templates: Σ_f w_f·z_f with the fusion weights of its length."""
    rows = np.arange(columns.shape[0])[:, None]
    fused = np.zeros(columns.shape)
    names = list(scored.raw)
    weights = np.array(
        [[calibration.fusion_weights(s, names)[n] for n in names] for s in scored.seconds]
    )
    for k, name in enumerate(names):
        fused += weights[:, k : k + 1] * _znorm(scored.raw[name][rows, columns])
    return fused


def bucket_parameters(
    seconds: FloatArray, calibration: CalibrationSet, feature: str = "combined"
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(bucket edge, LID weight, α, β) of each length's calibration bucket, (W,) each."""
    buckets = [calibration.lookup(feature, float(s))[0] for s in seconds]
    return (
        np.array([b.seconds for b in buckets]),
        np.array([b.lid_weight for b in buckets]),
        np.array([b.alpha for b in buckets]),
        np.array([b.beta for b in buckets]),
    )
