"""The edge budget side by side: this checkout and a previous release, in one run, on paced
replays of speech and of room noise, each release with its own default attacker.

``python -m bench edge_side`` → bench/results/edge-side.json (:class:`bench.common.Run`: CPU
model and features, load at start and end, each target met or missed). For each release (this
checkout, and ``VOXMETER_BENCH_OLD``, 0.8.0 (e23b388) by default, checked out with ``git
worktree`` — or an existing checkout of it named by ``VOXMETER_BENCH_OLD_TREE``, used as it is —
and run with its own ``PYTHONPATH`` and this checkout's model files), one child process per
replay, N = 1,000 templates, every feature on and never shed (``load.shed_lag_seconds=0``,
normal priority):

- **speech**: bench_daemon's stream (two adult corpus speakers' utterances, 0.5 s apart);
- **silence**: 60 s of room noise (Gaussian, −62 dBFS RMS: a quiet room's floor, never speech
  to the VAD but never digital silence either).

Figures: process CPU per audio second from the daemon's start (model loading excluded), the
loop thread's CPU (``Pipeline.run``'s thread), and from them the CPU **per second of speech**
— the speech replay's CPU less its non-speech seconds at the silence replay's rate, over the
seconds the VAD kept — and **per second of silence**. This checkout also reports its own
``voxmeter_cpu_seconds_total{stage}`` totals, and replays the speech once more with the phone
feature off (``VOXMETER_BENCH_SIDE_PHONE_OFF=0`` skips it): the difference is what the phone
evidence costs a second of speech. CPU time, not wall time: the machine's two cores
are shared, and the load is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from bench.common import Run

REPO = Path(__file__).resolve().parent.parent
OLD = os.environ.get("VOXMETER_BENCH_OLD", "e23b388")
#: The previous release by its version, as the pages name it (a commit is not a release name).
OLD_NAME = os.environ.get("VOXMETER_BENCH_OLD_NAME", "0.8.0")
OLD_DEFAULT = os.environ.get("VOXMETER_BENCH_OLD_BACKEND", "campplus-int8")
OLD_TREE = os.environ.get("VOXMETER_BENCH_OLD_TREE")
"""An existing checkout of the previous release (not created, not removed), else a worktree."""
PHONE_OFF = ('features.enabled=["f0", "embedding"]',)
"""The previous release's default attacker (its ``DEFAULT_EMBEDDING``)."""
FULL = ['load.measuring_priority="normal"', "load.shed_lag_seconds=0"]
SILENCE_SECONDS = float(os.environ.get("VOXMETER_BENCH_SILENCE_SECONDS", 60.0))
NOISE_RMS = 0.0008  # −62 dBFS

CHILD = r"""
import json, sys, time
from pathlib import Path
import bench.bench_daemon as bd
import monitor.daemon.pipeline as pipeline
from monitor.features.base import set_embedding_backend

backend, folder, stream = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
extra = json.loads(sys.argv[4])
set_embedding_backend(backend)
bd._dims()
bd.PACED_TEMPLATES = 1000
folder.mkdir(parents=True)
db = bd._database(folder, bd._calibration()[0])
seen = {}
run = pipeline.Pipeline.run
async def timed(self):
    started = time.thread_time()
    try:
        return await run(self)
    finally:
        seen["loop"] = time.thread_time() - started
        stats = self.stats()
        seen["stages"] = dict(getattr(stats, "cpu_seconds", {}) or {})
        seen["frames_speech"] = stats.frames_speech
pipeline.Pipeline.run = timed
probe, summary, cpu = bd._run(db, stream, fast=False, extra=extra)
print("RESULT " + json.dumps({
    "audio_seconds": summary.audio_seconds,
    "speech_seconds": seen["frames_speech"] * 0.03,
    "windows": summary.windows,
    "process_cpu_seconds": cpu,
    "loop_thread_cpu_seconds": seen["loop"],
    "stage_cpu_seconds": seen["stages"],
}), flush=True)
"""


