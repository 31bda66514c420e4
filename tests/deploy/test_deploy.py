"""deploy/: Prometheus config and rules (promtool), the Grafana dashboard, the compose file, the
systemd unit, the device config and the broker config, each checked by the real tool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from monitor.settings.config import load_config
from tests.deploy.promql import (
    DASHBOARD,
    DEPLOY,
    HOUSEHOLD_RULES,
    REPO,
    RULES,
    dashboard,
    dashboard_expressions,
    rule_expressions,
    without_threshold,
)
from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker

PROMETHEUS_DIR = DEPLOY / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_scrape_config_and_its_rule_files() -> None:
    result = promtool("check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout
    household = promtool("check", "config", str(PROMETHEUS_DIR / "prometheus-household.yml"))
    assert household.returncode == 0, household.stdout + household.stderr
    assert "2 rule files found" in household.stdout


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rule_expressions())} rules found" in result.stdout
    result = promtool("check", "rules", str(HOUSEHOLD_RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    expected = len(rule_expressions(HOUSEHOLD_RULES)) + len(
        rule_expressions(HOUSEHOLD_RULES, kind="record")
    )
    assert f"{expected} rules found" in result.stdout


def test_household_rules_leave_unknown_tracks_out_and_are_unit_tested() -> None:
    """Every household expression composes local aliases only (unknown-N are per device)."""
    records = rule_expressions(HOUSEHOLD_RULES, kind="record")
    assert len(records) >= 3 and all(name.startswith("household:") for name in records)
    for name, expr in records.items():
        assert 'speaker!~"unknown-.*"' in expr, name
    tested = (PROMETHEUS_DIR / "tests" / "household_test.yml").read_text()
    for name in [*records, *rule_expressions(HOUSEHOLD_RULES)]:
        assert name in tested, f"{name} has no promtool unit test"


def test_rule_unit_tests_pass() -> None:
    tests = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))
    assert tests, "no rule unit tests in deploy/prometheus/tests"
    result = promtool("test", "rules", *map(str, tests))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_for_severity_and_a_description() -> None:
    text = RULES.read_text()
    blocks = re.split(r"\n\s+- alert: ", text)[1:]
    assert len(blocks) == len(rule_expressions()) >= 6
    speaker_alerts = 0
    for block in blocks:
        name = block.split("\n", 1)[0]
        assert re.search(r"\n\s+for: \d+[smh]", block), f"{name}: no for"
        assert re.search(r"\n\s+severity: (critical|warning)", block), f"{name}: no severity"
        assert "description:" in block, f"{name}: no description"
        expr = block.split("annotations:")[0]
        if "voxmeter_budget_state" in expr or "voxmeter_disclosure_bits" in expr:  # per speaker
            speaker_alerts += 1
            assert "{{ $labels.speaker }}" in block, f"{name}: description must name the speaker"
    assert speaker_alerts >= 3


def test_dashboard_panels_ids_datasources_and_variables() -> None:
    board = dashboard()
    panels = board["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    provisioned = (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text()
    uids = set(re.findall(r"^\s+uid: (\S+)$", provisioned, re.MULTILINE))
    assert uids == {"voxmeter-prometheus"}
    variables = {v["name"] for v in board["templating"]["list"]}
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] in uids, panel["title"]
        assert panel["targets"], f"{panel['title']}: no query"
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids, panel["title"]
            used = set(re.findall(r"\$(\w+)", target["expr"]))
            assert used <= variables, f"{panel['title']}: undefined variable {used - variables}"
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] in uids
    # Every metric of DESIGN §15 the dashboard promises is on it.
    exprs = " ".join(dashboard_expressions().values())
    for metric in (
        "voxmeter_disclosure_bits",
        "voxmeter_budget_bits",
        "voxmeter_composition_bound_bits",
        "voxmeter_disclosure_ceiling_bits",
        "voxmeter_budget_state",
        "voxmeter_information_gain_bits",
        "voxmeter_realtime_factor",
        "voxmeter_window_latency_seconds_bucket",
        "voxmeter_frames_total",
        "voxmeter_queue_depth",
        "voxmeter_source_streams",  # per source (room)
        "voxmeter_source_audio_seconds_total",
        "voxmeter_source_unattributed_seconds_total",
        "voxmeter_received_speech_seconds_total",  # protection
        "voxmeter_received_window_disclosure_bits",
    ):
        assert metric in exprs, f"dashboard lacks {metric}"


def test_every_dashboard_expression_is_valid_promql(tmp_path: Path) -> None:
    """Grafana is not installable here: promtool parses each panel query as a recording rule."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel_{i}", "expr": expr}
                    for i, expr in enumerate(dashboard_expressions().values())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    for name, expr in rule_expressions().items():  # and every alert's operand on its own
        rules["groups"][0]["rules"] = [{"record": "alert:operand", "expr": without_threshold(expr)}]
        path.write_text(json.dumps(rules))
        result = promtool("check", "rules", str(path))
        assert result.returncode == 0, f"{name}: {result.stdout}{result.stderr}"


