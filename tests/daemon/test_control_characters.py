"""Aliases with control characters (ESC, OSC, CR, TAB) and MQTT wildcards: escaped on every
terminal and log line (no forged lines, no recoloured terminal), encoded in MQTT topics."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.exporters.mqtt import topic_level
from monitor.printable import printable
from monitor.store.database import open_store
from tests.daemon.test_stdin_runs import retained
from tests.realparts.mosquitto import MosquittoBroker

# wide enough for the status table whole: a cell wrapped at a narrower width splits the alias
runner = CliRunner(env={"COLUMNS": "1000"})

OSC_TITLE = "evil\x1b]0;pwned\x07"
HOSTILE_PROFILE = "bob\x1b[31m\t#+"


def test_printable_escapes_only_what_a_terminal_would_act_on() -> None:
    assert printable("bob\x1b[31m") == "bob\\x1b[31m"
    assert printable("tab\tname") == "tab\\tname"
    assert printable("a\rb\nc") == "a\\rb\\nc"
    assert printable(OSC_TITLE) == "evil\\x1b]0;pwned\\x07"
    assert printable("x\x9b2J\u200b\u2028") == "x\\x9b2J\\u200b\\u2028"
    assert printable("Zoë 李") == "Zoë 李"  # printable letters stay
    assert printable(7) == "7"


def test_db_list_and_show_escape_control_characters(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    with open_store(db) as store:
        store.add_identity(OSC_TITLE, {"note": "line\rforged\x1b[2J"})
    listed = runner.invoke(app, ["db", "list", "--db", str(db)])
    shown = runner.invoke(app, ["db", "show", OSC_TITLE, "--db", str(db)])
    for result in (listed, shown):
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\r" not in result.output
        assert "evil\\x1b]0;pwned\\x07" in result.output
    assert "line\\rforged\\x1b[2J" in shown.output


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.mosquitto
def test_daemon_with_a_hostile_profile_alias(
    daemon_corpus, daemon_db: Path, mosquitto: MosquittoBroker
) -> None:
    """Logs, the run summary and ``status`` escape the alias; MQTT carries it in an encoded
    topic level on one connection (no crash, no disconnection loop)."""
    with open_store(daemon_db) as store:
        embedding = store.template(daemon_corpus.profile_identity, "embedding")
        store.remove_local_profile("home-1")
        store.add_local_profile(HOSTILE_PROFILE, daemon_corpus.profile_identity, embedding)
    command = [
        sys.executable, "-m", "monitor.cli", "run", "--db", str(daemon_db), "--fast",
        "--source", f"file:{daemon_corpus.known_stream}", "--set", "prometheus.enabled=false",
        "--set", "mqtt.enabled=true", "--set", f"mqtt.port={mosquitto.port}",
        "--set", "daemon.device_id=hostile", "--set", 'logging.format="keyvalue"',
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr and "\t" not in done.stderr
    escaped = printable(HOSTILE_PROFILE)
    assert f"{escaped}: " in done.stderr  # the run summary
    windows = [line for line in done.stderr.splitlines() if "msg=window " in line]
    assert windows and all('track="bob\\u001b[31m\\t#+"' in line for line in windows)
    assert done.stderr.count("connected to MQTT broker") == 1
    status = runner.invoke(app, ["status", "--db", str(daemon_db)])
    assert status.exit_code == 0, status.output
    assert "\x1b" not in status.output and escaped in status.output
    topic = f"voxmeter/hostile/speakers/{topic_level(HOSTILE_PROFILE)}/state"
    state = asyncio.run(retained(mosquitto, topic))
    assert state["alias"] == HOSTILE_PROFILE
