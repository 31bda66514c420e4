"""A start refused for something the user can fix, shown in Home Assistant instead of a restart
loop.

When ``voxmeter run`` cannot start measuring (a database enrolled with another embedding
backend, a database that is not one, a calibration that does not fit) and Home Assistant
discovery is on, :func:`hold_problem` keeps the process alive without measuring: it logs the
one line once, publishes the device's *Online* entity and a *Problem* sensor whose state is
that line (``<prefix>/problem``), and waits for SIGTERM or SIGINT; the command then exits 2 as
it would have at once. A supervisor that restarts a service that exits (the add-on's) thus
restarts nothing until the user has fixed the cause and restarted it; the household reads the
fix on the device page. Without discovery, or when the broker cannot be reached, the start
fails at once as before (nothing to show it on).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import socket

import aiomqtt

from monitor import __version__
from monitor.errors import VoxmeterError
from monitor.exporters.connection import client_options, tls_context
from monitor.exporters.discovery import Discovery
from monitor.exporters.mqtt import iso_utc, publish, topics_for
from monitor.settings.sections import Config

logger = logging.getLogger("monitor.daemon.pipeline")

PROBLEM_LEVEL = "problem"


def shows_problems(config: Config) -> bool:
    """Whether a refused start is held and shown (Home Assistant discovery over MQTT)."""
    return bool(config.mqtt.enabled and config.homeassistant.discovery)


async def hold_problem(config: Config, error: VoxmeterError, started_unix: float) -> None:
    """Show ``error`` in Home Assistant and wait for a stop signal (module docstring)."""
    device_id = config.daemon.device_id or socket.gethostname()
    topics = topics_for(config.mqtt, device_id)
    discovery = Discovery(config.homeassistant, topics, device_id)
    problem_topic = topics.at("problem")
    online = discovery.device_entities()[0]
    sensor = {
        **discovery._common("problem", "Problem"),
        "state_topic": problem_topic,
        "value_template": "{{ value_json.problem }}",
        "icon": "mdi:alert-circle",
    }
    status = {"state": "online", "version": __version__, "started": iso_utc(started_unix)}
    qos = max(1, config.mqtt.qos)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    will = aiomqtt.Will(topics.status, json.dumps({**status, "state": "offline"}).encode(), 1, True)
    client = aiomqtt.Client(
        **client_options(config.mqtt, tls_context(config.mqtt)),
        identifier=f"{config.mqtt.client_id or f'voxmeter-{device_id}'}-problem",
        will=will,
    )
    async with client:
        messages = (
            (discovery.config_topic(online.component, online.object_id), online.config),
            (discovery.config_topic("sensor", "problem"), sensor),
            (problem_topic, {"problem": str(error)}),
            (topics.status, status),
        )
        for topic, payload in messages:
            await publish(client, topic, json.dumps(payload).encode(), qos=qos, retain=True)
        await stop.wait()
        await publish(client, topics.status, will.payload, qos=qos, retain=True)  # type: ignore[arg-type]


def held(config: Config, error: VoxmeterError, started_unix: float) -> bool:
    """Hold ``error`` until a stop signal when it can be shown; False when it cannot (no
    discovery, no broker): the caller then fails at once."""
    if not shows_problems(config):
        return False
    logger.error("%s (shown in Home Assistant; fix it, then restart)", error)
    try:
        asyncio.run(hold_problem(config, error, started_unix))
    except (aiomqtt.MqttError, OSError) as lost:
        logger.warning("could not show the problem in Home Assistant: %s", lost)
        return False
    return True
