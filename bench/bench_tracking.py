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
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CORPUS, RESULTS_DIR, Run, summary_targets
from bench.household import RATE_HZ, Segment, Stream, make_stream, trimmed
from bench.tracked import (
    SEED,
    TEMPLATE_UTTERANCES,
    Collector,
    Recorded,
    held_out_speakers,
    oracle_bits,
    score_stream,
    summarise,
    template_db,
)
from monitor.corpus import scan_corpus
from monitor.daemon.build import build_pipeline
from monitor.events.messages import FeatureWindow, TrackExpired
from monitor.features.base import FEATURE_NAMES, get_feature
from monitor.settings.config import load_config
from monitor.store.database import open_store

RESULTS = RESULTS_DIR / "tracking.json"
TARGETS = {
    "mixed_windows": 0.02,
    "member_right": 0.97,
    "stranger_to_member": 0.01,
    "tracks_per_stranger": 1.1,
    "purity": 0.95,
    "disclosure_error_share": 0.95,  # of persons within 0.1 bit
}


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
