"""A start that a user must fix, told to Home Assistant: the measuring process refuses to start
(a database enrolled with another embedding backend, a bad option) with one line in the log and
exit 2; before exiting it publishes that line where a household looks, the device's *Problem*
entity (monitor.exporters.discovery), so a household without a shell sees the fix too.

The line goes into the retained status (``{"state": "offline", "problem": line}``): the next
clean start publishes its own status without ``problem``, which turns the entity off again, so
nothing else has to clear it. One short connection (aiomqtt, as the exporters); a broker that
cannot be reached within a few seconds costs nothing but a debug line, so the exit
stays prompt and the user's one line stays the only warning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiomqtt

from monitor import __version__
from monitor.errors import VoxmeterError
from monitor.exporters.connection import client_options, tls_context
from monitor.exporters.discovery import Discovery
from monitor.exporters.mqtt import iso_utc, topics_for
from monitor.settings.sections import Config

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5.0
"""Longest the exit waits for the broker."""


def problem_messages(config: Config, line: str) -> list[tuple[str, bytes]]:
    """(topic, retained payload) to publish: the device's Online and Problem configs (when
    discovery is on: the daemon may never have started), then the status holding ``line``."""
    topics = topics_for(config.mqtt, config.daemon.device_id)
    messages: list[tuple[str, bytes]] = []
    if config.homeassistant.discovery:
        discovery = Discovery(config.homeassistant, topics, config.daemon.device_id)
        for entity in discovery.device_entities():
            if entity.object_id in ("online", "problem"):
                topic = discovery.config_topic(entity.component, entity.object_id)
                messages.append((topic, json.dumps(entity.config, sort_keys=True).encode()))
    status = {
        "state": "offline",
        "version": __version__,
        "started": iso_utc(time.time()),
        "problem": line,
    }
    messages.append((topics.status, json.dumps(status).encode()))
    return messages


async def _publish(config: Config, messages: list[tuple[str, bytes]]) -> None:
    options = client_options(config.mqtt, tls_context(config.mqtt))
    identifier = f"{config.mqtt.client_id or f'voxmeter-{config.daemon.device_id}'}-problem"
    async with aiomqtt.Client(**options, identifier=identifier) as client:
        for topic, payload in messages:
            await client.publish(topic, payload, qos=1, retain=True)


def report_problem(config: Config, line: str) -> bool:
    """Publish ``line`` as the device's problem (with MQTT enabled); whether the broker took
    it. Never raises: the caller is already exiting with the user's error."""
    if not config.mqtt.enabled:
        return False
    try:
        messages = problem_messages(config, line)
        asyncio.run(asyncio.wait_for(_publish(config, messages), TIMEOUT_SECONDS))
    except (aiomqtt.MqttError, OSError, TimeoutError, ValueError, VoxmeterError) as error:
        logger.debug("could not show the problem in Home Assistant: %s", error)
        return False
    return True
