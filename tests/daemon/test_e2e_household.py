"""End to end: two rooms, one person. Two `voxmeter run` daemons (device ids room-a and room-b,
each its own copy of the same database, so the same alias) hear different speech of the enrolled
household member; one real Prometheus scrapes both with deploy/'s rules. The household series
compose the two devices' figures as deploy/prometheus/household.yml promises, the dashboard's
household panels return series, and the household alert follows its threshold."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from monitor.settings.population import PopulationSettings
from tests.daemon_corpus import PROFILE, DaemonCorpus
from tests.deploy.promql import HOUSEHOLD_RULES, RULES, dashboard_expressions
from tests.realparts import stop_process
from tests.realparts.mosquitto import free_port, wait_for_port

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.prometheus]

REPO = Path(__file__).resolve().parents[2]
ROOMS = {"room-a": 0.5, "room-b": 0.6}  # device id → budget (bits): the household's is 0.5
SELECTOR = f'speaker="{PROFILE}", feature="combined", measure="lid"'


def halves(stream: Path, folder: Path) -> list[Path]:
    """The person's held-out speech split in two: each room hears different utterances."""
    audio, rate = sf.read(stream, dtype="int16")
    silent = np.flatnonzero(np.abs(audio) == 0)
    cut = int(silent[np.argmin(np.abs(silent - audio.shape[0] // 2))])  # in a gap, near the middle
    paths = [folder / "first.wav", folder / "second.wav"]
    sf.write(paths[0], audio[:cut], rate, subtype="PCM_16")
    sf.write(paths[1], audio[cut:], rate, subtype="PCM_16")
    return paths


def value(result: list[dict[str, Any]]) -> float:
    (sample,) = result
    return float(sample["value"][1])


def test_two_daemons_compose_into_household_series(
    daemon_corpus: DaemonCorpus, prometheus_server: Callable[..., Any], tmp_path: Path
) -> None:
    ports = {room: free_port() for room in ROOMS}
    prometheus = prometheus_server(
        [f"127.0.0.1:{port}" for port in ports.values()], rule_files=[RULES, HOUSEHOLD_RULES]
    )
    daemons = []
    try:
        for (room, budget), audio in zip(
            ROOMS.items(), halves(daemon_corpus.known_stream, tmp_path), strict=True
        ):
            db = tmp_path / f"{room}.db"
            shutil.copy(daemon_corpus.db, db)
            db.chmod(0o600)
            command = [
                sys.executable, "-m", "monitor.cli", "run",
                "--db", str(db), "--source", f"file:{audio}", "--fast", "--keep-running",
                "--set", f"daemon.device_id={json.dumps(room)}",
                "--set", f"prometheus.port={ports[room]}",
                "--set", f"budget.bits={budget}",
                "--set", "budget.hysteresis_bits=0.1",
            ]  # fmt: skip
            log = open(tmp_path / f"{room}.log", "wb")  # noqa: SIM115 - the child keeps it
            daemons.append(subprocess.Popen(command, cwd=REPO, stdout=log, stderr=log))
        for port in ports.values():
            wait_for_port(port, timeout_seconds=180)

        def composed(_: list[dict[str, Any]]) -> bool:
            """Both rooms reported, and the rules agree with the raw series at this moment."""
            rooms = prometheus.query(f"voxmeter_disclosure_bits{{{SELECTOR}}}")
            if len(rooms) != 2:
                return False
            bits = sorted(float(r["value"][1]) for r in rooms)
            ceiling = value(prometheus.query("max(voxmeter_disclosure_ceiling_bits)"))
            try:
                low = value(
                    prometheus.query(f"household:voxmeter_disclosure_bits:max{{{SELECTOR}}}")
                )
                high = value(
                    prometheus.query(f"household:voxmeter_disclosure_bits:sum_capped{{{SELECTOR}}}")
                )
            except ValueError:  # not recorded yet
                return False
            return low == pytest.approx(bits[-1], abs=1e-9) and high == pytest.approx(
                min(sum(bits), ceiling), abs=1e-9
            )

        prometheus.wait_for(
            f"voxmeter_disclosure_bits{{{SELECTOR}}}", composed, timeout_seconds=240
        )
        rooms = prometheus.query(f"voxmeter_disclosure_bits{{{SELECTOR}}}")
        assert {r["metric"]["instance"] for r in rooms} == {
            f"127.0.0.1:{p}" for p in ports.values()
        }
        bits = [float(r["value"][1]) for r in rooms]
        ceiling = value(prometheus.query("max(voxmeter_disclosure_ceiling_bits)"))
        assert ceiling == pytest.approx(np.log2(PopulationSettings().size))
        low = value(prometheus.query(f"household:voxmeter_disclosure_bits:max{{{SELECTOR}}}"))
        high = value(
            prometheus.query(f"household:voxmeter_disclosure_bits:sum_capped{{{SELECTOR}}}")
        )
        assert max(bits) <= low <= high <= ceiling + 1e-9
        assert (
            value(prometheus.query(f'household:voxmeter_devices:count{{speaker="{PROFILE}"}}')) == 2
        )
        budget = value(
            prometheus.query(f'household:voxmeter_budget_bits:min{{speaker="{PROFILE}"}}')
        )
        assert budget == min(ROOMS.values())
        # unknown-N tracks are never composed across devices
        assert not prometheus.query('household:voxmeter_disclosure_bits:max{speaker=~"unknown-.*"}')

        # The dashboard's household panels return series for this household.
        household = {t: e for t, e in dashboard_expressions().items() if "Household" in t}
        assert len(household) >= 4
        assert not [t for t, e in household.items() if not prometheus.query(e)]

        # The household alert follows its threshold (pending at once; `for` is 1 minute).
        alert = f'ALERTS{{alertname="VoxmeterHouseholdBudgetExceeded", speaker="{PROFILE}"}}'
        if high > budget:
            (state,) = prometheus.wait_for(alert, timeout_seconds=30)
            assert state["metric"]["alertstate"] in ("pending", "firing")
        else:
            assert not prometheus.query(alert)
    finally:
        for daemon in daemons:
            stop_process(daemon, grace_seconds=30)
    for room, daemon in zip(ROOMS, daemons, strict=True):
        log = (tmp_path / f"{room}.log").read_text()
        assert daemon.returncode == 0, log[-3000:]
