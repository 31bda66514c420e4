"""Every MQTT topic the daemon publishes to or subscribes to, declared once.

The exporters build their topics from these patterns (``pattern.format(prefix=...)``), and the
metrics reference (docs/reference/metrics.md) is rendered from the same table, so a topic is
never spelled in two places. ``{prefix}`` is ``mqtt.prefix``, else ``voxmeter/<device_id>``;
``{alias}`` and ``{source}`` are one percent-encoded topic level each
(:func:`monitor.exporters.mqtt.topic_level`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopicDecl:
    """One topic: its pattern, whether messages are retained, who publishes (or subscribes),
    and what a message holds."""

    pattern: str
    retained: bool
    direction: str  # "publish" or "subscribe", seen from the daemon
    exporter: str  # the exporter that owns the topic
    payload: str


TOPICS: dict[str, TopicDecl] = {
    "status": TopicDecl(
        "{prefix}/status",
        retained=True,
        direction="publish",
        exporter="mqtt",
        payload='JSON {"state": "online"|"offline", "version", "started"}; the broker\'s last '
        "will publishes offline when the daemon vanishes; a start the user must fix adds "
        '"problem" (the log\'s line: the Problem entity) and waits to be restarted',
    ),
    "alerts": TopicDecl(
        "{prefix}/alerts",
        retained=False,
        direction="publish",
        exporter="mqtt",
        payload="JSON, one object per budget transition, at least once and in seq order (from "
        "the store's outbox, QoS >= 1); protection alerts (event protection) too",
    ),
    "speaker_state": TopicDecl(
        "{prefix}/speakers/{alias}/state",
        retained=True,
        direction="publish",
        exporter="mqtt",
        payload="JSON: the speaker's latest figures (alias, kind, state, bits, budget, measure, "
        "features, bounds, ceiling, windows, speech_seconds, period_start, updated; "
        "information_gain and top_candidate for unknown voices; figures: the whole record); "
        "an empty retained message clears an expired unknown-N track",
    ),
    "device_state": TopicDecl(
        "{prefix}/device",
        retained=True,
        direction="publish",
        exporter="homeassistant",
        payload="JSON: the device's figures (templates, speech seconds, saturated, the "
        "reference set)",
    ),
    "source_state": TopicDecl(
        "{prefix}/sources/{source}/state",
        retained=True,
        direction="publish",
        exporter="homeassistant",
        payload="JSON: one named source's figures (speech_seconds this period, last_voice; "
        "media: ON while a television or radio plays there, media_speech_seconds this period)",
    ),
    "protection_state": TopicDecl(
        "{prefix}/protection",
        retained=True,
        direction="publish",
        exporter="protection",
        payload='JSON {"enabled", "protecting", "speaker"} with ON or OFF',
    ),
    "protection_set": TopicDecl(
        "{prefix}/protection/set",
        retained=False,
        direction="subscribe",
        exporter="protection",
        payload="ON or OFF: the Protection switch in Home Assistant",
    ),
    "enrolment_state": TopicDecl(
        "{prefix}/enrolment",
        retained=True,
        direction="publish",
        exporter="enrolment",
        payload='JSON {"status", "phase", "alias", "seconds", "needed", "members", "reason"}: '
        "the Enrolment progress sensor and the alias text (phase idle, listening, done, "
        "refused or cancelled)",
    ),
    "enrolment_alias": TopicDecl(
        "{prefix}/enrolment/alias/set",
        retained=False,
        direction="subscribe",
        exporter="enrolment",
        payload="the new member's alias (the text in Home Assistant); retained commands are "
        "ignored",
    ),
    "enrolment_command": TopicDecl(
        "{prefix}/enrolment/command",
        retained=False,
        direction="subscribe",
        exporter="enrolment",
        payload="START (enrol the next voice heard) or CANCEL: the enrolment buttons",
    ),
    "enrolment_claim": TopicDecl(
        "{prefix}/enrolment/claim",
        retained=False,
        direction="subscribe",
        exporter="enrolment",
        payload="an unknown-N track: its speech so far becomes the new member's profile "
        "(the button of an Unrecognised voice)",
    ),
    "enrolment_forget": TopicDecl(
        "{prefix}/enrolment/forget",
        retained=False,
        direction="subscribe",
        exporter="enrolment",
        payload="a member's alias: its identity and profile are removed (the member's Forget "
        "button)",
    ),
    "discovery_config": TopicDecl(
        "{discovery_prefix}/{component}/{node_id}/{object_id}/config",
        retained=True,
        direction="publish",
        exporter="homeassistant",
        payload="JSON: a Home Assistant MQTT discovery config (an empty retained message "
        "removes the entity)",
    ),
}
