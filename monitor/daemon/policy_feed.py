"""``[protect]`` in the daemon: the relay's chunk transform and what its policy learns.

:func:`protection_for` builds the :class:`~monitor.protect.policy.ProtectionPolicy` of the
config, hands the relay its per-connection transform (:mod:`monitor.protect.relay`) and
returns :class:`ProtectionObserver`, an exporter that tells the policy who was scored last and
whose budget is exceeded (restored states at start, transitions, period resets). The measuring
side keeps seeing the audio as it came.

With ``relay.socket`` the relay runs in ``voxmeter relay`` (:mod:`monitor.relay.process`), which
runs the same transform on what it sends upstream and decides each utterance itself, never
asking this process: :class:`RelayFeed` tells it, over the channel (each source's
:class:`~monitor.wyoming.channel.Uplink`), every relaying source's verdict whenever it changes —
only once the ledger's budget states are restored (``DaemonStarted``), so a restarting daemon
never tells it "nobody is over budget" before it knows. The relay keeps the last verdict it
heard while this process is gone (:mod:`monitor.protect.relay_process` says why).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Sequence
from typing import Any

from monitor.errors import ConfigError
from monitor.events.messages import (
    DaemonEvent,
    DaemonStarted,
    Exporter,
    StateChanged,
    TrackRestored,
    WindowScored,
)
from monitor.exporters.homeassistant import HomeAssistantExporter
from monitor.exporters.protection import ProtectionMqtt, protection_entities
from monitor.protect import METHODS
from monitor.protect.mcadams import parse_alpha
from monitor.protect.messages import PROTECT
from monitor.protect.policy import ProtectionPolicy
from monitor.protect.relay import transform_factory
from monitor.settings.sections import Config
from monitor.wyoming.channel import Uplink

logger = logging.getLogger(__name__)


class RelayFeed:
    """Each relaying source's verdict, told to the relay process over its channel."""

    def __init__(self, policy: ProtectionPolicy, alpha: str, uplinks: dict[str, Uplink]) -> None:
        self.policy = policy
        self.alpha = alpha  # as config.toml says it: the relay parses it as it parses its own
        self.uplinks = uplinks  # source name → its channel's uplink
        self.ready = False  # the budget states are restored: verdicts are worth telling

    def message(self, protect: bool, speaker: str | None) -> dict[str, Any]:
        """``{"kind": "protect", "protect", "speaker", "mode", "method", "alpha", "enabled"}``."""
        policy = self.policy
        return {
            "kind": PROTECT,
            "protect": protect,
            "speaker": speaker,
            "mode": policy.mode,
            "method": METHODS[0],
            "alpha": self.alpha,
            "enabled": policy.enabled,
        }

    def push(self) -> None:
        """The policy's ``on_update``: tell each source's relay a verdict that changed; the
        switch and the alert hear whether any source is protected now."""
        if not self.ready:
            return
        verdicts = {name: self.policy.verdict(name) for name in self.uplinks}
        for name, uplink in self.uplinks.items():
            message = self.message(*verdicts[name])
            if uplink.latest.get(PROTECT) != message:
                uplink.publish(message)
        protecting = [v for v in verdicts.values() if v[0]]
        self.policy.report(*(protecting[0] if protecting else (False, None)))


class ProtectionObserver:
    """An exporter that feeds the protection policy from the daemon's events."""

    name = "protect"

    def __init__(self, policy: ProtectionPolicy, feed: RelayFeed | None = None) -> None:
        self.policy = policy
        self.feed = feed

    async def run(self) -> None:
        await asyncio.Event().wait()  # nothing of its own to do: handle() is all

    async def handle(self, event: DaemonEvent) -> None:
        policy = self.policy
        match event:
            case DaemonStarted(states=states):
                for track, state in states.items():
                    policy.budget(track, state)
                if self.feed is not None:
                    self.feed.ready = True
                    self.feed.push()
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
    """The exporters of ``[protect]``: the observer that feeds the policy and, with Home
    Assistant discovery, the switch's; the relay of ``source`` hooked to the policy. With mode
    off, none — unless Home Assistant shows a relaying daemon: its switch and *Protecting* are
    there all the same, saying that the mode is off."""
    settings = config.protect
    named = getattr(source, "named", None) or {"": source}  # a SourceSet, or the one source
    relaying = {n: s for n, s in named.items() if hasattr(s, "upstream_transform")}
    uplinks = {
        name: relay.uplink
        for name, relay in relaying.items()
        if getattr(relay, "channel", None) is not None
    }  # relayed by voxmeter relay: it is told; the others are relayed here
    policy = ProtectionPolicy(settings.mode, parse_alpha(settings.alpha), random.Random())
    feed = RelayFeed(policy, settings.alpha, uplinks) if uplinks else None
    ha = [e for e in exporters if isinstance(e, HomeAssistantExporter)]
    if settings.mode == "off":
        if feed is not None:  # told at once: a relay configured otherwise passes all clear
            feed.ready = True
            feed.push()
        if not (relaying and ha):
            return []
    elif not relaying:
        raise ConfigError("protect.mode", "needs a source that relays (wyoming-proxy://...)")
    else:
        for name, relay in relaying.items():  # the others (a microphone) have no upstream
            if name not in uplinks:
                relay.upstream_transform = transform_factory(policy, name)
        if feed is not None:
            policy.on_update = feed.push
    added: list[Exporter] = [ProtectionObserver(policy, feed if settings.mode != "off" else None)]
    # Home Assistant shows the switch whenever the daemon relays, mode off included (it says so)
    switch = (
        ProtectionMqtt(policy, config.mqtt, device_id=device_id, connection=ha[0].connection)
        if ha
        else None
    )
    for exporter in ha:
        exporter.extra_entities.append(protection_entities)
    if switch is not None:
        switch.display_name = ha[0].display_name
        added.append(switch)

    def changed(protecting: bool, speaker: str | None) -> None:
        _log_change(protecting, speaker)
        if switch is not None:
            switch.changed(protecting, speaker)

    policy.on_change = changed
    return added