def replay(
    tree: Path, backend: str, stream: Path, folder: Path, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One paced replay of ``stream`` by ``tree``'s code in a child process (this checkout's
    model files, unless the release's checkout has its own: an int8 graph carries the key of
    the release's own ranges file)."""
    own = tree / "models" / "weights"
    models = os.environ.get("VOXMETER_MODELS") or str((REPO / "models" / "weights").resolve())
    if tree.resolve() != REPO.resolve() and own.is_dir():
        models = str(own)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            backend,
            str(folder),
            str(stream),
            json.dumps([*FULL, *extra]),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "VOXMETER_MODELS": models},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{tree}: replay failed ({done.returncode}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(f"edge side {tree.name} {backend} {stream.name}: {result}", flush=True)
    return result


def per_second(speech: dict[str, Any], silence: dict[str, Any]) -> dict[str, float]:
    """CPU per second of silence, of speech, and of the loop thread per audio second."""
    silent_rate = silence["process_cpu_seconds"] / silence["audio_seconds"]
    quiet = speech["audio_seconds"] - speech["speech_seconds"]
    spoken = (speech["process_cpu_seconds"] - silent_rate * quiet) / speech["speech_seconds"]
    audio = speech["audio_seconds"] + silence["audio_seconds"]
    loop = speech["loop_thread_cpu_seconds"] + silence["loop_thread_cpu_seconds"]
    return {
        "cpu_per_speech_second": round(spoken, 4),
        "cpu_per_silence_second": round(silent_rate, 4),
        "cpu_per_audio_second_speech_replay": round(
            speech["process_cpu_seconds"] / speech["audio_seconds"], 4
        ),
        "loop_thread_cpu_per_audio_second": round(loop / audio, 4),
        "loop_thread_cpu_per_audio_second_silence": round(
            silence["loop_thread_cpu_seconds"] / silence["audio_seconds"], 4
        ),
    }


def room_noise(folder: Path) -> Path:
    """``SILENCE_SECONDS`` of a quiet room's noise floor as 16 kHz PCM."""
    rng = np.random.default_rng(20261128)
    noise = rng.standard_normal(int(SILENCE_SECONDS * 16000)) * NOISE_RMS
    target = folder / "room-noise.wav"
    sf.write(target, noise.astype(np.float32), 16000, subtype="PCM_16")
    return target


def main() -> None:
    from bench.bench_daemon import _speech
    from bench.edge_child import _old_tree
    from monitor.features.base import DEFAULT_EMBEDDING

    run = Run("edge-side", command="python -m bench edge_side")
    folder = Path(tempfile.mkdtemp(prefix="voxmeter-bench-edge-side-"))
    stream, kind = _speech(folder)
    noise = room_noise(folder)
    old = Path(OLD_TREE) if OLD_TREE else _old_tree(folder, OLD)
    releases = {"old": (old, OLD_DEFAULT), "new": (REPO, DEFAULT_EMBEDDING)}
    try:
        raw: dict[str, dict[str, Any]] = {}
        for part, audio in (("speech", stream), ("silence", noise)):
            for release, (tree, backend) in releases.items():  # interleaved: same load
                raw.setdefault(release, {})[part] = replay(
                    tree, backend, audio, folder / f"{release}-{part}"
                )
        if os.environ.get("VOXMETER_BENCH_SIDE_PHONE_OFF", "1") == "1":  # the phone's share
            speech = replay(REPO, DEFAULT_EMBEDDING, stream, folder / "new-nophone", PHONE_OFF)
            raw["new_phone_off"] = {"speech": speech, "silence": raw["new"]["silence"]}
        if os.environ.get("VOXMETER_BENCH_SIDE_ECAPA", "0") == "1":  # like for like
            raw["new_ecapa_int8"] = {
                "speech": replay(REPO, "ecapa-int8", stream, folder / "new-ecapa-speech"),
                "silence": raw["new"]["silence"],
            }
    finally:
        if not OLD_TREE:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(old)])
    figures = {name: per_second(r["speech"], r["silence"]) for name, r in raw.items()}
    run.figures.update(
        {
            "old_release": OLD_NAME,
            "backends": {"old": OLD_DEFAULT, "new": DEFAULT_EMBEDDING},
            "speech_source": kind,
            "silence_source": f"{SILENCE_SECONDS:g} s Gaussian room noise, RMS {NOISE_RMS}",
            "overrides": FULL,
            "per_second": figures,
            "replays": raw,
        }
    )
    new, previous = figures["new"], figures["old"]
    run.target("cpu_per_speech_second", new["cpu_per_speech_second"], "<=", 0.03)
    run.target(
        "cpu_per_speech_second_vs_old",
        new["cpu_per_speech_second"],
        "<=",
        round(previous["cpu_per_speech_second"] / 3, 4),
        note=f"a third of {OLD_NAME}'s {previous['cpu_per_speech_second']} in this run",
    )
    if "new_phone_off" in figures:
        phone = round(
            new["cpu_per_speech_second"] - figures["new_phone_off"]["cpu_per_speech_second"], 4
        )
        run.figures["phone_cpu_per_speech_second"] = phone
        run.target("phone_cpu_per_speech_second", phone, "<=", 0.01)
    run.target("cpu_per_silence_second", new["cpu_per_silence_second"], "<=", 0.005)
    run.target(
        "loop_thread_cpu_per_audio_second", new["loop_thread_cpu_per_audio_second"], "<=", 0.005
    )
    print(f"edge side: wrote {run.write()}", flush=True)


if __name__ == "__main__":
    main()
