"""MQTT over TLS against a real mosquitto with TLS listeners whose certificates the test makes
(tests/realparts/certificates.py): the broker's certificate is checked against mqtt.cafile and
its name against mqtt.host, a client certificate is presented; a wrong CA or a wrong name is one
clear log line and no connection. A password never crosses the network in clear text unasked."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monitor.errors import ConfigError
from monitor.exporters.connection import tls_context
from monitor.exporters.homeassistant import HomeAssistantExporter
from monitor.exporters.mqtt import MqttExporter
from monitor.settings.config import load_config
from monitor.settings.sections import HomeAssistantSettings, MqttSettings
from monitor.store.database import open_store
from tests.daemon.test_start_checks import voxmeter_run
from tests.exporters.exporter_events import changed
from tests.exporters.test_exporter_mqtt import (
    DEVICE,
    TOPICS,
    enqueue,
    run,
    running,
    subscribed,
    until,
)
from tests.realparts.certificates import Certificates
from tests.realparts.mosquitto import MosquittoBroker, free_port, wait_for_port

pytestmark = pytest.mark.mosquitto


class TlsBroker(MosquittoBroker):
    """A broker with its plain listener (for the test's subscriber) and two TLS listeners:
    ``tls_port`` (server certificate for 127.0.0.1 and localhost, client certificate required)
    and ``wrong_name_port`` (a certificate for broker.invalid only)."""

    tls_port: int
    wrong_name_port: int


@pytest.fixture
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory, tls_certificates: Certificates
) -> Iterator[TlsBroker]:
    c = tls_certificates
    broker = TlsBroker(tmp_path_factory.mktemp("mosquitto-tls"))
    broker.tls_port, broker.wrong_name_port = free_port(), free_port()
    broker.extra_config = (
        f"listener {broker.tls_port} 127.0.0.1\n"
        f"cafile {c.pem('ca')}\ncertfile {c.pem('server')}\nkeyfile {c.key('server')}\n"
        "require_certificate true\n"
        f"listener {broker.wrong_name_port} 127.0.0.1\n"
        f"certfile {c.pem('wrong-name')}\nkeyfile {c.key('wrong-name')}\n"
    )
    broker.start()
    try:
        wait_for_port(broker.tls_port)
        wait_for_port(broker.wrong_name_port)
        yield broker
    finally:
        broker.stop()


def tls_settings(c: Certificates, port: int, **overrides: Any) -> MqttSettings:
    values: dict[str, Any] = {
        "enabled": True,
        "host": "127.0.0.1",
        "port": port,
        "keepalive_seconds": 5,
        "reconnect_min_seconds": 0.2,
        "reconnect_max_seconds": 1.0,
        "tls": True,
        "cafile": c.pem("ca"),
        "certfile": c.pem("client"),
        "keyfile": c.key("client"),
    }
    values.update(overrides)
    return MqttSettings(**values)


def deliver_one_alert(broker: MosquittoBroker, settings: MqttSettings, db: Path) -> None:
    """An alert through ``settings``'s connection reaches the broker (read on its plain port)."""

    async def scenario() -> None:
        with open_store(db) as store:
            exporter = MqttExporter(settings, store=store, device_id=DEVICE)
            async with subscribed(broker) as seen, running(exporter):
                await until(lambda: exporter.connected)
                seq = enqueue(store, "alias-a", "ok", "warning", 4.2)
                await exporter.handle(changed("alias-a", "ok", "warning", seq=seq))
                await seen.wait(lambda: len(seen.on(TOPICS.alerts)) == 1)
                assert seen.on(TOPICS.alerts)[0]["seq"] == seq
                await until(lambda: store.pending_count() == 0)

    run(scenario)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_alerts_reach_a_tls_broker_with_a_client_certificate(
    tls_broker: TlsBroker, tls_certificates: Certificates, tmp_path: Path, host: str
) -> None:
    settings = tls_settings(tls_certificates, tls_broker.tls_port, host=host)
    deliver_one_alert(tls_broker, settings, tmp_path / "v.db")


def refusal(
    broker: MosquittoBroker, settings: MqttSettings, db: Path, caplog: pytest.LogCaptureFixture
) -> str:
    """The exporter cannot connect: its one log line; the alert waits in the outbox."""

    async def scenario() -> None:
        with open_store(db) as store:
            seq = enqueue(store, "alias-a", "ok", "warning", 4.2)
            exporter = MqttExporter(settings, store=store, device_id=DEVICE)
            async with running(exporter):
                await exporter.handle(changed("alias-a", "ok", "warning", seq=seq))
                await until(lambda: any("TLS" in r.getMessage() for r in caplog.records))
                assert not exporter.connected
            assert store.pending_count() == 1  # nothing lost: delivered once trusted

    with caplog.at_level(logging.INFO, logger="monitor.exporters.mqtt"):
        run(scenario)
    lines = [r for r in caplog.records if "TLS" in r.getMessage()]
    assert all(r.levelno == logging.WARNING for r in lines)
    message = lines[0].getMessage()
    assert "\n" not in message and "Traceback" not in caplog.text
    assert message.startswith(f"MQTT broker {settings.host}:{settings.port}: TLS: ")
    return message


def test_a_broker_certificate_from_another_ca_is_refused_in_one_line(
    tls_broker: TlsBroker,
    tls_certificates: Certificates,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = tls_certificates
    settings = tls_settings(c, tls_broker.tls_port, cafile=c.pem("other-ca"))
    message = refusal(tls_broker, settings, tmp_path / "v.db", caplog)
    # OpenSSL's reason (here "self-signed certificate in certificate chain") in parentheses
    assert "the broker's certificate is not accepted (" in message
    assert "mqtt.cafile" in message


def test_the_broker_host_name_is_verified_unless_turned_off(
    tls_broker: TlsBroker,
    tls_certificates: Certificates,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = tls_certificates
    settings = tls_settings(c, tls_broker.wrong_name_port)
    message = refusal(tls_broker, settings, tmp_path / "a.db", caplog)
    assert "mismatch, certificate is not valid for '127.0.0.1')" in message
    assert "mqtt.verify_hostname" in message
    # signed by the right CA: with the name check off, it is accepted
    unchecked = tls_settings(c, tls_broker.wrong_name_port, verify_hostname=False)
    deliver_one_alert(tls_broker, unchecked, tmp_path / "b.db")


def test_unusable_tls_files_are_one_config_error_naming_the_key(
    tls_certificates: Certificates, tmp_path: Path
) -> None:
    c = tls_certificates
    missing = str(tmp_path / "missing.pem")
    cases = [
        ({"cafile": missing}, "mqtt.cafile"),
        ({"cafile": c.key("ca")}, "mqtt.cafile"),  # a key, not certificates
        ({"certfile": c.pem("client"), "keyfile": c.key("server")}, "mqtt.keyfile"),  # not its key
        ({"certfile": missing, "keyfile": ""}, "mqtt.certfile"),
    ]
    for overrides, key in cases:
        settings = tls_settings(c, 8883, **overrides)
        with pytest.raises(ConfigError) as raised:
            tls_context(settings)
        assert raised.value.key == key, (overrides, str(raised.value))
        assert "\n" not in str(raised.value)
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):  # HA's client too
            HomeAssistantExporter(
                HomeAssistantSettings(discovery=True), settings, store=None, device_id=DEVICE
            )  # type: ignore[arg-type]


def test_a_clear_text_password_to_another_host_needs_an_opt_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote = ["mqtt.enabled=true", "mqtt.host=192.0.2.7", 'mqtt.password="hunter2-secret"']
    with pytest.raises(ConfigError) as raised:
        load_config(None, remote)
    assert raised.value.key == "mqtt.password" and "hunter2" not in str(raised.value)
    assert "clear text to 192.0.2.7" in str(raised.value) and "mqtt.tls" in str(raised.value)
    # the command: one line, exit 2, before anything else
    done = voxmeter_run("--db", str(tmp_path / "v.db"), *[a for s in remote for a in ("--set", s)])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "mqtt.password" in done.stderr
    assert "hunter2" not in done.stderr
    assert not (tmp_path / "v.db").exists()
    # loopback, TLS, or the explicit opt-in (one warning line) are accepted
    load_config(None, [*remote[:2], "mqtt.host=localhost", remote[2]])
    load_config(None, [*remote, "mqtt.tls=true"])
    opted = load_config(None, [*remote, "mqtt.allow_plaintext_password=true"])
    with open_store(tmp_path / "w.db") as store, caplog.at_level(logging.WARNING):
        MqttExporter(opted.mqtt, store=store, device_id=DEVICE)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "clear text" in warnings[0] and "192.0.2.7" in warnings[0]
    assert "hunter2" not in caplog.text
    # the add-on's broker, on the Supervisor's internal network: accepted, nothing to warn
    # about (the user configured no broker)
    caplog.clear()
    internal = load_config(None, [*remote, "mqtt.internal_network=true"])
    with open_store(tmp_path / "x.db") as store, caplog.at_level(logging.WARNING):
        MqttExporter(internal.mqtt, store=store, device_id=DEVICE)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_tls_files_need_tls() -> None:
    for key in ("cafile", "certfile", "keyfile"):
        with pytest.raises(ConfigError, match=rf"'mqtt\.{key}': needs mqtt\.tls = true"):
            load_config(None, [f"mqtt.{key}=/etc/x.pem"])
    with pytest.raises(ConfigError, match=r"'mqtt\.keyfile': needs mqtt\.certfile"):
        load_config(None, ["mqtt.tls=true", "mqtt.keyfile=/etc/x.key"])


def test_home_assistant_discovery_goes_over_the_same_tls(
    tls_broker: TlsBroker, tls_certificates: Certificates, tmp_path: Path
) -> None:
    from tests.exporters.exporter_events import started
    from tests.exporters.test_exporter_homeassistant import PREFIX, configs, household

    settings = tls_settings(tls_certificates, tls_broker.tls_port, host="localhost")

    async def scenario() -> None:
        with household(tmp_path / "v.db") as store:
            ha = HomeAssistantExporter(
                HomeAssistantSettings(discovery=True, discovery_prefix=PREFIX),
                settings,
                store=store,
                device_id=DEVICE,
            )
            async with subscribed(tls_broker, "#") as seen, running(ha):  # type: ignore[arg-type]
                await ha.handle(started())
                await seen.wait(lambda: len(configs(seen)) >= 3)  # the device's entities
                assert ha.connected

    run(scenario)


@pytest.mark.corpus
def test_voxmeter_run_with_an_unusable_ca_file_is_one_line(
    daemon_db: Path, daemon_corpus: Any, tmp_path: Path
) -> None:
    missing = tmp_path / "missing-ca.pem"
    done = voxmeter_run(
        "--db", str(daemon_db), "--source", f"file:{daemon_corpus.known_stream}", "--fast",
        "--set", "mqtt.enabled=true", "--set", "mqtt.tls=true",
        "--set", f"mqtt.cafile={missing}",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "mqtt.cafile" in done.stderr and str(missing) in done.stderr
