"""Who is speaking in a real room: the household streams of ``bench tracking`` under room acoustics.

``python -m bench tracking --rooms [--streams 5] [--minutes 4-6] [--backends ecapa]
[--conditions dry16,room16,tv16,dry8,home16,alike16] [--seed S | --seeds S1,S2]`` runs the same
seeded households (each seed its own, targets per seed)
(bench/household.py) under each condition and reports per condition what ``bench tracking``
reports (pyannote.metrics), plus what a room adds:

- ``dry16``: the dry close-talk stream at 16 kHz (today's benchmark, smaller);
- ``room16``: every person at their own place in a simulated living room (image-source room
  impulse responses from pyroomacoustics; RT60 drawn log-uniform in 0.2–0.8 s, geometric mean
  0.4 s; the room 3.5–6 × 3–5 × 2.4–2.8 m; each person 0.5–4 m from the microphone), the
  speech reverberated by its own response and attenuated by its own distance;
- ``tv16``: ``room16`` plus a television (other corpus speakers talking on, one turn after the
  other, from the television's place in the room) ``TV_BELOW_DB`` below the household's speech
  and pink noise ``NOISE_BELOW_DB`` below it;
- ``dry8``: the dry stream recorded by an 8 kHz device, its members enrolled from their clean
  16 kHz files, as a user enrols with ``voxmeter enroll --local``;
- ``home16``: a household of its own: dry, 16 kHz, three members taking turns with two
  strangers who are in no template (a real household's visitors never are: the other
  conditions keep every held-out speaker in the database, the cohort the scores are
  normalised on included);
- ``alike16``: ``home16`` with strangers of a member's gender and age band (speakers.tsv):
  the strangers a household's scores confuse most.

Members' local profiles are always the clean 16 kHz enrolment (the pooled embedding of their
four template utterances, what ``voxmeter enroll --local`` stores), in every condition. Beside
``bench tracking``'s measures: windows whose speech is only the television's or the noise's
(``background``), unknown tracks that only such windows own (``phantom tracks``: each one would
show in Home Assistant), windows given to the media track (by whose speech: background, a
member's, a stranger's), all unknown tracks opened per stream, and the seconds given
to no track (``voxmeter_unattributed_speech_seconds_total``), and the turn splitter's recall
and precision of the true changes of speaker inside windows (bench/changes.py). Results:
bench/results/rooms.json (the first seed's figures; the others under ``seeds``).
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
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from bench import rooms_report as report
from bench.acoustics import (  # noqa: F401  (make_room, pink_noise: read from here too)
    in_room,
    make_room,
    pink_noise,
)
from bench.changes import SplitLog, change_counts, change_summary
from bench.common import CORPUS, RESULTS_DIR, Run
from bench.household import RATE_HZ, Stream, make_stream, trimmed
from bench.tracked import (
    MIXED_SHARE,
    SEED,
    TEMPLATE_UTTERANCES,
    Collector,
    Recorded,
    final_track,
    held_out_speakers,
    majority_speaker,
    oracle_bits,
    score_stream,
    summarise,
    template_db,
)
from monitor.audio.frames import AudioFrame
from monitor.audio.vad import WebRtcVad
from monitor.audio.windows import SpeechWindow, Windower
from monitor.corpus import scan_corpus
from monitor.daemon.build import build_pipeline
from monitor.events.messages import FeatureWindow, TrackExpired
from monitor.settings.config import load_config
from monitor.store.database import open_store

RESULTS = RESULTS_DIR / "rooms.json"
CONDITIONS = {
    "dry16": "dry, 16 kHz",
    "room16": "reverberant room, 16 kHz",
    "tv16": "room + television 18 dB below + pink noise, 16 kHz",
    "dry8": "dry, 8 kHz device, members enrolled at 16 kHz",
    "home16": "dry, 16 kHz, three members and two strangers",
    "alike16": "dry, 16 kHz, two strangers of a member's gender and age band",
}
UNSEEN = ("home16", "alike16")  # conditions whose strangers are not in the database
MEDIA_COUNTS = ("windows", "background", "member", "stranger")  # windows to the media track


def daemon_windows(path: Path) -> list[SpeechWindow]:
    """The windows the daemon's VAD and windower cut from a 16 kHz file (default settings)."""
    audio = load_config(None, []).audio
    vad = WebRtcVad(audio.vad_aggressiveness, hangover_ms=audio.hangover_ms)
    windower = Windower(
        audio.window_seconds,
        turn_pause_seconds=audio.turn_pause_seconds,
        min_window_seconds=audio.min_window_seconds,
        tail_seconds=audio.tail_seconds,
    )
    samples, rate = sf.read(path, dtype="int16")
    assert rate == RATE_HZ
    step = RATE_HZ // 10
    out: list[SpeechWindow] = []
    for at in range(0, samples.shape[0], step):
        for chunk in vad.process(AudioFrame(samples[at : at + step], at / RATE_HZ)):
            out += windower.process(chunk)
    for chunk in vad.flush():
        out += windower.process(chunk)
    out += windower.close_turn(audio.min_window_seconds)
    return [w for w in out if w.speech_seconds >= audio.min_window_seconds]


