"""Exporters: Prometheus metrics, MQTT alerts and Home Assistant discovery.

:func:`build_exporters` builds the enabled ones from the config and wires them together
(``voxmeter_mqtt_connected`` is a Prometheus instrument fed by the MQTT connection). Every MQTT
exporter publishes on one connection (:class:`~monitor.exporters.connection.MqttConnection`),
made and run by the MQTT exporter and handed to the others as their ``connection``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry

from monitor.events.messages import Exporter
from monitor.exporters.homeassistant import HomeAssistantExporter, Profiles
from monitor.exporters.mqtt import MqttExporter, Outbox, Topics, topic_level, topics_for
from monitor.exporters.prometheus import Metrics, PrometheusExporter
from monitor.settings.sections import Config
from monitor.sources.spec import parse_source

__all__ = [
    "HomeAssistantExporter",
    "Metrics",
    "MqttExporter",
    "PrometheusExporter",
    "Topics",
    "build_exporters",
    "topic_level",
    "topics_for",
]


class ExporterStore(Outbox, Profiles, Protocol):
    """What the exporters read from the store: the alert outbox and the household."""


def build_exporters(
    config: Config,
    *,
    store: ExporterStore,
    db_path: Path,
    device_id: str,
    registry: CollectorRegistry | None = None,
) -> list[Exporter]:
    """The exporters ``config`` enables, Prometheus first; the MQTT ones share one connection,
    which reports its state to Prometheus."""
    exporters: list[Exporter] = []
    prometheus: PrometheusExporter | None = None
    if config.prometheus.enabled:
        prometheus = PrometheusExporter(config.prometheus, db_path=db_path, registry=registry)
        prometheus.set_mqtt_enabled(config.mqtt.enabled)
        exporters.append(prometheus)
    if not config.mqtt.enabled:
        return exporters
    mqtt = MqttExporter(
        config.mqtt,
        store=store,
        device_id=device_id,
        on_connection=prometheus.set_mqtt_connected if prometheus else None,
        clear_expired=not config.homeassistant.discovery,
        zone=config.budget.zone,
    )
    exporters.append(mqtt)
    if config.homeassistant.discovery:
        exporters.append(
            HomeAssistantExporter(
                config.homeassistant,
                config.mqtt,
                store=store,
                device_id=device_id,
                connection=mqtt.connection,
                show_seconds=config.tracker.show_seconds,
                show_windows=config.tracker.show_windows,
                sources=named_sources(config),
            )
        )
    return exporters


def named_sources(config: Config) -> dict[str, str]:
    """The sources a user named (``kitchen=wyoming-proxy://…``: rooms), name → source kind."""
    specs = config.audio.sources or (config.daemon.source,)
    named: dict[str, str] = {}
    for spec in specs:
        head, equals, _ = spec.partition("=")
        if equals and not any(c in head for c in ":/"):
            source = parse_source(spec)
            named[source.name] = source.kind
    return named
