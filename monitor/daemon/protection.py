"""``[protect]`` in the daemon: the relay's chunk transform and what its policy learns.

:func:`protection_for` builds the :class:`~monitor.protect.policy.ProtectionPolicy` of the
config, hands the relay its per-connection transform (:mod:`monitor.protect.relay`) and
returns :class:`ProtectionObserver`, an exporter that tells the policy who was scored last and
whose budget is exceeded (restored states at start, transitions, period resets). The measuring
side keeps seeing the audio as it came.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence

from monitor.daemon.events import (
    DaemonEvent,
    DaemonStarted,
    Exporter,
    StateChanged,
    TrackRestored,
    WindowScored,
)
from monitor.daemon.exporters.homeassistant import HomeAssistantExporter
from monitor.daemon.exporters.protection import ProtectionMqtt, protection_entities
from monitor.daemon.settings import Config
from monitor.errors import ConfigError
from monitor.protect.mcadams import parse_alpha
from monitor.protect.policy import ProtectionPolicy
from monitor.protect.relay import transform_factory

logger = logging.getLogger(__name__)


class ProtectionObserver:
    """An exporter that feeds the protection policy from the daemon's events."""

    name = "protect"

    def __init__(self, policy: ProtectionPolicy) -> None:
        self.policy = policy

    async def run(self) -> None:
        await asyncio.Event().wait()  # nothing of its own to do: handle() is all

    async def handle(self, event: DaemonEvent) -> None:
        policy = self.policy
        match event:
            case DaemonStarted(states=states):
                for track, state in states.items():
                    policy.budget(track, state)
            case TrackRestored(figures=figures):
                policy.budget(figures.track, figures.state)
            case WindowScored(figures=figures, stream=stream):
                policy.heard(figures.track, stream.source)
                policy.budget(figures.track, figures.state)
            case StateChanged(track=track, to_state=state):
                policy.budget(track, state)


def _log_change(protecting: bool, speaker: str | None) -> None:
    whom = f" ({speaker} over budget)" if speaker else ""
    logger.info("protection %s%s", "on: anonymising" if protecting else "off", whom)


def protection_for(
    config: Config, source: object, exporters: Sequence[Exporter], device_id: str
) -> list[Exporter]:
    """The exporters of ``[protect]`` (none when off): the observer that feeds the policy and,
    with Home Assistant discovery, the switch's; the relay of ``source`` hooked to the policy."""
    settings = config.protect
    if settings.mode == "off":
        return []
    named = getattr(source, "named", None) or {"": source}  # a SourceSet, or the one source
    relaying = {n: s for n, s in named.items() if hasattr(s, "upstream_transform")}
    if not relaying:
        raise ConfigError("protect.mode", "needs a source that relays (wyoming-proxy://...)")
    if any(getattr(s, "channel", None) is not None for s in relaying.values()):
        raise ConfigError(
            "protect.mode",
            "not yet with relay.socket (the relay process): run the proxy in this process",
        )
    policy = ProtectionPolicy(settings.mode, parse_alpha(settings.alpha), random.Random())
    for name, relay in relaying.items():  # the others (a microphone) have no upstream to protect
        relay.upstream_transform = transform_factory(policy, name)
    added: list[Exporter] = [ProtectionObserver(policy)]
    ha = [e for e in exporters if isinstance(e, HomeAssistantExporter)]
    switch = ProtectionMqtt(policy, config.mqtt, device_id=device_id) if ha else None
    for exporter in ha:
        exporter.extra_entities = protection_entities
    if switch is not None:
        added.append(switch)

    def changed(protecting: bool, speaker: str | None) -> None:
        _log_change(protecting, speaker)
        if switch is not None:
            switch.changed(protecting, speaker)

    policy.on_change = changed
    return added
