"""A first start as a Home Assistant household makes it: ``voxmeter run`` (the real entry point,
a process of its own) on a database path that does not exist, a real mosquitto and a Wyoming
source. Every entity is published at once, *Enrolment progress* says what to do next, and the
database is created 0600; an alias written to the text's command topic, the button pressed and
about 40 s of one corpus speaker (a test-split speaker: the shipped population never heard
them) give that alias its own entities, and their later speech is theirs."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.enrol_daemon import (
    DEVICE,
    DISCOVERY,
    PREFIX,
    config_topic,
    daemon_process,
    newcomers,
    progress_of,
    run_command,
    speech_of,
)
from tests.exporters.test_exporter_mqtt import subscribed
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker, free_port
from tests.wyoming.wyoming_peers import stream_to

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.mosquitto]

REPO = Path(__file__).resolve().parents[2]
ENTITIES = (
    ("text", "enrol_alias"),
    ("button", "enrol_start"),
    ("button", "enrol_cancel"),
    ("sensor", "enrolment"),
    ("binary_sensor", "online"),
    ("sensor", "templates"),
)


def test_first_start_then_enrol_from_home_assistant(
    mosquitto: MosquittoBroker,
    corpus_root: Path,
    corpus_speakers: list[dict[str, str]],
    tmp_path: Path,
) -> None:
    tests_split = [r for r in corpus_speakers if r["original_split"] == "test"]
    reader = newcomers(corpus_root, tests_split, ())[0]
    enrolling = speech_of(corpus_root, reader, 0, 9, tmp_path / "reader.wav")
    later = speech_of(corpus_root, reader, 9, 1, tmp_path / "later.wav")
    db = tmp_path / "share" / "voxmeter" / "voxmeter.db"  # neither the folder nor the file
    port = free_port()
    command = run_command(mosquitto, db, f"daemon.source=wyoming-listen://127.0.0.1:{port}")
    state_topic = f"{PREFIX}/speakers/reader/state"

    async def scenario() -> None:
        async with subscribed(mosquitto, "#") as sub:

            def progress() -> dict[str, object]:
                return progress_of(sub)

            with daemon_process(command, tmp_path / "run.log"):
                await sub.wait(lambda: all(sub.on(config_topic(*e)) for e in ENTITIES), 30)
                await sub.wait(lambda: bool(progress()), 30)
                assert str(progress()["status"]).startswith("Nobody enrolled yet"), progress()
                assert stat.S_IMODE(db.stat().st_mode) == 0o600
                command_topic = f"{PREFIX}/enrolment/alias/set"
                await sub.client.publish(command_topic, b"reader", qos=1)
                await sub.wait(lambda: progress().get("alias") == "reader")
                await sub.client.publish(f"{PREFIX}/enrolment/command", b"START", qos=1)
                await sub.wait(lambda: progress().get("phase") == "listening")
                await stream_to("127.0.0.1", port, enrolling, timeout_seconds=120)
                await sub.wait(lambda: progress().get("phase") in ("done", "refused"), 300)
                assert progress()["status"] == "Done: reader enrolled", progress()
                disclosure = config_topic("sensor", "reader_disclosure")
                await sub.wait(lambda: bool(sub.on(disclosure) and sub.on(disclosure)[-1]), 30)
                await stream_to("127.0.0.1", port, later, timeout_seconds=120)
                await sub.wait(
                    lambda: any(s and s["windows"] >= 1 for s in sub.on(state_topic)), 120
                )

    asyncio.run(scenario())


def test_a_start_the_user_must_fix_is_one_entity_and_no_restart_loop(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """A database that is not one: the one line in the log and in the retained status the
    device's *Problem* entity reads, the process waits (a supervisor restarts nothing) and exits
    2 when stopped."""
    db = tmp_path / "voxmeter.db"
    db.write_text("these are not the templates you are looking for\n" * 100)
    db.chmod(0o600)
    settings = [
        f"daemon.source=wyoming-listen://127.0.0.1:{free_port()}",
        f"daemon.db={db}",
        f"daemon.device_id={json.dumps(DEVICE)}",
        "prometheus.enabled=false",
        "wyoming.zeroconf=false",
        "mqtt.enabled=true",
        f"mqtt.port={mosquitto.port}",
        "homeassistant.discovery=true",
        f"homeassistant.discovery_prefix={DISCOVERY}",
    ]
    command = [sys.executable, "-m", "monitor.cli", "run"]
    command += [item for setting in settings for item in ("--set", setting)]

    status = f"{PREFIX}/status"

    async def scenario() -> tuple[str, int | None, str, int]:
        async with subscribed(mosquitto, "#") as sub:
            process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
            try:
                await sub.wait(lambda: any(s and "problem" in s for s in sub.on(status)), 30)
                entities = [config_topic("binary_sensor", e) for e in ("problem", "online")]
                await sub.wait(lambda: all(sub.on(e) for e in entities), 30)
                running = process.poll()
            finally:
                stop_process(process)
            _, stderr = process.communicate(timeout=30)
            await sub.wait(lambda: sub.on(status)[-1]["state"] == "offline", 30)
            problem = str(sub.on(status)[-1]["problem"])  # still shown once stopped
            return problem, running, stderr, process.returncode

    problem, running, stderr, code = asyncio.run(scenario())
    assert code == 2, stderr
    assert running is None  # still there: nothing for a supervisor to restart
    assert str(db) in problem and "\n" not in problem
    assert stderr.count(problem) >= 1 and "Traceback" not in stderr
    assert db.read_text().startswith("these are not")  # nothing lost
