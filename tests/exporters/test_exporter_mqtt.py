"""The MQTT exporter against a real mosquitto and a real store: alerts from the outbox, retained
speaker state and status, the last will, and no alert lost across a broker outage or a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from monitor.events.messages import TrackExpired
from monitor.exporters.mqtt import MqttExporter, Topics, speaker_state_payload, topic_level
from monitor.settings.sections import MqttSettings
from monitor.store.database import open_store
from tests.exporters.exporter_events import changed, scored, started
from tests.realparts.mosquitto import MosquittoBroker

pytestmark = pytest.mark.mosquitto

DEVICE = "testdev"
TOPICS = Topics(f"voxmeter/{DEVICE}")


def settings_for(broker: MosquittoBroker, **overrides: Any) -> MqttSettings:
    values: dict[str, Any] = {
        "enabled": True,
        "host": broker.host,
        "port": broker.port,
        "keepalive_seconds": 5,
        "reconnect_min_seconds": 0.2,
        "reconnect_max_seconds": 1.0,
    }
    values.update(overrides)
    return MqttSettings(**values)


def alert_payload(alias: str, from_state: str, to_state: str, bits: float) -> dict[str, Any]:
    """What the budget stage stores with the transition (docs/architecture.md)."""
    return {
        "alias": alias,
        "from": from_state,
        "to": to_state,
        "bits": bits,
        "budget": 5.0,
        "features": {"combined": {"lid": bits}},
        "bounds": {"basic": 9.0, "advanced": 8.0, "optimal": 7.0},
        "window_end": "2027-01-15T08:00:03.000+00:00",
        "device": DEVICE,
    }


def enqueue(store: Any, alias: str, from_state: str, to_state: str, bits: float) -> int:
    return int(
        store.transition(
            alias, to_state, bits, alert_payload(alias, from_state, to_state, bits), TOPICS.alerts
        )
    )


class Subscriber:
    """A real client that records everything under the device prefix (retained included)."""

    def __init__(self, client: aiomqtt.Client, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.messages: list[aiomqtt.Message] = []

    def on(self, topic: str) -> list[Any]:
        """Decoded JSON payloads seen on ``topic`` (None for an empty, clearing message)."""
        return [
            json.loads(m.payload) if m.payload else None  # type: ignore[arg-type]
            for m in self.messages
            if m.topic.value == topic
        ]

    async def wait(self, predicate: Callable[[], bool], timeout_seconds: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_seconds
        while not predicate():
            if time.monotonic() > deadline:
                seen = [(m.topic.value, m.payload) for m in self.messages]
                raise TimeoutError(f"condition not met; messages so far: {seen}")
            await asyncio.sleep(0.05)

    async def settled(self) -> None:
        """Wait until every retained message of the subscription has arrived: the broker sends
        them while it handles SUBSCRIBE, so before a message this client publishes afterwards
        (one connection, in order). Then "nothing retained" needs no fixed sleep."""
        marker = f"{self.topic.removesuffix('#')}test-barrier/{uuid.uuid4().hex}"
        await self.client.publish(marker, b"", qos=1)
        await self.wait(lambda: any(m.topic.value == marker for m in self.messages))


@contextlib.asynccontextmanager
async def subscribed(
    broker: MosquittoBroker, topic: str = "voxmeter/#"
) -> AsyncIterator[Subscriber]:
    # An identifier of its own: two subscribers sharing one would take over each other's session.
    identifier = f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    async with aiomqtt.Client(broker.host, broker.port, identifier=identifier) as client:
        subscriber = Subscriber(client, topic)
        await client.subscribe(topic, qos=1)

        async def record() -> None:
            async for message in client.messages:
                subscriber.messages.append(message)

        task = asyncio.create_task(record())
        try:
            yield subscriber
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await task


@contextlib.asynccontextmanager
async def running(exporter: MqttExporter) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(exporter.run(), name="voxmeter.exporter.mqtt")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(predicate: Callable[[], bool], timeout_seconds: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.02)


def run(coroutine: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(coroutine(), timeout=120))


def test_alerts_states_and_status_reach_a_real_broker(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    connection_log: list[bool] = []

    async def scenario() -> None:
        with open_store(tmp_path / "v.db") as store:
            exporter = MqttExporter(
                settings_for(mosquitto),
                store=store,
                device_id=DEVICE,
                on_connection=connection_log.append,
            )
            async with subscribed(mosquitto) as sub, running(exporter):
                await exporter.handle(started())
                await until(lambda: exporter.connected)
                window = scored("alias-a", index=1, combined_bits=4.2, state="warning")
                seq = enqueue(store, "alias-a", "ok", "warning", 4.2)
                await exporter.handle(window)
                await exporter.handle(changed("alias-a", "ok", "warning", seq=seq))
                await sub.wait(lambda: bool(sub.on(TOPICS.alerts)))
                await sub.wait(lambda: bool(sub.on(TOPICS.speaker_state("alias-a"))))
                await until(lambda: store.pending_count() == 0)

                (alert,) = sub.on(TOPICS.alerts)
                assert alert["seq"] == seq
                assert (alert["alias"], alert["from"], alert["to"]) == ("alias-a", "ok", "warning")
                assert alert["bits"] == 4.2 and alert["budget"] == 5.0 and alert["device"] == DEVICE
                assert {"features", "bounds", "window_end", "sent"} <= alert.keys()
                state = sub.on(TOPICS.speaker_state("alias-a"))[-1]
                assert state == speaker_state_payload(window.figures, updated_unix=0) | {
                    "updated": state["updated"]
                }
                assert state["state"] == "warning" and state["features"]["combined"]["lid"] == 4.2
                assert sub.on(TOPICS.status)[-1]["state"] == "online"

            # Retained: a client connecting now still gets the speaker state and the status.
            async with subscribed(mosquitto) as late:
                await late.wait(lambda: bool(late.on(TOPICS.speaker_state("alias-a"))))
                await late.wait(lambda: bool(late.on(TOPICS.status)))
                assert all(m.retain for m in late.messages)
                assert late.on(TOPICS.alerts) == []  # alerts are events, not retained
                # The exporter was cancelled (a clean stop): it said offline itself.
                assert late.on(TOPICS.status)[-1]["state"] == "offline"
        assert connection_log == [True, False]

    run(scenario)


def test_expired_track_clears_its_retained_state(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    async def scenario() -> None:
        with open_store(tmp_path / "v.db") as store:
            exporter = MqttExporter(settings_for(mosquitto), store=store, device_id=DEVICE)
            topic = TOPICS.speaker_state("unknown-3")
            async with subscribed(mosquitto) as sub, running(exporter):
                await exporter.handle(scored("unknown-3", unknown=True, top_candidate="spk-7"))
                await sub.wait(lambda: bool(sub.on(topic)))
                assert sub.on(topic)[-1]["top_candidate"] == "spk-7"
                await exporter.handle(TrackExpired("unknown-3", "unknown", 30.0, 1.8e9))
                await sub.wait(lambda: sub.on(topic)[-1] is None)
            async with subscribed(mosquitto) as late:
                await late.settled()
                assert late.on(TOPICS.status)  # the retained status arrived ...
                assert late.on(topic) == []  # ... and nothing else is retained any more

    run(scenario)


def test_every_alert_survives_a_broker_outage_in_order(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    reconnect = asyncio.Event()
    parked = asyncio.Event()

    async def gated_sleep(seconds: float) -> None:
        """The exporter's backoff, which also waits while the test holds ``reconnect``."""
        await asyncio.sleep(seconds)
        if not reconnect.is_set():
            parked.set()  # a retry came round while the broker is away: held here
        await reconnect.wait()

    async def scenario() -> None:
        reconnect.set()
        with open_store(tmp_path / "v.db") as store:
            exporter = MqttExporter(
                settings_for(mosquitto, reconnect_min_seconds=1.0, reconnect_max_seconds=2.0),
                store=store,
                device_id=DEVICE,
                rng=random.Random(1),
                sleep=gated_sleep,
            )
            async with running(exporter):
                async with subscribed(mosquitto) as before:
                    await until(lambda: exporter.connected)
                    first = enqueue(store, "alias-a", "ok", "warning", 4.1)
                    await exporter.handle(changed("alias-a", "ok", "warning", seq=first))
                    await before.wait(lambda: len(before.on(TOPICS.alerts)) == 1)

                await asyncio.to_thread(mosquitto.stop)
                await until(lambda: not exporter.connected)
                reconnect.clear()  # hold the exporter in its backoff until we listen again
                during = []
                for from_state, to_state, bits in (
                    ("warning", "exceeded", 5.3),
                    ("exceeded", "ok", 3.0),
                    ("ok", "warning", 4.4),
                ):
                    seq = enqueue(store, "alias-a", from_state, to_state, bits)
                    during.append(seq)
                    await exporter.handle(changed("alias-a", from_state, to_state, seq=seq))
                seq_b = enqueue(store, "alias-b", "ok", "exceeded", 6.0)
                during.append(seq_b)
                await exporter.handle(changed("alias-b", "ok", "exceeded", seq=seq_b))
                await asyncio.wait_for(parked.wait(), 30)  # it retried meanwhile, and is held
                assert store.pending_count() == 4, "alerts must wait in the outbox"

                # Alerts are not retained: this subscriber must be there before the exporter
                # reconnects, however slowly the machine runs; then the backoff may end.
                await asyncio.to_thread(mosquitto.start)
                async with subscribed(mosquitto) as after:
                    reconnect.set()
                    await after.wait(lambda: len(after.on(TOPICS.alerts)) >= 4, 20)
                    await until(lambda: store.pending_count() == 0)
                    received = [a["seq"] for a in after.on(TOPICS.alerts)]
                    assert received == during  # none lost, none extra, in order
                    assert [a["to"] for a in after.on(TOPICS.alerts)] == [
                        "exceeded",
                        "ok",
                        "warning",
                        "exceeded",
                    ]
                    assert exporter.connected

    run(scenario)


