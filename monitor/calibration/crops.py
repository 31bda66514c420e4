"""Short windows and who is speaking, calibrated on crops of the dev corpus.

The live windower ends a window early at a turn, so the scorer meets windows of 1–3 s of
speech; whole corpus utterances (≈ 5 s) cannot calibrate them. Here every dev utterance is
cropped to its first ``L`` seconds of speech, each crop observed under every feature, and:

- the 1 s and 2 s buckets are fitted with the eq. 6 protocol, the crop of the first test
  utterance standing for the test (templates as in every bucket: 12 s of other utterances);
- the tracker's cosine distributions are kept per window length: a crop against its own
  speaker's template and against every other speaker's (``profile_*``), and crop against crop
  of another utterance of the same speaker or of another speaker (``window_*``). The tracker
  and the turn splitter take their thresholds from these quantiles
  (:func:`monitor.tracking.thresholds.tracker_thresholds`), never from hand-set cosines.

The same statistics are kept for a narrow-band device (``tracking_narrow``,
:func:`narrow_statistics`): every utterance band-limited as an 8 kHz device delivers it
(:func:`monitor.audio.band.band_limit`) before its crops are cut, and the templates pooled from
the band-limited whole utterances, as ``voxmeter enroll`` makes the narrow-band copies. The
daemon reads a narrow-band stream's thresholds off these.

Crops are cached beside the feature cache (``crops/``), keyed like it by path, size and
modification time, plus the length, the band and the feature's version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.calibration.cohort import COHORT_TOP, normalised_trials
from monitor.calibration.protocol import PooledTrials, plan_splits, pool_trials
from monitor.corpus.speakers import SpeakerUtterances
from monitor.features.base import get_feature

SHORT_BUCKETS: tuple[float, ...] = (1.0, 2.0)
"""Buckets fitted on crops (shorter than any whole utterance of the corpus)."""
TRACKING_LENGTHS: tuple[float, ...] = (1.0, 2.0, 3.0)
"""Window lengths whose embedding cosine distributions are kept for the tracker."""
QUANTILES = np.round(np.concatenate([np.linspace(0, 0.05, 51), np.linspace(0.06, 0.94, 89),
                                     np.linspace(0.95, 1.0, 51)]), 4)  # fmt: skip
"""Levels stored: fine in both tails, where thresholds are read."""

WHOLE = math.inf
"""The crop length that stands for the whole utterance's speech (narrow-band templates)."""

Crops = dict[float, dict[str, npt.NDArray[np.float64]]]
"""One speaker's crops: length → feature → (K, D) observations, rows in utterance order."""


def _crop_key(path: Path, seconds: float, slot: str) -> str:
    stat = path.stat()
    text = f"{path.absolute()}|{stat.st_size}|{stat.st_mtime_ns}|{seconds:g}|{slot}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def crop_file(
    path: Path,
    lengths: Mapping[float, Sequence[str]],
    cache_dir: Path | None,
    band: str = "wide",
) -> dict[float, dict[str, npt.NDArray[np.float64]]]:
    """Observations of the first ``L`` s of speech of ``path`` for each length and feature
    (:data:`WHOLE`: all of it); ``band="narrow"``: of the file band-limited first."""
    from monitor.audio.band import band_limit
    from monitor.audio.file import read_audio
    from monitor.audio.frames import RATE_HZ
    from monitor.audio.vad import speech_only

    suffix = "" if band == "wide" else f"@{band}"

    speech: np.ndarray | None = None
    out: dict[float, dict[str, npt.NDArray[np.float64]]] = {}
    for seconds, features in lengths.items():
        out[seconds] = {}
        for name in features:
            feature = get_feature(name)
            entry = None
            if cache_dir is not None:
                slot = f"{name}@{feature.version}{suffix}"
                entry = cache_dir / f"{_crop_key(path, seconds, slot)}.json"
                if entry.is_file():
                    out[seconds][name] = np.asarray(json.loads(entry.read_text()), dtype=float)
                    continue
            if speech is None:
                audio = read_audio(path)[0]
                if band == "narrow":
                    audio = band_limit(audio, RATE_HZ).astype(np.float32)
                speech = speech_only(audio, RATE_HZ)
            crop = speech if math.isinf(seconds) else speech[: round(seconds * RATE_HZ)]
            try:
                values = np.asarray(feature.observe(crop, RATE_HZ).values, dtype=np.float64)
            except ValueError:  # no voiced frame in a short crop: an empty observation
                values = np.zeros(feature.dimension)
            out[seconds][name] = values
            if entry is not None:
                entry.parent.mkdir(parents=True, exist_ok=True)
                entry.write_text(json.dumps(values.tolist()))
    return out


