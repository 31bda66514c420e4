"""The CPU the window-consistency test adds per audio second.

    PYTHONPATH=. .venv/bin/python scripts/consistency_cpu.py

:meth:`monitor.tracking.turns.TurnSplitter.split` with and without the test, on the daemon's
windows (its VAD and windower) of one simulated room stream of test-split speakers (4 min),
their filterbank frames handed in as the embedding stream hands them; and, as an upper bound,
computing the frames of the 1–2 s windows the splitter did not look at before (the daemon
reuses the ECAPA stream's where it can). Thread CPU time: robust to the machine's load.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.household import make_stream, trimmed
from bench.rooms import daemon_windows, in_room
from bench.tracked import held_out_speakers
from monitor.corpus.scan import scan_corpus
from monitor.tracking.consistency import load_consistency
from monitor.tracking.turns import TurnSplitter, frames_of
from scripts.calibrate_turns import CORPUS


def main() -> None:
    speakers = held_out_speakers("ecapa")[:20]
    corpus = scan_corpus(CORPUS)
    speech = {s: [trimmed(u.path) for u in corpus.utterances_of(s)] for s in speakers}
    with tempfile.TemporaryDirectory() as folder:
        stream = make_stream(
            0, speech=speech, pool=speakers, minutes=4, seed=7, folder=Path(folder)
        )
        stream, _ = in_room(stream, seed=7, index=0, tv_speech=None)
        windows = daemon_windows(stream.path)
    frames = [frames_of(w.samples) for w in windows]

    def embed(samples: np.ndarray) -> np.ndarray:  # the uncertain band's parts: not measured
        return np.random.default_rng(samples.shape[0]).standard_normal(192)

    plain = TurnSplitter(embed, change_cosine=0.5)
    checked = TurnSplitter(embed, change_cosine=0.5, consistency=load_consistency(0.01))
    spent = {"without": 0.0, "with": 0.0}
    for _ in range(3):
        for name, splitter in (("without", plain), ("with", checked)):
            started = time.thread_time()
            for window, frame in zip(windows, frames, strict=True):
                splitter.split(window, frame)
            spent[name] += (time.thread_time() - started) / 3
    short = [w for w in windows if plain.parts(w) < 2]
    started = time.thread_time()
    for window in short:
        frames_of(window.samples)
    framing = time.thread_time() - started
    audio = stream.seconds
    print(f"audio {audio:.1f} s, windows {len(windows)} (1-2 s: {len(short)})")
    print(f"split: without {spent['without'] / audio:.6f}, with {spent['with'] / audio:.6f} "
          f"core per audio s; added {(spent['with'] - spent['without']) / audio:.6f}")  # fmt: skip
    print(f"frames of the 1-2 s windows, if not reused: {framing / audio:.6f} core per audio s")


if __name__ == "__main__":
    main()
