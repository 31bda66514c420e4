"""A start refused for something the user can fix, shown in Home Assistant instead of a restart
loop.

When ``voxmeter run`` cannot start measuring (a database enrolled with another embedding
backend, a file that is not a database, a bad option) and Home Assistant discovery is on,
:func:`held` keeps the process alive without measuring: it logs the one line once, publishes
the device's *Online* and *Problem* entities (monitor.exporters.discovery) and the retained
status ``{"state": "online", ..., "problem": line}``, and waits for SIGTERM or SIGINT; the
status then says offline, still with the line, and the command exits 2 as it would have at
once. Whatever the supervisor (the add-on's loop, systemd, a container's restart policy), there
is no restart loop: nothing exits until the user has fixed the cause and restarted it; the
household reads the fix as the Problem entity's *What to do*. The line lives in the status
alone, so the next clean start clears it by publishing its own status, and nothing else has to.
Without discovery, or when the broker cannot be reached, the start fails at once as before
(nothing to show it on).
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
from monitor.exporters.connection import client_options, publish, tls_context
from monitor.exporters.discovery import Discovery
from monitor.exporters.mqtt import iso_utc, topics_for
from monitor.settings.sections import Config

logger = logging.getLogger("monitor.daemon.pipeline")

SHOWN = ("online", "problem")
"""The device entities a refused start publishes: whether it runs, and what to do."""


def shows_problems(config: Config) -> bool:
    """Whether a refused start is held and shown (Home Assistant discovery over MQTT)."""
    return bool(config.mqtt.enabled and config.homeassistant.discovery)


def problem_messages(
    config: Config, line: str, started_unix: float
) -> tuple[list[tuple[str, bytes]], bytes]:
    """The retained (topic, payload) pairs that show ``line``: the configs of :data:`SHOWN`
    (the daemon may never have started, so they may be missing), then the status holding the
    line; and the offline status (the last will, and what a stop publishes) that keeps it."""
    device_id = config.daemon.device_id or socket.gethostname()
    topics = topics_for(config.mqtt, device_id)
    discovery = Discovery(config.homeassistant, topics, device_id)
    messages = [
        (discovery.config_topic(e.component, e.object_id), json.dumps(e.config).encode())
        for e in discovery.device_entities()
        if e.object_id in SHOWN
    ]
    status = {"state": "online", "version": __version__, "started": iso_utc(started_unix)}
    messages.append((topics.status, json.dumps({**status, "problem": line}).encode()))
    offline = json.dumps({**status, "state": "offline", "problem": line}).encode()
    return messages, offline


async def hold_problem(config: Config, line: str, started_unix: float) -> None:
    """Show ``line`` in Home Assistant and wait for a stop signal (module docstring)."""
    messages, offline = problem_messages(config, line, started_unix)
    status_topic = messages[-1][0]
    qos = max(1, config.mqtt.qos)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    device_id = config.daemon.device_id or socket.gethostname()
    client = aiomqtt.Client(
        **client_options(config.mqtt, tls_context(config.mqtt)),
        identifier=f"{config.mqtt.client_id or f'voxmeter-{device_id}'}-problem",
        will=aiomqtt.Will(status_topic, offline, 1, True),
    )
    async with client:
        for topic, payload in messages:
            await publish(client, topic, payload, qos=qos, retain=True)
        await stop.wait()
        await publish(client, status_topic, offline, qos=qos, retain=True)


def held(config: Config, error: VoxmeterError, started_unix: float) -> bool:
    """Hold ``error`` until a stop signal when it can be shown; False when it cannot (no
    discovery, no broker): the caller then fails at once."""
    if not shows_problems(config):
        return False
    logger.error("%s (shown in Home Assistant; fix it, then restart)", error)
    try:
        asyncio.run(hold_problem(config, str(error), started_unix))
    except (aiomqtt.MqttError, OSError) as lost:
        logger.warning("could not show the problem in Home Assistant: %s", lost)
        return False
    return True