def test_compose_file_mounts_files_that_exist() -> None:
    compose_dir = DEPLOY / "container"
    text = (compose_dir / "compose.yaml").read_text()
    sources = re.findall(r"^\s+- (\.{1,2}/[^:\s]+):", text, re.MULTILINE)
    assert len(sources) >= 7
    for source in sources:
        assert (compose_dir / source).exists(), f"compose.yaml mounts missing {source}"
    context = re.search(r"context: (\S+)", text)
    dockerfile = re.search(r"dockerfile: (\S+)", text)
    assert context and dockerfile
    root = (compose_dir / context.group(1)).resolve()
    assert root == REPO
    assert (root / dockerfile.group(1)).is_file()
    for service in ("voxmeter", "mosquitto", "prometheus", "grafana"):
        assert re.search(rf"^  {service}:$", text, re.MULTILINE), service
    # The Dockerfile copies only what exists, and runs as the unprivileged user.
    docker = (root / dockerfile.group(1)).read_text()
    for source in re.findall(r"^COPY ((?:\S+ )+)\S+$", docker, re.MULTILINE):
        for item in source.split():
            assert (root / item).exists(), f"Dockerfile copies missing {item}"
    assert re.search(r"^USER voxmeter$", docker, re.MULTILINE)
    # Grafana's provider path is where compose mounts the dashboards.
    provider = (DEPLOY / "grafana/provisioning/dashboards/voxmeter.yml").read_text()
    assert "path: /var/lib/grafana/dashboards" in provider
    assert "../grafana/dashboards:/var/lib/grafana/dashboards" in text
    assert DASHBOARD.parent.name == "dashboards"


def test_device_config_is_accepted_by_the_daemon() -> None:
    config = load_config(DEPLOY / "config.toml")
    assert config.daemon.db == "/var/lib/voxmeter/voxmeter.db"
    assert config.mqtt.enabled and config.mqtt.port == 1883
    scrape = (PROMETHEUS_DIR / "prometheus.yml").read_text()
    assert f'"{config.prometheus.host}:{config.prometheus.port}"' in scrape


def test_systemd_unit_is_hardened_and_verifies(tmp_path: Path) -> None:
    unit = (DEPLOY / "systemd" / "voxmeter.service").read_text()
    for line in (
        "User=voxmeter",
        "SupplementaryGroups=audio",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=voxmeter",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "ExecStart=/opt/voxmeter/.venv/bin/voxmeter run --config /etc/voxmeter/config.toml",
    ):
        assert re.search(rf"^{re.escape(line)}$", unit, re.MULTILINE), line
    # A start limit, in [Unit] where systemd reads it: a crashing daemon is not restarted for ever.
    sections = dict(re.findall(r"^\[(\w+)\]\n(.*?)(?=^\[|\Z)", unit, re.MULTILINE | re.DOTALL))
    limits = dict(re.findall(r"^(StartLimit\w+)=(\d+)$", sections["Unit"], re.MULTILINE))
    assert 0 < int(limits["StartLimitBurst"]) <= 10 and int(limits["StartLimitIntervalSec"]) > 0
    restart = re.search(r"^RestartSec=(\d+)s$", unit, re.MULTILINE)
    assert restart is not None
    restart_seconds = int(restart.group(1))
    # the burst must fit in the interval, or the limit is never reached
    assert int(limits["StartLimitBurst"]) * restart_seconds < int(limits["StartLimitIntervalSec"])
    assert "StartLimit" not in sections["Service"]
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit was not verified")
    # verify insists that ExecStart exists: point it at this checkout's venv.
    local = tmp_path / "voxmeter.service"
    voxmeter = REPO / ".venv" / "bin" / "voxmeter"
    if not voxmeter.exists():  # no .venv in this checkout: the venv running these tests
        voxmeter = Path(sys.executable).with_name("voxmeter")
    if not voxmeter.exists():
        pytest.skip(f"{voxmeter} missing (make venv): the unit was not verified")
    local.write_text(unit.replace("/opt/voxmeter/.venv/bin/voxmeter", str(voxmeter)))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.mosquitto
