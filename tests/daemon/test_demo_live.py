"""``make demo``'s live path as a new user runs it: scripts/demo.sh with the corpus, its own
PulseAudio virtual microphone (monitor's microphone source), the stream played once the capture
runs. The household member's first windows must go to the member, not to an unknown track."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.conftest import CORPUS, REPO
from tests.realparts.mosquitto import free_port
from tests.realparts.pulseaudio import pulseaudio_missing

pytestmark = [pytest.mark.pulseaudio, pytest.mark.corpus, pytest.mark.slow]


def test_the_demo_gives_the_member_their_first_windows(tmp_path: Path) -> None:
    reason = pulseaudio_missing()
    if reason:
        pytest.skip(reason)
    if not (CORPUS / "speakers.tsv").is_file():
        pytest.skip(f"no corpus at {CORPUS}")
    env = {
        **os.environ,
        "DEMO_SECONDS": "30",  # the member's first utterances, well before the stranger
        "DEMO_SPEAKERS": "20",  # enough templates for the normalised scores' cohort
        "DEMO_DIR": str(tmp_path),
        "DEMO_PORT": str(free_port()),
        "PYTHONPATH": str(REPO),
    }
    env.pop("PULSE_SERVER", None)  # the demo starts its own
    done = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=1500, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "on mic:pulse" in done.stdout, "the demo fell back to a file replay"
    member = (tmp_path / "member").read_text().strip()
    with sqlite3.connect(tmp_path / "demo.db") as db:
        profiles = {
            alias
            for (alias,) in db.execute(
                "SELECT p.alias FROM local_profiles p JOIN identities i ON i.id = p.identity_id "
                "WHERE i.alias = ?",
                (member,),
            )
        }
        first = [t for (t,) in db.execute("SELECT track FROM ledger_windows ORDER BY window_start")]
    assert profiles, "the member has no local profile"
    assert len(first) >= 3, done.stdout[-2000:]
    assert set(first[:3]) <= profiles, f"first windows went to {first[:3]}, not {profiles}"
