"""Synthetic speakers whose per-utterance observations look like the three real features.

f0 and phone observations are multinomial counts from a speaker-specific distribution (mixed
with a shared one, so speakers overlap), embeddings are unit vectors scattered around a speaker
centre. ``overlap`` in [0, 1] sets how much of every distribution is shared: 1 makes speakers
indistinguishable (the null case), 0 makes them as distinct as their own noise allows.
"""

from __future__ import annotations

import numpy as np

from monitor.calibration.protocol import SpeakerUtterances


def synthetic_speakers(
    rng: np.random.Generator,
    n_speakers: int = 8,
    n_utterances: int = 8,
    *,
    overlap: float = 0.6,
    seconds: tuple[float, float] = (2.0, 5.0),
) -> list[SpeakerUtterances]:
    shared_f0 = rng.dirichlet(np.full(107, 2.0))
    shared_phone = rng.dirichlet(np.full(39, 2.0))
    shared_centre = rng.normal(size=256)
    speakers = []
    for i in range(n_speakers):
        secs = rng.uniform(*seconds, n_utterances)
        f0_p = overlap * shared_f0 + (1 - overlap) * rng.dirichlet(np.full(107, 0.3))
        phone_p = overlap * shared_phone + (1 - overlap) * rng.dirichlet(np.full(39, 1.0))
        centre = overlap * shared_centre + (1 - overlap) * rng.normal(size=256)
        f0 = np.stack([rng.multinomial(int(s * 40), f0_p) for s in secs]).astype(float)
        phone = np.stack([rng.multinomial(int(s * 8), phone_p) for s in secs]).astype(float)
        embedding = centre + rng.normal(scale=1.2, size=(n_utterances, 256))
        embedding /= np.linalg.norm(embedding, axis=1, keepdims=True)
        speakers.append(
            SpeakerUtterances(
                alias=f"spk{i:02d}",
                utterances=tuple(f"u{k}" for k in range(n_utterances)),
                speech_seconds=secs,
                values={"f0": f0, "phone": phone, "embedding": embedding},
                weights={"f0": secs, "phone": secs, "embedding": secs},
            )
        )
    return speakers
