"""Who is speaking, measured: household streams through the daemon's own pipeline.

``python -m bench tracking [--streams 50] [--minutes 10-20] [--backends ecapa,campplus]
[--rates 16000,8000] [--seed S]`` builds seeded household streams (bench/household.py) from the
corpus's *test* split (the shipped calibrations are fitted on the train split, checked below),
enrols every test speaker's first four utterances as templates (N = 125 identities, 12 s each)
and the three members of each stream as local profiles (at 8 kHz from the same utterances
band-limited to 8 kHz: a device enrols its members from its own audio), runs
``build_pipeline`` (what ``voxmeter run --source file:... --set audio.pace=fast`` runs) on each
stream and compares every window with the truth:

- windows holding more than one voice (≥ 10 % of their span from a second speaker);
- member windows given to the right member; stranger windows given to a member;
- tracks per stranger (unknown tracks, after merges, whose windows are mostly theirs);
- DER, purity and coverage (pyannote.metrics, collar 0.25 s, the windows' spans as the
  hypothesis);
- the pooled-disclosure error per person and stream: |bits shown − bits with oracle
  attribution|, where "shown" is the final figure of the person's track (their profile's; a
  stranger's: the unknown track holding most of their windows; 0 without one) and the oracle
  pools every window whose speech is mostly theirs, both in combined.lid (the budget measure)
  and combined.srd.

The defaults are the issue's full run (50 streams of 10–20 min at 16 kHz and 8 kHz, ECAPA and
CAM++); ``--streams/--minutes`` make quick runs. Results: bench/results/tracking.json.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CORPUS, RESULTS_DIR, Run, summary_targets
from bench.household import RATE_HZ, Segment, Stream, make_stream, overlaps, trimmed
from monitor.calibration.buckets import load_default
from monitor.corpus import scan_corpus
from monitor.daemon.build import build_pipeline
from monitor.events.messages import DaemonEvent, FeatureWindow, TrackExpired, WindowScored
from monitor.features.base import FEATURE_NAMES, get_feature, set_embedding_backend
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many
from monitor.scoring.scorer import score_track
from monitor.settings.config import load_config
from monitor.store.database import open_store
from monitor.store.enroll import with_narrow, with_room
from monitor.store.templates import Enrolment

RESULTS = RESULTS_DIR / "tracking.json"
TEMPLATE_UTTERANCES = 4
SEED = 20261126
MIXED_SHARE = 0.10
TARGETS = {
    "mixed_windows": 0.02,
    "member_right": 0.97,
    "stranger_to_member": 0.01,
    "tracks_per_stranger": 1.1,
    "purity": 0.95,
    "disclosure_error_share": 0.95,  # of persons within 0.1 bit
}


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


def device_profile(paths: Sequence[Path], rate_hz: int) -> Any:
    """A member's local profile as a device recording at ``rate_hz`` enrols it: the template
    utterances band-limited to that rate (down and back up, as the daemon's source resamples),
    embedded and pooled (the attacker's N templates stay wideband: their own recordings)."""
    import soxr

    from monitor.audio.file import read_audio
    from monitor.audio.frames import RATE_HZ
    from monitor.audio.vad import speech_only

    feature = get_feature("embedding")
    observations = []
    for path in paths:
        audio = read_audio(path)[0]
        narrow = soxr.resample(soxr.resample(audio, RATE_HZ, rate_hz, quality="HQ"), rate_hz,
                               RATE_HZ, quality="HQ").astype(np.float32)  # fmt: skip
        observations.append(feature.observe(speech_only(narrow, RATE_HZ), RATE_HZ))
    return feature.pool(observations)


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


def run_stream(
    db: Path,
    stream: Stream,
    backend: str,
    folder: Path,
    features: Sequence[str],
    overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """One stream through build_pipeline; windows, tracks and figures compared with the truth."""
    work = folder / f"run-{stream.path.stem}-{backend}.db"
    shutil.copy(db, work)
    corpus = scan_corpus(CORPUS) if stream.rate_hz != RATE_HZ else None
    with open_store(work) as store:
        for k, member in enumerate(stream.household.members):
            if corpus is None:
                embedding = store.template(member, "embedding")
            else:  # the device enrols its members from its own (narrowband) audio
                paths = [u.path for u in corpus.utterances_of(member)[:TEMPLATE_UTTERANCES]]
                embedding = device_profile(paths, stream.rate_hz)
            store.add_local_profile(f"member-{k + 1}", member, embedding)
    config = load_config(
        None,
        [
            f"daemon.db={work}",
            f"daemon.source=file:{stream.path}",
            "audio.pace=fast",
            "prometheus.enabled=false",
            "mqtt.enabled=false",
            'logging.level="warning"',
            f'features.embedding="{backend}"',
            f"features.enabled={json.dumps(list(features))}",
            *overrides,
        ],
    )
    collector = Collector()
    recorded: list[Recorded] = []
    merges: dict[str, str] = {}
    with open_store(work) as store:
        pipeline = build_pipeline(config, store=store, exporters=[collector])
        process = pipeline.tracker.process

        def watched(window: FeatureWindow) -> Any:
            tracked, events = process(window)
            for event in events:
                if isinstance(event, TrackExpired) and event.merged_into is not None:
                    merges[event.track] = event.merged_into
            recorded.append(Recorded(window, None if tracked is None else tracked.track))
            return tracked, events

        pipeline.tracker.process = watched  # type: ignore[method-assign]
        started = time.process_time()
        asyncio.run(pipeline.run())
        cpu = time.process_time() - started
        oracle = oracle_bits(pipeline, stream, recorded)
    work.unlink()
    return score_stream(stream, recorded, merges, collector.last, oracle, cpu)


def _final(track: str | None, merges: dict[str, str]) -> str | None:
    while track in merges:
        track = merges[track]
    return track


def _majority(stream: Stream, window: FeatureWindow) -> tuple[str | None, float]:
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
        who, _ = _majority(stream, r.window)
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
        who, second = _majority(stream, w)
        track = _final(r.track, merges)
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


def table(results: dict[str, Any]) -> str:
    """The README's table: one column per backend and rate, one row per measure."""
    runs = results["backends"]
    names = list(runs)

    def pct(key: str) -> Any:
        return lambda s: f"{100 * s[key]:.1f} %"

    def lid(s: dict[str, Any]) -> str:
        e = s["disclosure_error_lid"]
        return f"{e['median']:.2f} / {e['p95']:.2f} bit"

    rows = [
        ("streams × audio minutes", lambda s: f"{s['streams']} × {s['audio_minutes']:.1f}"),
        ("windows", lambda s: f"{s['windows']}"),
        ("windows holding > 1 voice (≤ 2 %)", pct("mixed_windows")),
        ("windows given to no track", pct("skipped_windows")),
        ("member windows to the right member (≥ 97 %)", pct("member_right")),
        ("stranger windows to a member (≤ 1 %)", pct("stranger_to_member")),
        ("tracks per stranger (≤ 1.1)", lambda s: f"{s['tracks_per_stranger']:.2f}"),
        ("purity (≥ 95 %)", pct("purity")),
        ("coverage", pct("coverage")),
        ("DER", pct("der")),
        ("pooled-disclosure error, combined.lid: median / p95", lid),
        ("persons within 0.1 bit (≥ 95 %)", lambda s: (
            f"{100 * s['disclosure_error_lid']['share_within_0.1']:.0f} % of {s['persons']}")),
    ]  # fmt: skip
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(runs[n]["summary"]) for n in names) + " |")
    return "\n".join(lines)


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


def _minutes(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    return float(low), float(high or low)


def main(argv: Sequence[str] = ()) -> None:
    if "--rooms" in argv:  # the same households in simulated rooms (bench/rooms.py)
        from bench import rooms

        return rooms.main(argv)
    parser = argparse.ArgumentParser(prog="python -m bench tracking")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--minutes", type=_minutes, default=(10.0, 20.0))
    parser.add_argument("--backends", default="ecapa,campplus")
    parser.add_argument("--rates", default="16000,8000")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--features",
        default=",".join(FEATURE_NAMES),
        help="features the daemon extracts (embedding alone: the tracker's, fastest)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--set", action="append", default=[], help="a daemon setting, as voxmeter run --set"
    )
    args = parser.parse_args(list(argv))
    record = Run("tracking", command="python -m bench tracking " + " ".join(argv))
    results = record.figures
    results.update({"seed": args.seed, "target_bounds": TARGETS, "backends": {}})
    with tempfile.TemporaryDirectory(prefix="voxmeter-tracking-") as tmp:
        folder = Path(tmp)
        for backend in args.backends.split(","):
            speakers = held_out_speakers(backend)
            features = args.features.split(",")
            db = template_db(backend, folder, speakers, features)
            corpus = scan_corpus(CORPUS)
            speech = {
                s: [trimmed(u.path) for u in corpus.utterances_of(s)[TEMPLATE_UTTERANCES:]]
                for s in speakers
            }
            for rate in (int(r) for r in args.rates.split(",")):
                runs = []
                rng = np.random.default_rng(args.seed)
                for index in range(args.streams):
                    minutes = float(rng.uniform(*args.minutes))
                    stream = make_stream(
                        index, speech=speech, pool=speakers, minutes=minutes, seed=args.seed,
                        folder=folder, rate_hz=rate,
                    )  # fmt: skip
                    run = run_stream(db, stream, backend, folder, features, args.set)
                    stream.path.unlink()
                    runs.append(run)
                    print(f"{backend} {rate} Hz stream {index}: {json.dumps(run['counts'])}",
                          flush=True)  # fmt: skip
                summary = summarise(runs)
                print(f"== {backend} {rate} Hz: {json.dumps(summary, indent=1)}", flush=True)
                results["backends"][f"{backend}@{rate // 1000}k"] = {
                    "summary": summary,
                    "streams": runs,
                }
    summary_targets(record, results["backends"], TARGETS, per_group=False)
    record.write(path=args.out)
    print(table(results))


__all__ = ["Segment", "main"]