def test_alerts_left_by_a_previous_run_are_delivered_first(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    db = tmp_path / "v.db"
    with open_store(db) as store:  # a daemon that died before the broker acknowledged
        left = [
            enqueue(store, "alias-a", "ok", "warning", 4.0),
            enqueue(store, "alias-a", "warning", "exceeded", 5.1),
        ]

    async def scenario() -> None:
        with open_store(db) as store:
            exporter = MqttExporter(settings_for(mosquitto), store=store, device_id=DEVICE)
            async with subscribed(mosquitto) as sub, running(exporter):
                await sub.wait(lambda: len(sub.on(TOPICS.alerts)) == 2)
                newer = enqueue(store, "alias-b", "ok", "warning", 4.5)
                await exporter.handle(changed("alias-b", "ok", "warning", seq=newer))
                await sub.wait(lambda: len(sub.on(TOPICS.alerts)) == 3)
                assert [a["seq"] for a in sub.on(TOPICS.alerts)] == [*left, newer]
                await until(lambda: store.pending_count() == 0)

    run(scenario)


EXPORTER_PROCESS = """
import asyncio, sys
from monitor.settings.sections import MqttSettings
from monitor.exporters.mqtt import MqttExporter
from monitor.store.database import open_store

async def main():
    store = open_store(sys.argv[1])
    settings = MqttSettings(enabled=True, host="127.0.0.1", port=int(sys.argv[2]),
                            keepalive_seconds=5)
    exporter = MqttExporter(settings, store=store, device_id=sys.argv[3])
    task = asyncio.create_task(exporter.run())
    while not exporter.connected:
        await asyncio.sleep(0.02)
    print("connected", flush=True)
    await task

asyncio.run(main())
"""


def test_last_will_says_offline_when_the_daemon_dies(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            EXPORTER_PROCESS,
            str(tmp_path / "v.db"),
            str(mosquitto.port),
            DEVICE,
        ],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"connected"

        async def scenario() -> None:
            async with subscribed(mosquitto, TOPICS.status) as sub:
                await sub.wait(lambda: bool(sub.on(TOPICS.status)))
                assert sub.on(TOPICS.status)[-1]["state"] == "online"
                os.kill(process.pid, signal.SIGKILL)  # no DISCONNECT: the broker sends the will
                await sub.wait(lambda: sub.on(TOPICS.status)[-1]["state"] == "offline")
                offline = sub.on(TOPICS.status)[-1]
                assert offline["version"] and offline["started"]

        run(scenario)
    finally:
        process.kill()
        process.wait(timeout=5)


HOSTILE_ALIASES = ("a#b", "x+y", "a/b", "bob\x1b[31m", "tab\tname", "Zoë", "50%", "nul\x00l")


def test_topic_levels_are_percent_encoded_and_reversible() -> None:
    assert topic_level("a#b") == "a%23b"
    assert topic_level("x+y") == "x%2By"
    assert topic_level("a/b") == "a%2Fb"
    assert topic_level("bob\x1b[31m") == "bob%1B%5B31m"
    assert topic_level("tab\tname") == "tab%09name"
    assert topic_level("Zoë") == "Zo%C3%AB"
    assert topic_level("home-1_a.b~c") == "home-1_a.b~c"  # unreserved characters stay
    for alias in HOSTILE_ALIASES:
        assert urllib.parse.unquote(topic_level(alias)) == alias
        assert (
            TOPICS.speaker_state(alias) == f"voxmeter/{DEVICE}/speakers/{topic_level(alias)}/state"
        )


def test_hostile_aliases_reach_a_real_broker_on_one_connection(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """``#``/``+`` made paho refuse the topic (the daemon crashed) and a control character made
    mosquitto drop the connection in a loop: each alias is now one encoded topic level."""
    connection_log: list[bool] = []

    async def scenario() -> None:
        with open_store(tmp_path / "v.db") as store:
            exporter = MqttExporter(
                settings_for(mosquitto),
                store=store,
                device_id=DEVICE,
                on_connection=connection_log.append,
            )
            async with subscribed(mosquitto) as sub, running(exporter) as task:
                for alias in HOSTILE_ALIASES:
                    await exporter.handle(scored(alias, combined_bits=2.0))
                topics = [TOPICS.speaker_state(alias) for alias in HOSTILE_ALIASES]
                await sub.wait(lambda: all(sub.on(topic) for topic in topics))
                for alias, topic in zip(HOSTILE_ALIASES, topics, strict=True):
                    assert sub.on(topic)[-1]["alias"] == alias  # the payload keeps it as is
                    level = topic.split("/")[3]
                    assert urllib.parse.unquote(level) == alias
                assert not task.done()
        assert connection_log == [True, False]  # never dropped by the broker

    run(scenario)
