"""Every shipped backend's population model on speakers it has not seen: a few test-split corpus
speakers enrolled beside the shipped (train) population, their other utterances scored as the
daemon scores them and stated against the default N_pop. A member's own speech must come out
between 0 and the ceiling and above what the same window says about someone else — the
ECAPA backends once gave members −15 bits (a softmax denominator set by the reference's few
closest impostor pairs) and SRDs of −8,000 bits (a rank model read far below its resolution)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from monitor.calibration.buckets import load_default
from monitor.corpus import scan_corpus
from monitor.features.base import (
    EMBEDDING_BACKENDS,
    TemplateBatch,
    get_feature,
    set_embedding_backend,
    set_phone_backend,
)
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many
from monitor.population.shipped import join, load_shipped
from monitor.scoring.population import PopulationView
from monitor.scoring.scorer import PreparedTemplates
from monitor.settings.population import PopulationSettings

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

MEMBERS, ENROL, WINDOWS = 6, 6, 4


def _figures(
    backend: str, corpus: Path, members: list[str]
) -> tuple[np.ndarray, np.ndarray, float]:
    """(W, 2) LID and SRD of each held-out window about its own speaker, the same about the
    next member (an impostor), both against the default N_pop; and its ceiling."""
    set_embedding_backend(backend)
    calibration = load_default(backend)
    set_phone_backend(calibration.phone_backend)
    scanned = scan_corpus(corpus)
    paths = {s: [str(u.path) for u in scanned.utterances_of(s)[: ENROL + WINDOWS]] for s in members}
    found = extract_many(
        [p for ps in paths.values() for p in ps], FeatureCache(default_cache_dir()),
        features=("embedding",),
    ).files  # fmt: skip
    files = {s: [found[str(Path(p).absolute())] for p in ps] for s, ps in paths.items()}
    feature = get_feature("embedding")
    own = TemplateBatch.from_observations(
        [feature.pool([f.observations["embedding"] for f in files[s][:ENROL]]) for s in members]
    )
    shipped = load_shipped(backend)
    _, batch = join(members, own, shipped, "embedding")
    prepared = PreparedTemplates(feature, batch)
    assert shipped.model is not None
    view = PopulationView(shipped.model, PopulationSettings().size)
    genuine: list[tuple[float, float]] = []
    impostor: list[tuple[float, float]] = []
    for k, speaker in enumerate(members):
        windows = files[speaker][ENROL:]
        rows = prepared.similarities([f.observations["embedding"] for f in windows])
        for row, window in zip(rows, windows, strict=True):
            for subject, out in ((k, genuine), ((k + 1) % len(members), impostor)):
                lid, srd = view.figures(
                    row, subject, "embedding", window.speech_seconds, calibration
                )
                out.append((lid.bits, srd.bits))
    return np.array(genuine), np.array(impostor), view.ceiling_bits


@pytest.mark.parametrize("backend", sorted(EMBEDDING_BACKENDS))
def test_members_held_out_get_a_figure_between_zero_and_the_ceiling(
    backend: str, corpus_speakers: list[dict[str, str]], corpus_root: Path
) -> None:
    test = sorted(r["speaker"] for r in corpus_speakers if r["original_split"] == "test")
    genuine, impostor, ceiling = _figures(backend, corpus_root, test[:MEMBERS])
    assert genuine.shape == (MEMBERS * WINDOWS, 2)
    assert np.isfinite(genuine).all() and np.isfinite(impostor).all()
    assert (genuine <= ceiling + 1e-9).all() and (impostor <= ceiling + 1e-9).all()
    # a member's own speech: a calibrated LR above 1 for most clean windows (a weak window
    # may fall below, as it does against the templates present: ge2e's weakest, −3 bits)
    assert np.mean(genuine >= 0.0, axis=0).min() >= 0.75, genuine.min(axis=0)
    assert genuine.min() >= -6.0, genuine.min(axis=0)
    assert np.median(genuine, axis=0).min() >= 2.0, np.median(genuine, axis=0)
    # and the same window says more about its speaker than about someone else
    assert (genuine.mean(axis=0) > impostor.mean(axis=0) + 5.0).all()
    assert math.isclose(ceiling, math.log2(PopulationSettings().size))
