"""A small real template database and streams for the daemon tests (built once per session).

Eight adult corpus speakers are enrolled (templates pooled from their first six utterances);
the first of them is also the device's local profile ``home-1``. The held-out utterances of that
speaker, and utterances of a ninth speaker who is not enrolled, are concatenated into 16 kHz
WAV streams in a temporary folder (never in the repository).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.audio.file import read_audio
from monitor.calibration.buckets import COMBINED, BucketCalibration, CalibrationSet
from monitor.corpus import scan_corpus
from monitor.features.base import FEATURE_NAMES, get_feature, phone_backend
from monitor.features.extract import FeatureCache, default_cache_dir, extract_many
from monitor.store.database import open_store
from monitor.store.templates import Enrolment

ENROLLED = 8
TEMPLATE_UTTERANCES = 6
PROFILE = "home-1"


def hand_calibration(n_identities: int) -> CalibrationSet:
    """A fixed, plausible calibration (rank 1 favoured, positive LID weights) for tests."""

    def bucket(seconds: float, weight: float) -> BucketCalibration:
        prior = -math.log(max(n_identities - 1, 1))
        # LLR = w·z − w²/2: genuine and impostor z unit Gaussians w apart, E[LR | impostor] = 1
        return BucketCalibration(
            seconds=seconds,
            alpha=0.4,
            beta=3.0,
            loss="ll",
            lid_weight=weight,
            lid_bias=prior - weight**2 / 2,
            log_prior_odds=prior,
            max_seconds=24.0 if seconds == 12.0 else math.nan,
        )

    weights = {"f0": 0.8, "phone": 0.6, "embedding": 2.5, COMBINED: 1.0}
    return CalibrationSet(
        {name: (bucket(3.0, w), bucket(12.0, w)) for name, w in weights.items()},
        # the phone backend the fixture's templates were extracted with (the default)
        {"corpus": "tests", "protocol": "hand-made", "phone_backend": phone_backend()},
    )


@dataclass(frozen=True)
class DaemonCorpus:
    db: Path  # template database (copy it before writing)
    aliases: tuple[str, ...]  # enrolled identity aliases (corpus speaker ids)
    profile_identity: str  # identity of the local profile home-1
    known_stream: Path  # held-out speech of the profile's speaker
    stranger_stream: Path  # speech of a speaker who is not enrolled
    stranger: str


def _concatenate(paths: list[Path], target: Path) -> Path:
    gap = np.zeros(8000, dtype=np.float32)
    pieces = []
    for path in paths:
        audio, _ = read_audio(path)
        pieces += [audio, gap]
    sf.write(target, np.concatenate(pieces), 16000, subtype="PCM_16")
    return target


@pytest.fixture(scope="session")
def daemon_corpus(
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> DaemonCorpus:
    adults = [r for r in corpus_speakers if int(r["age"]) >= 18]
    women = [r["speaker"] for r in adults if r["gender"] == "f"]
    men = [r["speaker"] for r in adults if r["gender"] == "m"]
    chosen = [s for pair in zip(women, men, strict=False) for s in pair][: ENROLLED + 1]
    enrolled, stranger = chosen[:ENROLLED], chosen[ENROLLED]
    corpus = scan_corpus(corpus_root)
    utterances = {s: [u.path for u in corpus.utterances_of(s)] for s in chosen}
    folder = tmp_path_factory.mktemp("daemon-corpus")
    template_paths = [p for s in enrolled for p in utterances[s][:TEMPLATE_UTTERANCES]]
    # the user's feature cache (keyed by path, size, mtime and feature version): fast re-runs
    extraction = extract_many(template_paths, FeatureCache(default_cache_dir()))
    assert not extraction.errors
    db = folder / "templates.db"
    with open_store(db) as store:
        enrolments = []
        for speaker in enrolled:
            files = [
                extraction.files[str(p.absolute())]
                for p in utterances[speaker][:TEMPLATE_UTTERANCES]
            ]
            observations = {
                name: get_feature(name).pool([f.observations[name] for f in files])
                for name in FEATURE_NAMES
            }
            enrolments.append(Enrolment(speaker, observations, {"source": "test"}))
        store.bulk_replace_templates(enrolments)
        store.add_local_profile(PROFILE, enrolled[0], store.template(enrolled[0], "embedding"))
        store.save_calibration(hand_calibration(len(enrolled)))
    known = _concatenate(utterances[enrolled[0]][TEMPLATE_UTTERANCES:], folder / "known.wav")
    strange = _concatenate(utterances[stranger][:4], folder / "stranger.wav")
    return DaemonCorpus(db, tuple(sorted(enrolled)), enrolled[0], known, strange, stranger)


def reference_count(aliases: tuple[str, ...], backend: str = "campplus-int8") -> int:
    """N the daemon scores against: the enrolled identities and the shipped population's
    speakers (those enrolled under their corpus id count once)."""
    from monitor.population.shipped import load_shipped

    shipped = load_shipped(backend).speakers
    return len(aliases) + len(set(shipped) - set(aliases))


@pytest.fixture
def daemon_db(daemon_corpus: DaemonCorpus, tmp_path: Path) -> Path:
    """A private copy of the template database for one test."""
    target = tmp_path / "voxmeter.db"
    shutil.copy(daemon_corpus.db, target)
    target.chmod(0o600)
    return target
