"""config.toml and --set overrides: every key documented, every mistake named."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from monitor.errors import ConfigError, InputError
from monitor.settings.config import documented_defaults, load_config
from monitor.settings.sections import Config

REPO = Path(__file__).resolve().parents[2]


def test_config_toml_documents_every_key_with_its_default() -> None:
    document = tomllib.loads((REPO / "config.toml").read_text())
    expected = documented_defaults()
    assert set(document) == set(expected)
    for section, keys in expected.items():
        assert set(document[section]) == set(keys), section
        for key, (default, _doc) in keys.items():
            value = document[section][key]
            assert (tuple(value) if isinstance(value, list) else value) == default, key
    assert load_config(REPO / "config.toml") == Config()


def test_every_key_has_a_comment_in_config_toml() -> None:
    lines = (REPO / "config.toml").read_text().splitlines()
    settings = [line for line in lines if "=" in line and not line.startswith(("#", "["))]
    assert settings
    assert all("  # " in line for line in settings)


def test_overrides_parse_toml_values_and_bare_strings() -> None:
    config = load_config(
        None,
        [
            "budget.bits=7",
            "daemon.source=file:/tmp/x.flac",
            'audio.pace="fast"',
            'features.enabled=["f0", "embedding"]',
            "mqtt.enabled=true",
        ],
    )
    assert config.budget.bits == 7.0 and isinstance(config.budget.bits, float)
    assert config.daemon.source == "file:/tmp/x.flac"
    assert config.audio.pace == "fast"
    assert config.features.enabled == ("f0", "embedding")
    assert config.mqtt.enabled is True


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[budget]\nbits = 3\nwarn_fraction = 0.5\n[daemon]\nsource = "stdin"\n')
    config = load_config(path, ["budget.bits=4.5"])
    assert (config.budget.bits, config.budget.warn_fraction) == (4.5, 0.5)
    assert config.daemon.source == "stdin"


@pytest.mark.parametrize(
    ("override", "key", "problem"),
    [
        ("budget.bitz=1", "budget.bitz", "unknown key"),
        ("nosuch.key=1", "nosuch.key", "unknown section"),
        ("budget.bits=abc", "budget.bits", "must be a number"),
        ("prometheus.port=true", "prometheus.port", "must be an integer"),
        ("mqtt.enabled=1", "mqtt.enabled", "must be a boolean"),
        ("prometheus.port=70000", "prometheus.port", "TCP port"),
        ("budget.warn_fraction=1.5", "budget.warn_fraction", "between 0 and 1"),
        ("budget.bits=-1", "budget.bits", "> 0"),
        ("audio.pace=slow", "audio.pace", "realtime, fast"),
        ("daemon.source=tape", "daemon.source", "mic, mic:DEVICE"),
        ('features.enabled=["f0"]', "features.enabled", "embedding"),
        ("budget.measure=combined.xyz", "budget.measure", "FEATURE.MEASURE"),
        ("budget.hysteresis_bits=10", "budget.hysteresis_bits", "below the warning"),
        ("budget", "budget", "section.key=value"),
        ("audio.window_seconds=1e9", "audio.window_seconds", "between 0.5 and 60"),
        ("audio.window_seconds=0.1", "audio.window_seconds", "between 0.5 and 60"),
    ],
)
def test_bad_values_name_the_key(override: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, [override])
    assert caught.value.key == key
    assert problem in str(caught.value)
    assert "\n" not in str(caught.value)


def test_bad_file_names_the_key_or_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[tracker]\nprofile_threshold = 2.0\n")
    with pytest.raises(ConfigError, match=r"tracker\.profile_threshold"):
        load_config(path)
    path.write_text("[budget\n")
    with pytest.raises(InputError, match=re.escape(str(path))):
        load_config(path)
    with pytest.raises(InputError, match=r"missing\.toml"):
        load_config(tmp_path / "missing.toml")


def test_voxmeter_run_rejects_a_bad_key_with_one_line_and_exit_2(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from monitor.cli import app

    result = CliRunner().invoke(
        app, ["run", "--db", str(tmp_path / "v.db"), "--set", "tracker.idle=5"]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == ["voxmeter: error: config key 'tracker.idle': unknown key"]
    result = CliRunner().invoke(app, ["run", "--set", "budget.bits=-2"])
    assert result.exit_code == 2 and "budget.bits" in result.output


@pytest.mark.parametrize("command", ["run", "status"])
def test_a_config_that_is_not_utf8_is_one_line(command: str, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(b'[daemon]\ndevice_id = "caf\xe9"\n')
    done = subprocess.run(
        [sys.executable, "-m", "monitor.cli", command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == f"voxmeter: error: {config}:2: not UTF-8 text (byte 0xe9)\n"


def test_tracker_thresholds_follow_the_embedding_backend_unless_set() -> None:
    from monitor.settings.config import tracker_settings
    from monitor.settings.tracker import TRACKER_THRESHOLDS

    for backend, (profile, cluster) in TRACKER_THRESHOLDS.items():
        settings = tracker_settings(load_config(None, [f"features.embedding={backend}"]))
        assert (settings.profile_threshold, settings.cluster_threshold) == (profile, cluster)
    chosen = tracker_settings(
        load_config(None, ["features.embedding=ge2e", "tracker.profile_threshold=0.8"])
    )
    assert (chosen.profile_threshold, chosen.cluster_threshold) == (0.8, 0.70)
    assert TRACKER_THRESHOLDS["ecapa"] < TRACKER_THRESHOLDS["ge2e"]  # ECAPA cosines run lower
    with pytest.raises(ConfigError, match=r"features\.embedding.*must be one of ecapa"):
        load_config(None, ["features.embedding=xvector"])