def run_stream(
    db: Path,
    stream: Stream,
    backend: str,
    folder: Path,
    overrides: Sequence[str],
    *,
    unseen: bool = False,
) -> dict[str, Any]:
    """One stream through build_pipeline with the members enrolled from their clean 16 kHz
    files; ``bench tracking``'s measures plus background windows, phantom tracks and the
    seconds given to no track. ``unseen``: the strangers are not in the database (a real
    household's visitors never are; every other condition keeps all held-out speakers)."""
    work = folder / f"run-{stream.path.stem}-{backend}.db"
    shutil.copy(db, work)
    with open_store(work) as store:
        for stranger in stream.household.strangers if unseen else ():
            store.remove_identity(stranger)
        for k, member in enumerate(stream.household.members):
            store.add_local_profile(f"member-{k + 1}", member, store.template(member, "embedding"))
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
            'features.enabled=["embedding"]',
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
        splits = SplitLog()
        pipeline.turns.split = splits.watch(pipeline.turns.split)  # type: ignore[method-assign]
        started = time.process_time()
        asyncio.run(pipeline.run())
        cpu = time.process_time() - started
        oracle = oracle_bits(pipeline, stream, recorded)
        unattributed = pipeline.tracker.skipped_seconds
    work.unlink()
    run = score_stream(stream, recorded, merges, collector.last, oracle, cpu)
    shows = (config.tracker.show_seconds, config.tracker.show_windows)
    run["room"] = (
        room_measures(stream, recorded, merges, shows)
        | {
            "unattributed_seconds": unattributed,
            "audio_seconds": stream.seconds,
        }
        | change_counts(stream, splits)
    )
    return run


