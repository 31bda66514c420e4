"""``[protect]`` in the relay process: the same per-connection anonymiser as in ``voxmeter run``,
deciding from what the measuring process last said.

The measuring process owns the budgets, the policy and the Home Assistant switch; it tells the
relay each source's verdict over the channel whenever it changes (``protect`` messages,
:class:`monitor.daemon.policy_feed.RelayFeed`). This relay keeps the last verdict per source and
decides at each ``audio-start`` by itself, drawing α itself (:class:`RelayedPolicy`): it never
asks, so the measuring side can neither slow nor silence the assistant.

**Fail-safe** (the measuring process killed, restarting, or not yet started):

- A source's last verdict stands until a new one comes: *an exceeded budget stays protected*.
  While nothing is measured no budget can grow, so a verdict "clear" cannot go stale by a
  crossing; a verdict "protect" can go stale only by the period's end or the switch turned
  off — the errors on the side of privacy, undone within a second of the measuring process's
  return (it tells the relay as soon as it has restored the budgets from the ledger).
- A source no verdict was heard for since this relay started is **protected** (``exceeded``
  and ``always`` alike): the relay cannot know that nobody is over budget, and passing a voice
  clear that should have been anonymised cannot be undone, while anonymising one that need not
  have been costs some words of the transcript for the seconds until the measuring process
  subscribes (after a relay restart: its next reconnect, ≤ 2 s).

The relay's own ``[protect]`` (the same config.toml as the measuring process's) loads the
anonymiser (numpy, scipy) at start and gives α until told; the measuring process's verdict
carries its mode, α and switch, and wins. Only a relay whose ``[protect] mode`` is not ``off``
imports this module (and numpy); one with ``off`` loads no anonymiser and ignores verdicts
(:mod:`monitor.relay.process` warns once when told to protect).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

from monitor.protect.mcadams import Alpha, McAdamsStream, parse_alpha
from monitor.protect.messages import PROTECT
from monitor.protect.policy import Decision, ProtectionPolicy
from monitor.protect.relay import transform_factory
from monitor.wyoming.relay import TransformFactory

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """What the measuring process last said about one source."""

    protect: bool
    speaker: str | None  # whose exceeded budget (an alias), for the log
    alpha: Alpha


@dataclass
class RelayedPolicy(ProtectionPolicy):
    """:class:`ProtectionPolicy` whose verdict is the measuring process's last word per source
    (the relay's source key: its ``wyoming-proxy://`` spec); see the module docstring."""

    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def verdict(self, source: str = "") -> tuple[bool, str | None]:
        told = self.verdicts.get(source)
        if told is None:  # never told since this relay started: fail safe
            return self.mode != "off", None
        return told.protect, told.speaker

    def decide(self, source: str = "") -> Decision:
        protect, speaker = self.verdict(source)
        self.report(protect, speaker)
        told = self.verdicts.get(source)
        alpha = told.alpha if told is not None else self.alpha
        return Decision(alpha.draw(self.rng) if protect else None, speaker)

    def told(self, source: str, header: dict[str, Any]) -> None:
        """A ``protect`` message of the measuring process about ``source``; a malformed one
        raises ValueError (the channel logs and ignores it)."""
        protect = header["protect"]
        if not isinstance(protect, bool):
            raise ValueError(f"protect must be true or false, got {protect!r}")
        speaker = header.get("speaker")
        alpha = parse_alpha(header["alpha"]) if "alpha" in header else self.alpha
        new = Verdict(protect, None if speaker is None else str(speaker), alpha)
        old = self.verdicts.get(source)
        self.verdicts[source] = new
        if old is None or old.protect != new.protect:
            whom = f" ({new.speaker} over budget)" if new.speaker else ""
            state = "anonymising its utterances" if protect else "passing it clear"
            logger.info("protection of %s: %s%s", source, state, whom)


def warm_up() -> None:
    """Anonymise 0.1 s of silence once, so the first protected utterance does not pay for the
    imports (scipy's) and the first calls on the relay path."""
    import numpy as np

    stream = McAdamsStream(16000, 0.8)
    stream.process(np.zeros(1600))
    stream.flush()


def _log_change(protecting: bool, speaker: str | None) -> None:
    logger.debug("protection %s", "on" if protecting else "off")


class RelayProtection:
    """The relay process's protection (mode not ``off``): the policy and the hooks
    :mod:`monitor.relay.process` installs (a transform factory per proxy, the channel's
    ``on_message``)."""

    def __init__(self, mode: str, alpha: Alpha, rng: random.Random | None = None) -> None:
        self.policy = RelayedPolicy(mode, alpha, rng or random.Random())
        self.policy.on_change = _log_change
        warm_up()
        logger.info(
            "protection (%s, McAdams α %s): every source protected until the measuring process "
            "says otherwise",
            mode,
            alpha,
        )

    def transform(self, source: str) -> TransformFactory:
        """The transform factory of the proxy ``source`` (its spec)."""
        return transform_factory(self.policy, source)

    def on_message(self, source: str, header: dict[str, Any]) -> None:
        """The channel's ``on_message``: ``protect`` verdicts; other kinds are not this one's."""
        if header.get("kind") == PROTECT:
            self.policy.told(source, header)


def relay_protection(mode: str, alpha: str) -> RelayProtection:
    """Protection from the relay's ``protect.mode`` (not off) and ``protect.alpha`` (checked
    already)."""
    return RelayProtection(mode, parse_alpha(alpha))
