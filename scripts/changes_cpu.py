"""The CPU the pause change detector costs per second of speech.

    PYTHONPATH=. .venv/bin/python scripts/changes_cpu.py [--minutes 4]

:meth:`monitor.tracking.turns.TurnSplitter.split` with the shipped pause model
(``tracker.change_detection = "pauses"``) on the daemon's windows (its VAD and windower) of one
simulated room stream of test-split speakers, with and without a television; the windows'
filterbank frames handed in as the ECAPA embedding stream hands them (the detector's own
cost: the cepstra, the loudness, the dips and the scores), and apart what computing those frames
costs when no ECAPA stream holds them (CAM++, the torch runtime). BLAS on one thread, as the
daemon runs it (a second OpenBLAS thread only spins). Thread CPU time, the best of three
passes: robust to the machine's load.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.acoustics import in_room
from bench.household import make_stream, trimmed
from bench.rooms import daemon_windows
from bench.tracked import held_out_speakers
from monitor.corpus.scan import scan_corpus
from monitor.daemon.stages import one_blas_thread
from monitor.tracking.pauses import load_pause_model
from monitor.tracking.turns import TurnSplitter, frames_of
from scripts.calibrate_turns import CORPUS


def never_embed(samples: np.ndarray) -> np.ndarray:
    raise AssertionError("the pause detector embeds nothing")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=4.0)
    args = parser.parse_args()
    speakers = held_out_speakers("ecapa")[:20]
    corpus = scan_corpus(CORPUS)
    speech = {s: [trimmed(u.path) for u in corpus.utterances_of(s)] for s in speakers}
    splitter = TurnSplitter(never_embed, change_cosine=-1.0, pauses=load_pause_model())
    one_blas_thread()
    for television in (False, True):
        with tempfile.TemporaryDirectory() as folder:
            stream = make_stream(
                0, speech=speech, pool=speakers, minutes=args.minutes, seed=7, folder=Path(folder)
            )
            tv = [speech[s] for s in speakers[-3:]] if television else None
            stream, _ = in_room(stream, seed=7, index=0, tv_speech=tv)
            windows = daemon_windows(stream.path)
        spoken = sum(w.speech_seconds for w in windows)
        framing, detecting = np.inf, np.inf
        for _ in range(3):
            started = time.thread_time()
            frames = [frames_of(w.samples) for w in windows]
            framing = min(framing, time.thread_time() - started)
            started = time.thread_time()
            cut = sum(len(splitter.split(w, f)) > 1 for w, f in zip(windows, frames, strict=True))
            detecting = min(detecting, time.thread_time() - started)
        print(
            f"{'room + television' if television else 'room'}: {len(windows)} windows, "
            f"{spoken:.1f} s of speech, {cut} cut; detector {detecting / spoken:.6f} core per "
            f"second of speech (its frames, when not reused: {framing / spoken:.6f})"
        )


if __name__ == "__main__":
    main()