def room_measures(
    stream: Stream,
    recorded: Sequence[Recorded],
    merges: dict[str, str],
    shows: tuple[float, int] = (0.0, 1),
) -> dict[str, Any]:
    """Background windows (no household speech in them) and the unknown tracks they own;
    windows holding two voices that were given to a track anyway (``mixed_attributed``) and
    those refused as inconsistent; the unknown tracks Home Assistant would show (``shows``:
    ``[tracker] show_seconds`` and ``show_windows``, merged fragments pooled into their
    survivor), per owner."""
    owners: dict[str, Counter[str]] = defaultdict(Counter)
    held: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    background = mixed_attributed = inconsistent = inconsistent_mixed = 0
    media: Counter[str] = Counter()  # windows given to the media track, by whose speech
    members, strangers = set(stream.household.members), set(stream.household.strangers)
    for r in recorded:
        who, second = majority_speaker(stream, r.window)
        background += who is None
        track = final_track(r.track, merges)
        mixed = second >= MIXED_SHARE
        mixed_attributed += mixed and track is not None
        inconsistent += r.window.inconsistent
        inconsistent_mixed += r.window.inconsistent and mixed
        if track is not None and track.split("-")[0] == "media":
            media["windows"] += 1
            media["member" if who in members else "stranger" if who else "background"] += 1
        if track is not None and track.startswith("unknown-"):
            owners[track][who or ""] += 1
            held[track][0] += r.window.speech_seconds
            held[track][1] += 1
    shown = {t for t, (seconds, windows) in held.items() if seconds >= shows[0]
             and windows >= shows[1]}  # fmt: skip
    owner = {t: c.most_common(1)[0][0] for t, c in owners.items()}
    return {"background_windows": background, "unknown_tracks": len(owners),
            "phantom_tracks": sum(1 for o in owner.values() if o == ""),
            "shown_tracks": len(shown),
            "shown_phantom_tracks": sum(1 for t in shown if owner[t] == ""),
            "shown_stranger_tracks": sum(1 for t in shown if owner[t] in strangers),
            "mixed_attributed": mixed_attributed, "inconsistent_windows": inconsistent,
            "inconsistent_mixed": inconsistent_mixed,
            **{f"media_{k}": media[k] for k in MEDIA_COUNTS}}  # fmt: skip


def summarise_condition(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    summary = summarise(runs)
    rooms = [r["room"] for r in runs]
    audio = sum(r["audio_seconds"] for r in rooms)
    strangers = sum(len(r["fragments"]) for r in runs)
    summary |= {
        "background_windows": sum(r["background_windows"] for r in rooms),
        "phantom_tracks": sum(r["phantom_tracks"] for r in rooms),
        "shown_phantom_tracks": sum(r.get("shown_phantom_tracks", 0) for r in rooms),
        "shown_tracks_per_stranger": sum(r.get("shown_stranger_tracks", 0) for r in rooms)
        / max(strangers, 1),
        "mixed_attributed": sum(r.get("mixed_attributed", 0) for r in rooms)
        / max(summary["windows"], 1),
        "inconsistent_windows": sum(r.get("inconsistent_windows", 0) for r in rooms)
        / max(summary["windows"], 1),
        "inconsistent_mixed": sum(r.get("inconsistent_mixed", 0) for r in rooms),
        **{f"media_{k}": sum(r.get(f"media_{k}", 0) for r in rooms) for k in MEDIA_COUNTS},
        "unknown_tracks_per_stranger": sum(r["unknown_tracks"] for r in rooms) / max(strangers, 1),
        "unattributed_share": sum(r["unattributed_seconds"] for r in rooms) / max(audio, 1e-9),
        "cpu_per_audio_second": summary["cpu_seconds"] / max(audio, 1e-9),
    } | change_summary(rooms)
    return summary


def table(results: dict[str, Any]) -> str:
    """The README's table: one column per condition, one row per measure (the targets of
    bench/rooms_report.py in brackets)."""
    runs = results["conditions"]
    names = list(runs)

    def pct(key: str) -> Any:
        return lambda s: f"{100 * s[key]:.1f} %"

    rows = [
        ("streams × audio minutes", lambda s: f"{s['streams']} × {s['audio_minutes']:.1f}"),
        ("windows", lambda s: f"{s['windows']}"),
        ("windows mixing two voices", pct("mixed_windows")),
        ("… of them given to a track, of all windows (room, tv: ≤ 3 %)", pct("mixed_attributed")),
        ("windows refused as inconsistent (of them mixing two voices)", lambda s: (
            f"{100 * s['inconsistent_windows']:.1f} % ({s['inconsistent_mixed']})")),
        ("changes of speaker inside a window: found (recall) / cuts at one (precision)",
         lambda s: (f"{100 * s.get('change_recall', 0):.0f} % of {s.get('change_points', 0):.0f}"
                    f" / {100 * s.get('change_precision', 0):.0f} % of {s.get('cuts', 0):.0f}")),
        ("windows of one voice cut (none)", lambda s: (
            f"{s.get('clean_cut', 0):.0f} of {s.get('clean_windows', 0):.0f}")),
        ("windows given to no track", pct("skipped_windows")),
        ("member windows to the right member (room, tv, 8k: ≥ 90 %)", pct("member_right")),
        ("stranger windows to a member (none)", pct("stranger_to_member")),
        ("tracks per stranger", lambda s: f"{s['tracks_per_stranger']:.2f}"),
        ("unknown tracks opened per stranger", lambda s: f"{s['unknown_tracks_per_stranger']:.2f}"),
        ("unknown tracks shown in Home Assistant per stranger (room, tv: ≤ 1.2)",
         lambda s: f"{s['shown_tracks_per_stranger']:.2f}"),
        ("windows of background only / phantom tracks / of them shown",
         lambda s: (f"{s['background_windows']} / {s['phantom_tracks']} / "
                    f"{s['shown_phantom_tracks']}")),
        ("windows to the media track: of background / a member's / a stranger's",
         lambda s: (f"{s.get('media_windows', 0)}: {s.get('media_background', 0)} / "
                    f"{s.get('media_member', 0)} / {s.get('media_stranger', 0)}")),
        ("purity", pct("purity")),
        ("coverage", pct("coverage")),
        ("DER", pct("der")),
        ("speech seconds given to no track, of audio", pct("unattributed_share")),
        ("pooled-disclosure error, combined.lid: median / p95", report.lid_errors),
        ("persons within 0.1 bit of oracle (room, tv: ≥ 95 %)", lambda s: (
            f"{100 * s['disclosure_error_lid']['share_within_0.1']:.0f} % of {s['persons']}")),
        ("pipeline CPU s per audio s", lambda s: f"{s['cpu_per_audio_second']:.3f}"),
    ]  # fmt: skip
    head = [CONDITIONS[n.split("@")[0]] + f" ({n})" for n in names]
    lines = ["| | " + " | ".join(head) + " |", "|---|" + "---|" * len(names)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(runs[n]["summary"]) for n in names) + " |")
    return "\n".join(lines)


