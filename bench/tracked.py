"""The household streams' measures, shared by ``bench tracking`` and its rooms variant.

The templates database (every held-out speaker's first utterances), the pipeline's events kept
per window, and every window compared with the truth: members right, strangers' tracks, DER,
purity and coverage (pyannote.metrics) and the pooled-disclosure error against the oracle
attribution (bench/bench_tracking.py's docstring says what each measures).
"""

from __future__ import annotations

import asyncio
import csv
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CORPUS
from bench.household import Stream, overlaps
from monitor.calibration.buckets import load_default
from monitor.corpus import scan_corpus
from monitor.enrolment.enroll import with_narrow, with_room
from monitor.events.messages import DaemonEvent, FeatureWindow, WindowScored
from monitor.features.base import get_feature, set_embedding_backend
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many
from monitor.scoring.scorer import score_track
from monitor.store.database import open_store
from monitor.store.templates import Enrolment

TEMPLATE_UTTERANCES = 4
SEED = 20261126
MIXED_SHARE = 0.10


@dataclass
class Collector:
    """An exporter that keeps every window's figures (the pipeline's own events)."""

    name: str = "bench"
    last: dict[str, dict[str, float]] = field(default_factory=dict)

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def handle(self, event: DaemonEvent) -> None:
        if isinstance(event, WindowScored):
            figures = event.figures
            self.last[figures.track] = {d.key: d.cumulative_bits for d in figures.disclosures}


def _speakers(split: str) -> list[str]:
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        return [r["speaker"] for r in csv.DictReader(handle, delimiter="\t")
                if r["original_split"] == split]  # fmt: skip


def template_db(
    backend: str,
    folder: Path,
    speakers: Sequence[str],
    features: Sequence[str],
    *,
    narrow: bool = True,
    room: bool = False,
) -> Path:
    """Templates of every held-out speaker from their first utterances (the features cache);
    ``narrow``: with the narrow-band copies ``voxmeter enroll`` stores beside them; ``room``:
    with the far-field copies ``voxmeter enroll --local`` stores for members (made for every
    speaker here: any may be a household's member)."""
    set_embedding_backend(backend)
    corpus = scan_corpus(CORPUS)
    paths = {s: [u.path for u in corpus.utterances_of(s)] for s in speakers}
    wanted = [p for s in speakers for p in paths[s][:TEMPLATE_UTTERANCES]]
    extraction = extract_many(wanted, FeatureCache(default_cache_dir()), features=tuple(features))
    db = folder / f"templates-{backend}.db"
    with open_store(db) as store:
        enrolments = []
        for s in speakers:
            firsts = paths[s][:TEMPLATE_UTTERANCES]
            kept = [f for p in firsts if (f := extraction.files.get(str(p.absolute())))]
            observations = {
                name: get_feature(name).pool([f.observations[name] for f in kept])
                for name in features
            }
            enrolments.append(Enrolment(s, observations, {"source": "bench tracking"}))
        files = {s: [str(p) for p in paths[s][:TEMPLATE_UTTERANCES]] for s in speakers}
        if narrow and "embedding" in features:
            enrolments = with_narrow(enrolments, files)
        if room and "embedding" in features:
            enrolments = with_room(enrolments, files)
        store.bulk_replace_templates(enrolments)
    return db


@dataclass
class Recorded:
    window: FeatureWindow
    track: str | None  # None: the tracker gave it to no track


def final_track(track: str | None, merges: dict[str, str]) -> str | None:
    while track in merges:
        track = merges[track]
    return track


def majority_speaker(stream: Stream, window: FeatureWindow) -> tuple[str | None, float]:
    seconds = overlaps(stream.truth, window.start_seconds, window.end_seconds)
    if not seconds:
        return None, 0.0
    ranked = sorted(seconds.values(), reverse=True)
    total = sum(ranked)
    best = max(seconds, key=lambda k: seconds[k])
    return best, (ranked[1] / total if len(ranked) > 1 else 0.0)