def crop_speakers(
    speakers: Sequence[SpeakerUtterances],
    paths: Mapping[tuple[str, str], Path],
    lengths: Mapping[float, Sequence[str]],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    band: str = "wide",
) -> dict[str, Crops]:
    """Crops of every utterance of every speaker; ``paths`` maps (alias, stem) → audio file."""
    folder = None if cache_dir is None else Path(cache_dir) / "crops"
    total = sum(len(s.utterances) for s in speakers)
    done = 0
    out: dict[str, Crops] = {}
    for speaker in speakers:
        rows = []
        for stem in speaker.utterances:
            rows.append(crop_file(paths[(speaker.alias, stem)], lengths, folder, band))
            done += 1
            if progress is not None:
                progress(done, total)
        out[speaker.alias] = {
            seconds: {name: np.stack([r[seconds][name] for r in rows]) for name in features}
            for seconds, features in lengths.items()
        }
    return out


def crop_trials(
    speakers: Sequence[SpeakerUtterances],
    crops: Mapping[str, Crops],
    *,
    seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
) -> PooledTrials:
    """Eq. 6 trials whose test is the ``seconds`` crop of the first test utterance (templates
    and every other fact as :func:`pool_trials` gives them for a test of that length)."""
    pooled = pool_trials(
        speakers, test_seconds=seconds, template_seconds=template_seconds, features=features
    )
    usable, splits, _ = plan_splits(speakers, seconds, template_seconds)
    N = len(usable)
    K_max = pooled.T // N
    first = np.empty(pooled.T, dtype=np.int64)
    owner = np.empty(pooled.T, dtype=np.int64)
    for i, per_start in enumerate(splits):
        for s in range(K_max):
            first[s * N + i] = per_start[s % len(per_start)][0][0]
            owner[s * N + i] = i
    tests = {
        name: np.stack(
            [crops[usable[i].alias][seconds][name][u] for i, u in zip(owner, first, strict=True)]
        )
        for name in features
    }
    speech = np.array(
        [min(seconds, usable[i].speech_seconds[u]) for i, u in zip(owner, first, strict=True)]
    )
    facts = pooled.facts() | {"test_seconds": speech}
    return PooledTrials(tests=tests, templates=pooled.templates, **facts)


def _levels(values: npt.NDArray[np.float64]) -> list[float]:
    return [round(float(q), 6) for q in np.quantile(values, QUANTILES)]


def cosine_statistics(
    speakers: Sequence[SpeakerUtterances],
    crops: Mapping[str, Crops],
    *,
    template_seconds: float | None,
) -> dict[str, Any]:
    """Quantiles of the embedding cosines the tracker meets, per window length (see module)."""
    from monitor.calibration.protocol import scored_trials

    lengths: dict[str, Any] = {}
    for seconds in TRACKING_LENGTHS:
        pooled = crop_trials(
            speakers, crops, seconds=seconds, template_seconds=template_seconds,
            features=("embedding",),
        )  # fmt: skip
        S = scored_trials(pooled).scores["embedding"]
        truth = pooled.truth
        own = np.zeros_like(S, dtype=bool)
        own[np.arange(S.shape[0]), truth] = True
        templates = pooled.templates["embedding"]
        cohort = templates / np.linalg.norm(templates, axis=1, keepdims=True)
        Z = normalised_trials(S, cohort, pooled.N)
        units, owners = [], []
        for k, speaker in enumerate(speakers):
            rows = crops[speaker.alias][seconds]["embedding"]
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            keep = norms[:, 0] > 0
            units.append(rows[keep] / norms[keep])
            owners.append(np.full(int(keep.sum()), k))
        U = np.concatenate(units)
        who = np.concatenate(owners)
        C = U @ U.T
        upper = np.triu(np.ones_like(C, dtype=bool), 1)
        same = upper & (who[:, None] == who[None, :])
        lengths[f"{seconds:g}"] = {
            "profile_same": _levels(S[own]),
            "profile_other": _levels(S[~own]),
            "profile_same_snorm": _levels(Z[own]),
            "profile_other_snorm": _levels(Z[~own]),
            "window_same": _levels(C[same]),
            "window_other": _levels(C[upper & ~same]),
            "pairs": {"profile": int(S.size), "window_same": int(same.sum())},
        }
    return {
        "quantiles": [float(q) for q in QUANTILES],
        "lengths": lengths,
        "cohort_top": COHORT_TOP,
    }


def narrow_statistics(
    speakers: Sequence[SpeakerUtterances],
    paths: Mapping[tuple[str, str], Path],
    *,
    template_seconds: float | None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """:func:`cosine_statistics` of a narrow-band device: crops of the band-limited
    utterances against templates pooled from the band-limited whole utterances (module doc)."""
    lengths: dict[float, list[str]] = {s: ["embedding"] for s in (*TRACKING_LENGTHS, WHOLE)}
    crops = crop_speakers(
        speakers, paths, lengths, cache_dir=cache_dir, progress=progress, band="narrow"
    )
    narrow = [
        dataclasses.replace(
            s,
            values={"embedding": crops[s.alias][WHOLE]["embedding"]},
            weights={"embedding": np.asarray(s.weights["embedding"], dtype=np.float64)},
        )
        for s in speakers
    ]
    stats = cosine_statistics(narrow, crops, template_seconds=template_seconds)
    return stats | {"band": "narrow, 8 kHz device (scipy resample_poly 16k→8k→16k)"}