def _minutes(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    return float(low), float(high or low)


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench tracking --rooms")
    parser.add_argument("--rooms", action="store_true", help="this benchmark (bench tracking)")
    parser.add_argument("--streams", type=int, default=5)
    parser.add_argument("--minutes", type=_minutes, default=(4.0, 6.0))
    parser.add_argument("--backends", default="ecapa", help=report.BACKENDS_HELP)
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--seeds", help="comma-separated seeds, each its own households (targets per seed)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--no-narrow",
        dest="narrow",
        action="store_false",
        help="members enrolled without the narrow-band copies (as before issue 29's variants)",
    )
    parser.add_argument(
        "--no-room",
        dest="room",
        action="store_false",
        help="members enrolled without the far-field copies (as before issue 29's variants)",
    )
    parser.add_argument(
        "--set", action="append", default=[], help="a daemon setting, as voxmeter run --set"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another voxmeter checkout run first with the same options, for comparison",
    )
    parser.add_argument(
        "--baseline-release", default="previous", help="the release the baseline checkout is"
    )
    args = parser.parse_args(list(argv))
    conditions = args.conditions.split(",")
    unknown = sorted(set(conditions) - set(CONDITIONS))
    if unknown:
        raise SystemExit(f"bench tracking --rooms: unknown condition(s) {unknown}")
    seeds = [int(s) for s in str(args.seeds or args.seed).split(",")]
    run_record = Run("rooms", command="python -m bench tracking " + " ".join(argv))
    started = None
    if args.baseline is not None:
        options = report.own_options(argv)
        started = report.Baseline(args.baseline, options, args.baseline_release)
    per_seed = {seed: run_seed(args, seed, conditions) for seed in seeds}
    baseline = None if started is None else started.summaries()
    for seed, results in per_seed.items():
        summaries = {k: v["summary"] for k, v in results["conditions"].items()}
        before = None if baseline is None else report.seed_baseline(baseline, seed)
        label = f"seed {seed} " if len(seeds) > 1 else ""
        report.record_targets(run_record, summaries, before, label=label)
        per_seed[seed] = report.with_backends(results, summaries)
        print(table(per_seed[seed]))
    first = per_seed[seeds[0]]
    others = {str(seed): per_seed[seed] for seed in seeds[1:]}
    run_record.figures = first | ({"seeds": others} if others else {}) | {"baseline": baseline}
    run_record.write(path=args.out)