def oracle_bits(pipeline: Any, stream: Stream, recorded: Sequence[Recorded]) -> dict[str, dict]:
    """Per person: figures of every window mostly theirs, pooled (who spoke is known)."""
    members = set(stream.household.members)
    by_person: dict[str, list[FeatureWindow]] = defaultdict(list)
    for r in recorded:
        who, _ = majority_speaker(stream, r.window)
        if who is not None:
            by_person[who].append(r.window)
    out: dict[str, dict] = {}
    for person, windows in by_person.items():
        pooled = {
            name: feature.pool([w.observations[name] for w in windows])
            for name, feature in pipeline.features.items()
        }
        seconds = sum(w.speech_seconds for w in windows)
        score = score_track(
            pipeline.scorer,
            identity=person if person in members else None,
            pooled=pooled,
            pooled_seconds=seconds,
            window=windows[-1].observations,
            window_seconds=windows[-1].speech_seconds,
            windows=len(windows),
            max_window_bits=-np.inf,
            measure=("combined", "lid"),
        )
        out[person] = {d.key: d.cumulative_bits for d in score.disclosures}
    return out


def score_stream(
    stream: Stream,
    recorded: Sequence[Recorded],
    merges: dict[str, str],
    last: dict[str, dict[str, float]],
    oracle: dict[str, dict],
    cpu: float,
) -> dict[str, Any]:
    from pyannote.core import Annotation, Timeline
    from pyannote.core import Segment as Span
    from pyannote.metrics.diarization import (
        DiarizationCoverage,
        DiarizationErrorRate,
        DiarizationPurity,
    )

    members = {m: f"member-{k + 1}" for k, m in enumerate(stream.household.members)}
    strangers = set(stream.household.strangers)
    counts: Counter[str] = Counter()
    stranger_tracks: dict[str, Counter[str]] = defaultdict(Counter)
    person_tracks: dict[str, Counter[str]] = defaultdict(Counter)
    hypothesis = Annotation()
    for r in recorded:
        w = r.window
        who, second = majority_speaker(stream, w)
        track = final_track(r.track, merges)
        counts["windows"] += 1
        counts["mixed"] += second >= MIXED_SHARE
        counts["flagged_mixed"] += w.mixed
        counts["skipped"] += track is None
        if track is not None:
            hypothesis[Span(w.start_seconds, w.end_seconds)] = track
        if who is None:
            continue
        if track is not None:
            person_tracks[who][track] += 1
        if who in members:
            counts["member_windows"] += 1
            counts["member_right"] += track == members[who]
        elif who in strangers:
            counts["stranger_windows"] += 1
            counts["stranger_to_member"] += track is not None and track.startswith("member-")
            if track is not None and track.startswith("unknown-"):
                stranger_tracks[who][track] += 1
    # tracks per stranger: unknown tracks whose windows are mostly this stranger's
    owner: dict[str, str] = {}
    for person, tracks in person_tracks.items():
        for track in tracks:
            best = max(person_tracks, key=lambda p: person_tracks[p].get(track, 0))
            if best == person:
                owner[track] = person
    fragments = [sum(1 for t, p in owner.items() if p == s and t.startswith("unknown-"))
                 for s in strangers]  # fmt: skip
    reference = Annotation()
    for seg in stream.truth:
        reference[Span(seg.start, seg.end)] = seg.speaker
    uem = Timeline([Span(0.0, stream.seconds)])
    der = DiarizationErrorRate(collar=0.25)
    purity = DiarizationPurity(collar=0.25)
    coverage = DiarizationCoverage(collar=0.25)
    der_detail = der(reference, hypothesis, uem=uem, detailed=True)
    errors = []
    for person in [*members, *strangers]:
        if person in members:
            track = members[person]
        else:
            tracks = person_tracks.get(person, Counter())
            unknown = {t: n for t, n in tracks.items() if t.startswith("unknown-")}
            track = max(unknown, key=lambda t: unknown[t]) if unknown else None
        shown = last.get(track, {}) if track is not None else {}
        truth = oracle.get(person)
        if truth is None:
            continue
        errors.append(
            {
                "person": person,
                "member": person in members,
                **{
                    key: abs(shown.get(key, 0.0) - truth[key])
                    for key in ("combined.lid", "combined.srd")
                },
            }
        )
    return {
        "stream": stream.path.name,
        "seconds": stream.seconds,
        "counts": dict(counts),
        "fragments": fragments,
        "der": {k: float(v) for k, v in der_detail.items()},
        "purity": float(purity(reference, hypothesis, uem=uem)) if len(hypothesis) else 0.0,
        "coverage": float(coverage(reference, hypothesis, uem=uem)) if len(hypothesis) else 0.0,
        "disclosure_errors": errors,
        "cpu_seconds": cpu,
    }


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled rates over streams (counts summed; DER from summed components)."""
    total: Counter[str] = Counter()
    for r in runs:
        total.update(r["counts"])
    der_keys = ("confusion", "missed detection", "false alarm", "total")
    der = {k: sum(r["der"].get(k, 0.0) for r in runs) for k in der_keys}
    fragments = [f for r in runs for f in r["fragments"]]
    errors = [e for r in runs for e in r["disclosure_errors"]]
    lid = np.array([e["combined.lid"] for e in errors]) if errors else np.zeros(1)
    srd = np.array([e["combined.srd"] for e in errors]) if errors else np.zeros(1)
    weights = np.array([r["seconds"] for r in runs])

    def share(a: str, b: str) -> float:
        return total[a] / total[b] if total[b] else float("nan")

    return {
        "streams": len(runs),
        "audio_minutes": float(weights.sum() / 60),
        "windows": total["windows"],
        "mixed_windows": share("mixed", "windows"),
        "flagged_mixed": share("flagged_mixed", "windows"),
        "skipped_windows": share("skipped", "windows"),
        "member_right": share("member_right", "member_windows"),
        "stranger_to_member": share("stranger_to_member", "stranger_windows"),
        "tracks_per_stranger": float(np.mean(fragments)) if fragments else float("nan"),
        "strangers_without_track": int(sum(f == 0 for f in fragments)),
        "der": (der["confusion"] + der["missed detection"] + der["false alarm"])
        / max(der["total"], 1e-9),
        "purity": float(np.average([r["purity"] for r in runs], weights=weights)),
        "coverage": float(np.average([r["coverage"] for r in runs], weights=weights)),
        "disclosure_error_lid": {
            "median": float(np.median(lid)),
            "p95": float(np.percentile(lid, 95)),
            "share_within_0.1": float(np.mean(lid <= 0.1)),
        },
        "disclosure_error_srd": {
            "median": float(np.median(srd)),
            "p95": float(np.percentile(srd, 95)),
            "share_within_0.1": float(np.mean(srd <= 0.1)),
        },
        "persons": len(errors),
        "cpu_seconds": float(sum(r["cpu_seconds"] for r in runs)),
    }


def held_out_speakers(backend: str) -> list[str]:
    """Test-split speakers, checked disjoint from the shipped calibration's dev speakers (its
    split, its listed speakers and those of its tracking statistics)."""
    speakers = _speakers("test")
    metadata = load_default(backend).metadata
    if metadata.get("split") != "train":
        raise SystemExit(f"bench tracking: the {backend} calibration is not fitted on 'train'")
    dev = set(metadata.get("dev_speakers", []))
    dev |= set(metadata.get("tracking", {}).get("source", {}).get("speakers", []))
    overlap = sorted(dev & set(speakers))
    if overlap:
        raise SystemExit(f"bench tracking: calibration speakers in the test split: {overlap[:5]}")
    return speakers