def test_device_broker_config_starts_a_real_mosquitto(tmp_path: Path) -> None:
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed")
    broker = MosquittoBroker(tmp_path)
    text = (DEPLOY / "mosquitto" / "mosquitto.conf").read_text()
    text = text.replace("listener 1883 ", f"listener {broker.port} ")
    text = text.replace("/mosquitto/data/", f"{tmp_path}/")
    assert f"listener {broker.port} 127.0.0.1" in text
    config = tmp_path / "device.conf"
    config.write_text(text)
    process = subprocess.Popen(["mosquitto", "-c", str(config)], stdout=subprocess.DEVNULL)
    try:
        from tests.realparts.mosquitto import wait_for_port

        wait_for_port(broker.port)
    finally:
        stop_process(process)


@pytest.mark.prometheus
def test_a_real_prometheus_loads_the_rules_healthy(
    prometheus_server: Callable[..., object],
) -> None:
    server = prometheus_server(["127.0.0.1:9"], rule_files=[RULES, HOUSEHOLD_RULES])
    groups = server.api("rules")["groups"]  # type: ignore[attr-defined]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    expected = {
        **rule_expressions(),
        **rule_expressions(HOUSEHOLD_RULES),
        **rule_expressions(HOUSEHOLD_RULES, kind="record"),
    }
    assert set(loaded) == set(expected)
    for name, rule in loaded.items():
        assert rule["health"] in ("ok", "unknown"), (name, rule.get("lastError"))
        # Our small YAML reader in tests/deploy/promql.py agrees with Prometheus's parser.
        assert re.sub(r"\s+", "", rule["query"]) == re.sub(r"\s+", "", expected[name]), name


def test_backup_procedure_of_operations_md_copies_a_live_wal_database(tmp_path: Path) -> None:
    """docs/operations.md §6: `sqlite3 DB ".backup FILE"` while the daemon holds the database."""
    if shutil.which("sqlite3") is None:
        pytest.skip("sqlite3 is not installed")
    from monitor.store.database import open_store

    assert ".backup" in (REPO / "docs" / "operations.md").read_text()
    live = tmp_path / "voxmeter.db"
    backup = tmp_path / "backup.db"
    with open_store(live) as store:  # stays open, like the running daemon
        seqs = [
            store.transition("alias-a", "warning", 4.2, {"alias": "alias-a"}, "v/alerts"),
            store.transition("alias-a", "exceeded", 5.1, {"alias": "alias-a"}, "v/alerts"),
        ]
        store.ack(seqs[0])
        assert Path(f"{live}-wal").exists()  # the recent writes sit in the WAL
        result = subprocess.run(
            ["sqlite3", str(live), f".backup '{backup}'"], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
    check = subprocess.run(
        ["sqlite3", str(backup), "PRAGMA integrity_check"], capture_output=True, text=True
    )
    assert check.stdout.strip() == "ok"
    with open_store(backup, create=False) as restored:
        assert [m.seq for m in restored.pending()] == seqs[1:]
        assert restored.budget_state("alias-a").state == "exceeded"


def test_the_relay_unit_restarts_within_a_second_and_the_measuring_side_is_capped(
    tmp_path: Path,
) -> None:
    """Two units (docs/operations.md section 11): the relay is restarted within 1 s whatever
    ended it and is the last the OOM killer takes; the measuring process has a memory cap, is
    restarted after a kill, and reaches the relay's socket directory."""
    relay = (DEPLOY / "systemd" / "voxmeter-relay.service").read_text()
    for line in (
        "User=voxmeter",
        "Restart=always",
        "RestartPreventExitStatus=2",
        "RuntimeDirectory=voxmeter",
        "RuntimeDirectoryPreserve=yes",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ExecStart=/opt/voxmeter/.venv/bin/python -m monitor.relay.process "
        "--config /etc/voxmeter/config.toml",
    ):
        assert re.search(rf"^{re.escape(line)}$", relay, re.MULTILINE), line
    restart = re.search(r"^RestartSec=(\d+)ms$", relay, re.MULTILINE)
    assert restart is not None and int(restart.group(1)) <= 500
    oom = re.search(r"^OOMScoreAdjust=(-\d+)$", relay, re.MULTILINE)
    assert oom is not None and int(oom.group(1)) < 0
    measuring = (DEPLOY / "systemd" / "voxmeter.service").read_text()
    assert re.search(r"^MemoryMax=\d+[MG]$", measuring, re.MULTILINE)
    assert re.search(r"^ReadWritePaths=-/run/voxmeter$", measuring, re.MULTILINE)
    assert re.search(r"^After=.*voxmeter-relay\.service", measuring, re.MULTILINE)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit was not verified")
    local = tmp_path / "voxmeter-relay.service"
    local.write_text(relay.replace("/opt/voxmeter/.venv/bin/python", sys.executable))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
