"""``voxmeter run`` and ``voxmeter enroll --local`` on a database that does not exist yet, and on
one that holds only the household: the shipped reference population is the reference set, so
every window of speech gets a figure and a member's day can exceed the default budget.

The speakers here are the corpus's *test* speakers: the shipped population (its train
speakers) has never seen them.
"""

from __future__ import annotations

import json
import math
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from monitor.population.shipped import load_shipped
from monitor.settings.population import PopulationSettings
from monitor.settings.sections import BudgetSettings

pytestmark = [pytest.mark.slow, pytest.mark.corpus]

REPO = Path(__file__).resolve().parents[2]
VOXMETER = [sys.executable, "-m", "monitor.cli"]
ENROL_UTTERANCES = 3
HOUSEHOLD = 4
# A guard against a hang on a loaded machine, not a claim about speed.
COMMAND_TIMEOUT_SECONDS = 540.0


def voxmeter(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*VOXMETER, *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        cwd=REPO,
    )
    assert result.returncode == 0, f"voxmeter {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result


def adult_test_speakers(corpus_speakers: list[dict[str, str]], count: int) -> list[str]:
    """``count`` adult test-split speakers, women and men alternating."""
    adults = [r for r in corpus_speakers if r["original_split"] == "test" and int(r["age"]) >= 18]
    women = [r["speaker"] for r in adults if r["gender"] == "f"]
    men = [r["speaker"] for r in adults if r["gender"] == "m"]
    return [s for pair in zip(women, men, strict=False) for s in pair][:count]


def stream(corpus: Path, speakers: list[str], out: Path, skip: int = ENROL_UTTERANCES) -> Path:
    """Each speaker's utterances after the first ``skip`` (those not enrolled), in turns."""
    pieces = []
    for speaker in speakers:
        for file in sorted((corpus / speaker).glob("*.flac"))[skip:]:
            audio, rate = soundfile.read(file, dtype="float32")
            assert rate == 16000
            pieces += [audio, np.zeros(rate // 2, dtype=np.float32)]
    soundfile.write(out, np.concatenate(pieces), 16000, subtype="PCM_16")
    return out


def run(db: Path, audio: Path) -> list[dict[str, Any]]:
    """``voxmeter run`` over ``audio``, fast; the logged windows."""
    result = voxmeter(
        "run", "--db", str(db), "--source", f"file:{audio}", "--fast",
        "--set", "prometheus.enabled=false", "--set", 'logging.format="json"',
    )  # fmt: skip
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("msg") == "window"]


def status(db: Path) -> list[dict[str, Any]]:
    return list(json.loads(voxmeter("status", "--db", str(db), "--json").stdout))


def test_run_creates_a_missing_database_and_measures_against_the_shipped_population(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
) -> None:
    db = tmp_path / "new" / "folder" / "voxmeter.db"
    (speaker,) = adult_test_speakers(corpus_speakers, 1)
    windows = run(db, stream(corpus_root, [speaker], tmp_path / "speech.wav", skip=4))
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert windows and all(math.isfinite(float(w["bits"])) for w in windows)
    rows = status(db)
    shipped = len(load_shipped("campplus-int8"))
    assert rows and all(r["figures"]["templates"] == shipped for r in rows)
    size = PopulationSettings().size
    for row in rows:
        assert row["figures"]["ceiling_bits"] == pytest.approx(math.log2(size))
        assert row["figures"]["population"] == size


def test_a_household_only_database_enrolled_into_a_new_file(
    corpus_root: Path, corpus_speakers: list[dict[str, str]], tmp_path: Path
) -> None:
    *household, stranger = adult_test_speakers(corpus_speakers, HOUSEHOLD + 1)
    home = tmp_path / "home"
    home.mkdir()
    for speaker in household:
        (home / speaker).symlink_to(corpus_root / speaker, target_is_directory=True)
    db = tmp_path / "state" / "voxmeter.db"
    voxmeter(
        "enroll", str(home), "--db", str(db), "--local",
        "--utterances", str(ENROL_UTTERANCES), "--no-room",
    )  # fmt: skip
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    speakers = [household[0], stranger, household[1]]
    windows = run(db, stream(corpus_root, speakers, tmp_path / "day.wav"))
    assert windows and all(math.isfinite(float(w["bits"])) for w in windows)
    rows = {r["track"]: r["figures"] for r in status(db)}
    members = [f for f in rows.values() if f["kind"] == "local"]
    assert members, rows
    for figures in members:
        templates = figures["templates"]
        assert templates == HOUSEHOLD + len(load_shipped("campplus-int8"))
        assert figures["ceiling_bits"] > math.log2(templates)
        last_window = figures["disclosures"][figures["budget_measure"]][1]
        assert last_window < figures["ceiling_bits"], figures
    budget = BudgetSettings().bits
    assert max(f["budget_figure_bits"] for f in members) > budget, members
