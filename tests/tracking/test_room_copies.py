"""Far-field copies of members' profiles: the member's enrolment files in
synthetic rooms (exponentially decaying noise, monitor/audio/reverb.py). A member heard across
an image-source room (pyroomacoustics, another room model than the copy's) meets their
far-field copy more often than their clean profile; strangers, dry or in the same rooms, are
not given to the member more than the calibrated false-member rate allows (≤ 0.5 %)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import fftconvolve

from monitor.audio.reverb import in_a_room, synthetic_rir
from monitor.settings.tracker import TrackerSettings
from monitor.tracking.adaptation import AdaptedProfiles
from monitor.tracking.thresholds import tracker_thresholds
from tests.tracking.test_adaptation import WINDOW_SECONDS, _speech, _windows
from tests.tracking.test_tracker import unit

RATE_HZ = 16000


def test_synthetic_rooms_decay_at_their_rt60(rng: np.random.Generator) -> None:
    """The response's energy decays 60 dB in RT60 (Schroeder backward integral, fitted between
    −5 and −25 dB as T20) and its direct path stands ``drr`` dB above the tail."""
    for rt60, drr in ((0.3, 3.0), (0.8, -6.0)):
        h = synthetic_rir(rng, rt60, drr)
        tail = h[1:]
        assert 10 * np.log10(1.0 / np.sum(tail**2)) == pytest.approx(drr, abs=1e-9)
        edc = np.cumsum(tail[::-1] ** 2)[::-1]
        db = 10 * np.log10(edc / edc[0])
        t = np.arange(db.size) / RATE_HZ
        fit = (db <= -5) & (db >= -25)
        slope = np.polyfit(t[fit], db[fit], 1)[0]
        assert -60.0 / slope == pytest.approx(rt60, rel=0.1)
    audio = rng.normal(size=RATE_HZ)
    wet = in_a_room(audio, 3)
    assert wet.shape == audio.shape
    assert np.sqrt(np.mean(wet**2)) == pytest.approx(np.sqrt(np.mean(audio**2)), rel=1e-9)
    np.testing.assert_array_equal(wet, in_a_room(audio, 3))  # seeded: the same copy


def _image_source_rooms(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    """Responses of seeded shoebox rooms (RT60 0.3–0.8 s, 1–4 m away), as bench/rooms.py."""
    import pyroomacoustics as pra

    responses = []
    for _ in range(count):
        dims = np.array([rng.uniform(3.5, 6.0), rng.uniform(3.0, 5.0), rng.uniform(2.4, 2.8)])
        absorption, order = pra.inverse_sabine(rng.uniform(0.3, 0.8), dims.tolist())
        room = pra.ShoeBox(dims.tolist(), fs=RATE_HZ, materials=pra.Material(absorption),
                           max_order=order)  # fmt: skip
        mic = np.array([dims[0] / 2, 0.3, 1.0])
        angle, distance = rng.uniform(0.3, np.pi - 0.3), rng.uniform(1.0, 4.0)
        far = mic + np.array([np.cos(angle), np.sin(angle), 0.0]) * distance
        far[:2] = np.clip(far[:2], 0.3, dims[:2] - 0.3)  # inside the room, 0.3 m from walls
        room.add_source(far.tolist())
        room.add_microphone(mic.tolist())
        room.compute_rir()
        responses.append(np.asarray(room.rir[0][0], dtype=np.float64))
    return responses


@pytest.mark.corpus
@pytest.mark.slow
def test_the_far_field_copy_meets_the_member_and_no_stranger(corpus_root: Path) -> None:
    from monitor.calibration.buckets import load_default
    from monitor.features.base import get_feature, set_embedding_backend

    set_embedding_backend("ecapa")
    feature = get_feature("embedding")
    with open(corpus_root / "speakers.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["original_split"] == "test"]
    adults = sorted(r["speaker"] for r in rows if int(r["age"]) >= 18)
    member, strangers = adults[0], adults[1:13]
    files = {s: sorted((corpus_root / s).glob("*.flac")) for s in [member, *strangers]}
    clean = [_speech(p) for p in files[member][:4]]
    observe = feature.observe  # type: ignore[attr-defined]
    enrolled = unit(np.asarray(feature.pool([observe(a, RATE_HZ) for a in clean]).values))
    room_copy = unit(np.asarray(feature.pool(
        [observe(in_a_room(a, k).astype(np.float32), RATE_HZ) for k, a in enumerate(clean)]
    ).values))  # fmt: skip
    profiles = AdaptedProfiles(enrolled[None], weight=0.0, half_seconds=60.0, drift=0.95)
    with_copy = AdaptedProfiles(
        enrolled[None], weight=0.0, half_seconds=60.0, drift=0.95, variants=[room_copy[None]]
    )
    settings = TrackerSettings()
    thresholds = tracker_thresholds(
        load_default("ecapa").metadata["tracking"],
        false_member_rate=settings.false_member_rate,
        false_join_rate=settings.false_join_rate,
        false_change_rate=settings.false_change_rate,
    )
    needed = thresholds.at(thresholds.profile, WINDOW_SECONDS)
    rng = np.random.default_rng(20261126)
    rooms = _image_source_rooms(rng, 6)

    def heard(speech: np.ndarray, k: int) -> np.ndarray:
        return fftconvolve(speech, rooms[k % len(rooms)])[: speech.shape[0]].astype(np.float32)

    theirs = np.concatenate([_speech(p) for p in files[member][4:]])
    far_member = [w for k in range(len(rooms))
                  for w in _windows(feature, heard(theirs, k), 30.0, rng)]  # fmt: skip
    stranger_windows = []
    for k, s in enumerate(strangers):  # 12 strangers × (60 s dry + 60 s in a room)
        speech = np.concatenate([_speech(p) for p in files[s]])
        stranger_windows += _windows(feature, speech, 60.0, rng)
        stranger_windows += _windows(feature, heard(speech, k), 60.0, rng)

    def accepted(p: AdaptedProfiles, windows: list[np.ndarray]) -> int:
        return int(sum(float(p.cosines(w)[0]) >= needed for w in windows))

    member_clean, member_copy = accepted(profiles, far_member), accepted(with_copy, far_member)
    strangers_clean = accepted(profiles, stranger_windows)
    strangers_copy = accepted(with_copy, stranger_windows)
    print(f"far member {member_clean} → {member_copy} of {len(far_member)}; strangers "
          f"{strangers_clean} → {strangers_copy} of {len(stranger_windows)}")  # fmt: skip
    assert member_copy > member_clean, (member_clean, member_copy, len(far_member))
    assert strangers_copy <= 0.005 * len(stranger_windows), (strangers_clean, strangers_copy)
