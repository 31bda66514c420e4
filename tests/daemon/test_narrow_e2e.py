"""An 8 kHz device against members enrolled from 16 kHz files, on the real corpus:
``voxmeter enroll --local`` stores each member's narrow-band copy beside their template, and the
daemon reading an 8 kHz recording of a member gives its windows to that member through the
copies; the same database without them (an old one) still runs, wide band, with one warning."""

from __future__ import annotations

import asyncio
import csv
import logging
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import resample_poly
from typer.testing import CliRunner

from monitor.audio.file import read_audio
from monitor.cli import app
from monitor.daemon.build import build_pipeline
from monitor.enrolment.variants import narrow_name, room_name
from monitor.events.messages import FeatureWindow
from monitor.settings.config import load_config
from monitor.store.database import open_store

pytestmark = [pytest.mark.corpus, pytest.mark.slow]

ENROL_FILES = 4
BACKEND = "ecapa"


def _members(corpus_root: Path, count: int = 3) -> list[str]:
    """Adult test-split speakers, women and men alternating (clearly different voices)."""
    with open(corpus_root / "speakers.tsv", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t") if r["original_split"] == "test"]
    adults = [r for r in rows if int(r["age"]) >= 18]
    women = [r["speaker"] for r in adults if r["gender"] == "f"]
    men = [r["speaker"] for r in adults if r["gender"] == "m"]
    return [s for pair in zip(women, men, strict=False) for s in pair][:count]


def _enrol(corpus_root: Path, members: list[str], tmp_path: Path) -> Path:
    root = tmp_path / "household"
    for speaker in members:
        (root / speaker).mkdir(parents=True)
        for path in sorted((corpus_root / speaker).glob("*.flac"))[:ENROL_FILES]:
            (root / speaker / path.name).symlink_to(path)
    db = tmp_path / "voxmeter.db"
    args = ["enroll", str(root), "--db", str(db), "--local", "--features", "embedding"]
    result = CliRunner().invoke(app, [*args, "--embedding", BACKEND, "--no-cache"])
    assert result.exit_code == 0, result.output
    return db


def _device_recording(paths: list[Path], target: Path) -> Path:
    """The member's other utterances as an 8 kHz device records them (0.5 s apart)."""
    pieces = []
    for path in paths:
        audio, _ = read_audio(path)
        pieces += [resample_poly(audio, 1, 2), np.zeros(4000)]
    sf.write(target, np.concatenate(pieces).astype(np.float32), 8000, subtype="PCM_16")
    return target


def _tracks(db: Path, stream: Path) -> tuple[list[str | None], object]:
    """Each scored window's track, through the daemon's own pipeline (file source, fast)."""
    config = load_config(
        None,
        [
            f"daemon.db={db}",
            f"daemon.source=file:{stream}",
            "audio.pace=fast",
            "prometheus.enabled=false",
            "mqtt.enabled=false",
            f'features.embedding="{BACKEND}"',
            'features.enabled=["embedding"]',
            # the household's own templates alone: what is at stake is whether the members'
            # narrow copies exist (the shipped population brings narrow copies of its own)
            "population.shipped=false",
        ],
    )
    tracks: list[str | None] = []
    bands: set[str] = set()
    with open_store(db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[])
        process = pipeline.tracker.process

        def watched(window: FeatureWindow):  # type: ignore[no-untyped-def]
            tracked, events = process(window)
            bands.add(window.band)
            tracks.append(None if tracked is None else tracked.track)
            return tracked, events

        pipeline.tracker.process = watched  # type: ignore[method-assign]
        asyncio.run(pipeline.run())
    assert bands == {"narrow"}  # the file's 8 kHz reached every window
    return tracks, pipeline


def test_an_8khz_member_meets_their_narrow_copy(
    corpus_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    members = _members(corpus_root)
    db = _enrol(corpus_root, members, tmp_path)
    with open_store(db) as store:
        # --local: the far-field copies too, each recorded with its model
        assert store.template_counts() == {"embedding": 3, narrow_name(): 3, room_name(): 3}
        assert store.template_model(room_name()) == store.template_model("embedding") + "+room"
        assert store.template_model(narrow_name()) == store.template_model("embedding") + "+narrow"
        aliases, wide = store.template_batch("embedding")
        narrow_aliases, narrow = store.template_batch(narrow_name())
        assert narrow_aliases == aliases
        cosines = np.sum(wide.matrix * narrow.matrix, axis=1) / (
            np.linalg.norm(wide.matrix, axis=1) * np.linalg.norm(narrow.matrix, axis=1)
        )
        assert np.all(cosines < 0.99) and np.all(cosines > 0.3)  # the same voice, another band
        assert {p.alias for p in store.local_profiles()} == set(members)
    member = members[0]
    others = sorted((corpus_root / member).glob("*.flac"))[ENROL_FILES:]
    stream = _device_recording(others, tmp_path / "device-8k.wav")

    tracks, pipeline = _tracks(db, stream)
    right = sum(t == member for t in tracks)
    assert len(tracks) >= 5
    assert pipeline.track_scorer.narrow is not None  # disclosure against the narrow templates
    assert not set(tracks) & set(members[1:])  # never another member
    assert right >= 0.8 * len(tracks), tracks

    # an old database (no narrow copies) still runs, as before: wide band, one warning
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM templates WHERE feature = ?", (narrow_name(),))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="monitor.daemon.pipeline"):
        wide_tracks, old = _tracks(db, stream)
    warnings = [r.getMessage() for r in caplog.records if "narrow-band copy" in r.getMessage()]
    assert len(warnings) == 1 and "re-enrol" in warnings[0]
    assert old.track_scorer.narrow is None
    assert "the templates and members' profiles" in warnings[0]
    assert sum(t == member for t in wide_tracks) < right, (tracks, wide_tracks)
