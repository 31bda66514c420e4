"""Rules every command shares: one rule for speaker names (enroll, calibrate and evaluate refuse
the same folders, before any audio is processed); composition with an absurd ε is one line, no
overflow warning; a secret in a wrong config value is never shown; ports are 1..65535."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from monitor.cli import app
from monitor.disclosure.composition import MAX_EPSILON_NATS
from monitor.errors import ConfigError, InputError
from monitor.scorefiles.compose import compose_rows
from monitor.settings.config import load_config
from tests.test_cli_hardening import entries, link_speakers, one_error_line, runner

# ---- speaker names: one rule for every command that reads a corpus -----------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [("d\n2", "control character"), (" d2", "leading or trailing spaces"), ("d\u202e2", "control")],
)
def test_every_corpus_command_refuses_the_same_speaker_names(
    digits_corpus: Path, tmp_path: Path, name: str, problem: str
) -> None:
    corpus = link_speakers(digits_corpus, tmp_path / "c", {"d1": "d1", "d2": name, "d3": "d3"})
    cache, out = tmp_path / "cache", tmp_path / "out"
    commands = {
        "enroll": ["--db", str(tmp_path / "v.db")],
        "calibrate": ["--out", str(tmp_path / "cal.json")],
        "evaluate": ["--out", str(out)],
    }
    for command, args in commands.items():
        result = runner.invoke(app, [command, str(corpus), *args, "--cache", str(cache)])
        line = one_error_line(result, problem, "rename the folder")
        assert "\n" not in line and repr(name) in line, (command, line)
    assert entries(cache) == []  # nothing extracted
    assert not (tmp_path / "v.db").exists() and not (tmp_path / "cal.json").exists()
    assert not out.exists()


# ---- compose: ε out of range is one line, never overflow warnings or null bounds -------------


@pytest.mark.parametrize("epsilon", ["1e308", "101", "inf", "0", "-1"])
def test_compose_refuses_epsilon_out_of_range_in_one_line(epsilon: str) -> None:
    args = ["compose", "--epsilon", epsilon, "--delta", "1e-5", "--steps", "3", "10", "--json"]
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "monitor.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "Warning" not in done.stderr
    assert f"--epsilon: must be in (0, {MAX_EPSILON_NATS:g}] nats per release" in done.stderr


def test_compose_at_the_largest_epsilon_gives_finite_bounds_without_warnings() -> None:
    steps = [1, 2, 3, 10, 1000, 10_000_000]
    for delta in (1e-5, 5e-324, 0.999999):
        for epsilon in (MAX_EPSILON_NATS, 5e-324):
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # an overflow warning fails the test
                rows = compose_rows(epsilon, delta, steps)
            table = np.array([[r.basic, r.drv, r.advanced, r.optimal] for r in rows])
            assert np.all(np.isfinite(table)) and np.all(table >= 0), (epsilon, delta)
            # every bound is at most basic composition, k·ε
            basic = table[:, 0]
            assert np.all(table[:, 2:] <= basic[:, None] * (1 + 1e-12)), (epsilon, delta)
    result = runner.invoke(
        app, ["compose", "--epsilon", "100", "--delta", "1e-5", "--steps", "3", "--json"]
    )
    assert result.exit_code == 0 and "null" not in result.stdout
    assert json.loads(result.stdout)[0]["basic"] == pytest.approx(300.0, rel=1e-12)
    with pytest.raises(InputError, match="--epsilon"):
        compose_rows(1e308, 1e-5, [3])


# ---- config: secrets never echoed; ports 1..65535 ------------------------------------------------

SECRET = "hunter2-correct-horse"


@pytest.mark.parametrize(
    "value",
    [f'["{SECRET}"]', f'{{a = "{SECRET}"}}', "12345678", "true", f'[["{SECRET}"]]'],
)
def test_a_wrong_password_value_names_the_key_not_the_value(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, [f"mqtt.password={value}"])
    assert raised.value.key == "mqtt.password"
    assert SECRET not in str(raised.value) and "12345678" not in str(raised.value)
    assert "must be a string" in str(raised.value)
    config = tmp_path / "c.toml"
    config.write_text(f"[mqtt]\npassword = {value}\n")
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "mqtt.password" in done.stderr
    assert SECRET not in done.stderr and "12345678" not in done.stderr


def test_the_password_is_not_in_the_settings_repr() -> None:
    config = load_config(None, [f'mqtt.password="{SECRET}"'])
    assert config.mqtt.password == SECRET
    assert SECRET not in repr(config) and SECRET not in repr(config.mqtt)


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("mqtt.port=0", "mqtt.port"),
        ("mqtt.port=65536", "mqtt.port"),
        ("mqtt.port=-1", "mqtt.port"),
        ("prometheus.port=65536", "prometheus.port"),
        ("prometheus.port=-5", "prometheus.port"),
    ],
)
def test_ports_are_1_to_65535(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, [override])
    assert raised.value.key == key and "TCP port 1..65535" in raised.value.problem


def test_port_ends_are_accepted_and_metrics_may_take_any_free_port() -> None:
    assert load_config(None, ["mqtt.port=1"]).mqtt.port == 1
    assert load_config(None, ["mqtt.port=65535"]).mqtt.port == 65535
    assert load_config(None, ["prometheus.port=0"]).prometheus.port == 0  # listen: any free port


@pytest.mark.parametrize(
    "source",
    [
        "wyoming://127.0.0.1:0",
        "wyoming://127.0.0.1:65536",
        "wyoming-listen://127.0.0.1:99999",
        "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:0",
        "wyoming-proxy://127.0.0.1:10700?upstream=tcp://127.0.0.1:70000",
        "wyoming-proxy://127.0.0.1:65536?upstream=tcp://127.0.0.1:10600",
    ],
)
def test_wyoming_ports_to_connect_to_are_1_to_65535(source: str) -> None:
    with pytest.raises(ConfigError, match=r"daemon\.source") as raised:
        load_config(None, [f"daemon.source={source}"])
    assert "PORT 1..65535" in str(raised.value)


def test_wyoming_ports_to_listen_on_may_be_0_any_free_port() -> None:
    for source in (
        "wyoming://127.0.0.1:65535",
        "wyoming-listen://127.0.0.1:0",
        "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:1",
    ):
        assert load_config(None, [f"daemon.source={source}"]).daemon.source == source
