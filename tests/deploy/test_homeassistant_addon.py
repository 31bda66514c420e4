"""deploy/homeassistant-addon: the add-on's config.yaml carries what the Supervisor requires (a
config it cannot validate makes the add-on vanish from the store without an error in the UI),
and run.sh's mapping of the options gives a config.toml the daemon itself accepts.

The rules are those of the Supervisor's add-on schema (home-assistant/supervisor 2026.08,
supervisor/apps/validate.py, options.py and supervisor/validate.py): required name, version,
slug, description, arch (amd64 and aarch64; the others deprecated); option types it understands;
``services`` as ``mqtt|mysql:provide|want|need``; ports as ``NUMBER/tcp|udp`` mapped to a host
port or null; ``map`` entries as ``{type, read_only, path}``. tests/deploy/test_addon_repository.py
checks the repository around it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.relay.process import load_relay_config
from monitor.settings.config import load_config
from monitor.settings.tracker import TRACKER_THRESHOLDS
from tests.deploy.promql import DEPLOY

ADDON = DEPLOY / "homeassistant-addon" / "voxmeter"
ARCHES = {"amd64", "aarch64"}  # ARCH_ALL (armhf, armv7, i386: ARCH_DEPRECATED, warned about)
SLUG = re.compile(r"[-_.A-Za-z0-9]+")
SERVICE = re.compile(r"(mqtt|mysql):(provide|want|need)")
PORT = re.compile(r"\d+(/(tcp|udp))?")
MAPPING_TYPES = {
    "data",
    "config",
    "ssl",
    "local_apps",
    "backup",
    "share",
    "media",
    "homeassistant_config",
    "all_app_configs",
    "app_config",
}  # fmt: skip  (apps/const.py MappingType, less the legacy addon* names)
BOUNDS = r"(\((-?[\d.]+)?,(-?[\d.]+)?\))?"
ELEMENT = re.compile(
    rf"(bool|email|url|port|str{BOUNDS}|password{BOUNDS}|int{BOUNDS}|float{BOUNDS}"
    r"|match\((?P<match>.*)\)|list\((?P<list>.+)\)|device(\(subsystem=[a-z]+\))?)\??"
)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded = yaml.safe_load((ADDON / "config.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def accepts(element: str, value: Any) -> bool:
    """Whether the Supervisor would take ``value`` for an option of type ``element``."""
    found = ELEMENT.fullmatch(element)
    assert found, element
    kind = re.match(r"[a-z]+", element)
    assert kind is not None
    name = kind.group()
    if name == "bool":
        return isinstance(value, bool)
    if name in ("int", "port"):
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "match":
        return isinstance(value, str) and re.fullmatch(found.group("match"), value) is not None
    if name == "list":
        return value in found.group("list").split("|")
    return isinstance(value, str)


def test_config_yaml_has_what_the_supervisor_requires(config: dict[str, Any]) -> None:
    for key in ("name", "version", "slug", "description"):
        assert isinstance(config.get(key), str) and config[key], key
    assert SLUG.fullmatch(config["slug"])
    assert isinstance(config["arch"], list) and set(config["arch"]) <= ARCHES and config["arch"]
    assert config["discovery"] == ["wyoming"]  # Home Assistant's Wyoming integration is offered it
    assert all(SERVICE.fullmatch(s) for s in config["services"])
    assert any(s.startswith("mqtt:") for s in config["services"])
    assert all(PORT.fullmatch(p) for p in config["ports"])
    # nothing published on the host unless the user sets a port (HA uses the internal network)
    assert all(v is None for v in config["ports"].values())
    assert set(config["ports_description"]) == set(config["ports"])
    assert "image" not in config  # built on the user's machine (test_addon_repository.py)
    for mapping in config["map"]:
        assert set(mapping) <= {"type", "read_only", "path"} and mapping["type"] in MAPPING_TYPES
        assert isinstance(mapping.get("read_only", True), bool)
    options, schema = config["options"], config["schema"]
    assert isinstance(options, dict) and isinstance(schema, dict)
    for key, element in schema.items():
        assert isinstance(element, str) and ELEMENT.fullmatch(element), (key, element)
        if not element.endswith("?"):
            assert key in options, f"required option {key} has no default"
        if key in options:
            assert accepts(element, options[key]), (key, element, options[key])
    assert set(options) <= set(schema)
    assert str(config["version"]) == _project_version()


def map_options(tmp_path: Path, options: dict[str, Any], *args: str) -> Any:
    """options_to_config.py as run.sh runs it, then the daemon's own loading of its output."""
    (tmp_path / "options.json").write_text(json.dumps(options))
    result = subprocess.run(
        [sys.executable, str(ADDON / "options_to_config.py"), "options.json", "config.toml", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return load_config(tmp_path / "config.toml", [])


def test_the_addon_options_reach_the_daemon(config: dict[str, Any], tmp_path: Path) -> None:
    """The embedding backend a database was enrolled with, the budget's time zone, this add-on's
    page as the Visit link, and metrics only on a port the user published."""
    options = {**config["options"], "embedding": "ecapa-int8", "timezone": "Europe/Paris"}
    loaded = map_options(
        tmp_path, options, "--addon-slug", "5c53de3b_voxmeter", "--metrics-host-port", "39217"
    )
    assert loaded.features.embedding == "ecapa-int8"
    assert loaded.budget.timezone == "Europe/Paris"
    assert loaded.homeassistant.configuration_url == (
        "homeassistant://hassio/addon/5c53de3b_voxmeter"
    )
    assert (loaded.prometheus.enabled, loaded.prometheus.host) == (True, "0.0.0.0")
    for unpublished in ("", "null"):
        loaded = map_options(tmp_path, config["options"], "--metrics-host-port", unpublished)
        assert not loaded.prometheus.enabled
    assert f"embedding: list({'|'.join(sorted(TRACKER_THRESHOLDS))})" == (
        "embedding: list(" + "|".join(sorted(config["schema"]["embedding"][5:-1].split("|"))) + ")"
    )  # every backend the daemon knows, and no other


def test_run_script_is_valid_shell() -> None:
    result = subprocess.run(["bash", "-n", str(ADDON / "run.sh")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("with_broker", [True, False])
def test_options_become_a_config_the_daemon_accepts(
    config: dict[str, Any], tmp_path: Path, with_broker: bool
) -> None:
    options = {**config["options"], "budget_bits": 3.5, "device_id": "kitchen"}
    options["protection"] = "exceeded"
    (tmp_path / "options.json").write_text(json.dumps(options))
    broker = ["--mqtt-host", "core-mosquitto", "--mqtt-port", "1883"]
    broker += ["--mqtt-username", "addons", "--mqtt-password", 'p"w\\1']
    result = subprocess.run(
        [
            sys.executable,
            str(ADDON / "options_to_config.py"),
            str(tmp_path / "options.json"),
            str(tmp_path / "config.toml"),
            *(broker if with_broker else []),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    loaded = load_config(tmp_path / "config.toml", [])
    assert loaded.daemon.source == (
        f"wyoming-proxy://0.0.0.0:10555?upstream={config['options']['upstream']}"
    )
    assert (loaded.daemon.device_id, loaded.budget.bits) == ("kitchen", 3.5)
    assert loaded.protect.mode == "exceeded"
    # two processes (run.sh): the relay reads the same file and relays that proxy
    assert loaded.relay.socket == "/run/voxmeter/relay.sock"
    relay = load_relay_config(tmp_path / "config.toml")
    assert [str(p) for p in relay.proxies] == [loaded.daemon.source]
    assert loaded.budget.period_seconds == config["options"]["period_hours"] * 3600
    assert loaded.mqtt.enabled is with_broker
    assert loaded.homeassistant.discovery is with_broker
    if with_broker:
        assert (loaded.mqtt.host, loaded.mqtt.username, loaded.mqtt.password) == (
            "core-mosquitto",
            "addons",
            'p"w\\1',
        )
        # the Mosquitto add-on without TLS, on the Supervisor's internal network: accepted
        # without the plain-text warning (the user configured no broker)
        assert (loaded.mqtt.tls, loaded.mqtt.internal_network) == (False, True)
        assert not loaded.mqtt.allow_plaintext_password
    # the defaults: the embedding option, HA's zone (TZ), no metrics, the documentation link
    assert loaded.features.embedding == config["options"]["embedding"] == "campplus-int8"
    assert (loaded.budget.timezone, loaded.prometheus.enabled) == ("", False)
    assert loaded.homeassistant.configuration_url == ""
    assert (tmp_path / "config.toml").stat().st_mode & 0o077 == 0  # it holds a password


#: The add-on config keys the Supervisor reads (supervisor/addons/validate.py); it drops any
#: other key without a word, so a misspelt key would silently do nothing.
SUPERVISOR_KEYS = {
    "name", "version", "slug", "description", "arch", "machine", "url", "startup", "boot",
    "init", "advanced", "stage", "ports", "ports_description", "watchdog", "webui", "ingress",
    "ingress_port", "ingress_entry", "ingress_stream", "panel_icon", "panel_title",
    "panel_admin", "homeassistant", "host_network", "host_pid", "host_ipc", "host_uts",
    "host_dbus", "devices", "udev", "tmpfs", "map", "environment", "privileged", "apparmor",
    "full_access", "audio", "video", "gpio", "usb", "uart", "devicetree", "kernel_modules",
    "realtime", "hassio_api", "hassio_role", "homeassistant_api", "stdin", "legacy",
    "docker_api", "auth_api", "services", "discovery", "backup_exclude", "backup_pre",
    "backup_post", "restore_pre", "restore_post", "backup", "options", "schema", "image",
    "ulimits", "timeout", "journald", "breaking_versions",
}  # fmt: skip
CHOICES = {
    "startup": {"initialize", "system", "services", "application", "once"},
    "boot": {"auto", "manual", "manual_only"},
    "stage": {"stable", "experimental", "deprecated"},
    "backup": {"hot", "cold"},
}
BOOLEANS = {"init", "advanced", "ingress", "host_network", "udev", "tmpfs", "apparmor", "stdin"}


def test_config_yaml_keys_and_values_are_the_supervisors(config: dict[str, Any]) -> None:
    assert set(config) <= SUPERVISOR_KEYS, set(config) - SUPERVISOR_KEYS
    for key, allowed in CHOICES.items():
        assert config.get(key, next(iter(allowed))) in allowed, key
    for key in BOOLEANS & set(config):
        assert isinstance(config[key], bool), key
    assert isinstance(config["version"], str)  # a version tag, quoted so YAML keeps it text
    assert re.fullmatch(r"https?://[^\s/]+(/\S*)?", config["url"])
    assert 10 <= config.get("timeout", 10) <= 300
    assert all(isinstance(d, str) for d in config["discovery"])


def test_translations_name_every_option_and_port(config: dict[str, Any]) -> None:
    """translations/en.yaml in the Supervisor's shape: configuration → option → name (required)
    and description; network → port → text."""
    english = yaml.safe_load((ADDON / "translations" / "en.yaml").read_text())
    assert set(english) <= {"configuration", "network"}
    options = english["configuration"]
    assert set(options) == set(config["schema"])
    for key, text in options.items():
        assert isinstance(text["name"], str) and text["name"], key
        assert isinstance(text.get("description"), str | None), key
        assert set(text) <= {"name", "description"}, key
    assert set(english["network"]) == set(config["ports"])


def test_the_addon_presents_itself(config: dict[str, Any]) -> None:
    """The store card, the documentation tab (every option in it), the changelog with this
    version, and the images at the sizes Home Assistant shows them."""
    for name in ("README.md", "DOCS.md", "CHANGELOG.md"):
        assert (ADDON / name).read_text().startswith("# "), name
    docs = (ADDON / "DOCS.md").read_text()
    for option in config["schema"]:
        assert f"| `{option}` |" in docs, option
    assert f"## {config['version']}" in (ADDON / "CHANGELOG.md").read_text()
    for name, size in (("icon.png", (128, 128)), ("logo.png", (250, 100))):
        head = (ADDON / name).read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n", name
        assert (int.from_bytes(head[16:20]), int.from_bytes(head[20:24])) == size, name


def test_the_images_are_drawn_by_the_script(tmp_path: Path) -> None:
    sys.path.insert(0, str(DEPLOY.parent / "scripts"))
    from draw_addon_images import draw

    for path in draw(tmp_path):
        assert path.read_bytes() == (ADDON / path.name).read_bytes(), path.name


def _project_version() -> str:
    """``monitor.__version__``, which pyproject.toml reads too (one source of the version)."""
    text = (DEPLOY.parent / "monitor" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    assert found
    return found.group(1)