def groups() -> dict[str, str]:
    """Every corpus speaker's gender and age band (child < 13, teen < 18, adult)."""
    with open(CORPUS / "speakers.tsv", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    band = {True: "child", False: "teen"}
    return {r["speaker"]: r["gender"] + "-" + (band[int(r["age"]) < 13] if int(r["age"]) < 18
            else "adult") for r in rows}  # fmt: skip


def condition_stream(
    condition: str, index: int, *, seed: int, minutes: float, pool: Sequence[str],
    speech: dict[str, list[np.ndarray]], folder: Path,
) -> tuple[Stream, dict[str, Any]]:  # fmt: skip
    """Stream ``index`` of ``seed`` as ``condition`` hears it, and what its room was."""
    rate = 8000 if condition == "dry8" else RATE_HZ
    strangers = 2 if condition in ("home16", "alike16") else None
    stream = make_stream(
        index, speech=speech, pool=pool, minutes=minutes, seed=seed, folder=folder,
        rate_hz=rate, strangers=strangers, groups=groups() if condition == "alike16" else None,
    )  # fmt: skip
    if condition not in ("room16", "tv16"):
        return stream, {}
    household = {*stream.household.members, *stream.household.strangers}
    others = [s for s in pool if s not in household]
    picks = np.random.default_rng([seed, index, 18]).choice(others, size=3, replace=False)
    tv = [speech[s] for s in picks] if condition == "tv16" else None
    return in_room(stream, seed=seed, index=index, tv_speech=tv)


def run_seed(args: argparse.Namespace, seed: int, conditions: Sequence[str]) -> dict[str, Any]:
    """Every backend and condition on the households of ``seed``."""
    results: dict[str, Any] = {"seed": seed, "conditions": {}}
    with tempfile.TemporaryDirectory(prefix="voxmeter-rooms-") as tmp:
        folder = Path(tmp)
        for backend in args.backends.split(","):
            speakers = held_out_speakers(backend)
            db = template_db(
                backend, folder, speakers, ["embedding"], narrow=args.narrow, room=args.room
            )
            corpus = scan_corpus(CORPUS)
            speech = {
                s: [trimmed(u.path) for u in corpus.utterances_of(s)[TEMPLATE_UTTERANCES:]]
                for s in speakers
            }
            for condition in conditions:
                runs = []
                rng = np.random.default_rng(seed)
                for index in range(args.streams):
                    minutes = float(rng.uniform(*args.minutes))
                    stream, facts = condition_stream(
                        condition, index, seed=seed, minutes=minutes, pool=speakers,
                        speech=speech, folder=folder,
                    )  # fmt: skip
                    unseen = condition in UNSEEN
                    run = run_stream(db, stream, backend, folder, args.set, unseen=unseen)
                    run["room"] |= facts
                    stream.path.unlink()
                    runs.append(run)
                    room = {k: v for k, v in run["room"].items() if k != "distances_m"}
                    counts = json.dumps(run["counts"])
                    print(f"{backend} {condition} seed {seed} stream {index}: {counts} "
                          f"{json.dumps(room)}", flush=True)  # fmt: skip
                summary = summarise_condition(runs)
                print(f"== {backend} {condition} seed {seed}: {json.dumps(summary, indent=1)}",
                      flush=True)  # fmt: skip
                results["conditions"][f"{condition}@{backend}"] = {
                    "summary": summary,
                    "streams": runs,
                }
    return results
