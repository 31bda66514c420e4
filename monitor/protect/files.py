"""Anonymised copies of audio files, for what must see the audio as the upstream would: the
offline audit (``evaluate --protect``) and the lazy-informed templates of ``enroll --protect``.
The copies are 16 kHz 16-bit FLAC in a temporary folder their caller deletes."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from monitor.protect.mcadams import Alpha, anonymise

DEFAULT_SEED = 20240
"""Seed of the per-utterance α draws: the same files give the same anonymised audio."""

LAZY_SUFFIX = "+mcadams"
"""A lazy-informed template is stored as the feature's name plus this (``embedding+mcadams``)."""


def anonymise_file(source: Path, destination: Path, alpha: float) -> None:
    """One audio file anonymised into ``destination`` (16 kHz FLAC, 16-bit, clipped)."""
    import soundfile

    from monitor.audio.file import read_audio
    from monitor.audio.frames import RATE_HZ

    audio, _ = read_audio(source)
    out = np.clip(anonymise(audio.astype(np.float64), RATE_HZ, alpha), -1.0, 1.0)
    destination.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(destination, out, RATE_HZ, subtype="PCM_16", format="FLAC")


def utterance_alphas(paths: Sequence[Path], alpha: Alpha, seed: int) -> list[float]:
    """α of each utterance, drawn in the given order from one seeded generator."""
    rng = random.Random(seed)
    return [alpha.draw(rng) for _ in paths]
