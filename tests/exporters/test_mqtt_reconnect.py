"""Reconnecting after a broker outage (monitor/exporters/connection.py, one policy for every
MQTT connection): random capped backoff while the broker refuses us, and back within about a
second of the broker's return (its port probed after every 1 s step), or of an alert written to
the outbox, however long the outage grew the backoff. The schedule is checked with an injected
clock (no broker on the port: every attempt fails for real); the delivery and both connections'
return with a real mosquitto stopped or killed and restarted on its port."""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path
from typing import Any

import pytest

from monitor.exporters.homeassistant import HomeAssistantExporter
from monitor.exporters.mqtt import MqttExporter
from monitor.exporters.reconnect import RETRY_STEP_SECONDS
from monitor.settings.sections import MqttSettings
from monitor.store.database import open_store
from tests.exporters.exporter_events import changed
from tests.exporters.test_exporter_mqtt import (
    DEVICE,
    TOPICS,
    enqueue,
    run,
    running,
    settings_for,
    subscribed,
    until,
)
from tests.realparts.mosquitto import MosquittoBroker, free_port


class Draws(random.Random):
    """A seeded Random that keeps its ``uniform`` draws: one per reconnect attempt. With
    ``highest`` every draw is its upper bound (the longest schedule the backoff allows)."""

    def __init__(self, seed: int, *, highest: bool = False) -> None:
        super().__init__(seed)
        self.highest = highest
        self.draws: list[tuple[float, float, float]] = []  # (low, ceiling, delay)

    def uniform(self, a: float, b: float) -> float:
        value = b if self.highest else super().uniform(a, b)
        self.draws.append((a, b, value))
        return value


class FakeClock:
    """Time that moves only when the exporter sleeps; each sleep is recorded with the number of
    attempts made before it."""

    def __init__(self, draws: Draws) -> None:
        self.now = 0.0
        self.draws = draws
        self.sleeps: list[tuple[int, float]] = []  # (attempts so far, seconds)

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append((len(self.draws.draws), seconds))
        self.now += seconds
        await asyncio.sleep(0)


def unreachable(**overrides: Any) -> MqttSettings:
    return MqttSettings(enabled=True, port=free_port(), **overrides)


def backoff_until(
    tmp_path: Path, settings: MqttSettings, draws: Draws, stop_after: int, during: Any = None
) -> FakeClock:
    """Run the exporter against a closed port until ``stop_after`` attempts; ``during(clock,
    store)`` is called at every sleep (e.g. to write an alert into the outbox)."""
    clock = FakeClock(draws)

    async def sleep(seconds: float) -> None:
        if len(draws.draws) >= stop_after:
            raise asyncio.CancelledError
        if during is not None:
            during(clock, store)
        await clock.sleep(seconds)

    async def scenario() -> None:
        exporter = MqttExporter(settings, store=store, device_id=DEVICE, rng=draws, sleep=sleep)
        with pytest.raises(asyncio.CancelledError):
            await exporter.run()
        assert not exporter.connected

    with open_store(tmp_path / "v.db") as store:
        asyncio.run(scenario())
    return clock


def per_attempt(clock: FakeClock) -> list[float]:
    """Seconds slept after each attempt (the sum of its steps)."""
    total: dict[int, float] = {}
    for attempt, seconds in clock.sleeps:
        total[attempt] = total.get(attempt, 0.0) + seconds
    return list(total.values())


def test_random_capped_backoff_while_nothing_waits(tmp_path: Path) -> None:
    draws = Draws(7)
    settings = unreachable(reconnect_min_seconds=0.5, reconnect_max_seconds=3.0)
    clock = backoff_until(tmp_path, settings, draws, stop_after=8)
    ceilings = [min(3.0, 0.5 * 2**i) for i in range(len(draws.draws))]
    assert [c for _, c, _ in draws.draws] == ceilings
    delays = [d for *_, d in draws.draws]
    assert all(0.5 <= d <= c for d, c in zip(delays, ceilings, strict=True)), delays
    assert max(delays) > 1.0  # the ceiling really grew
    assert len(set(delays)) == len(delays)  # random, not a fixed schedule
    # slept in steps of at most RETRY_STEP_SECONDS, adding up to each drawn delay
    assert all(s <= RETRY_STEP_SECONDS for _, s in clock.sleeps)
    assert per_attempt(clock) == pytest.approx(delays[: len(per_attempt(clock))], rel=1e-12)


def test_an_alert_cuts_a_long_backoff_to_a_second(tmp_path: Path) -> None:
    """The outage grew the delay to 16 s; an alert written during it is tried within 1 s, and
    then every second while it waits (the broker is still away)."""
    draws = Draws(3, highest=True)
    settings = unreachable(reconnect_min_seconds=0.5, reconnect_max_seconds=30.0)
    written: list[float] = []

    def write_alert_mid_backoff(clock: FakeClock, store: Any) -> None:
        if not written and clock.sleeps and clock.sleeps[-1][0] == 6:  # 1 s into attempt 6's
            assert draws.draws[-1][2] == 16.0  # 16 s delay
            enqueue(store, "alias-a", "ok", "warning", 4.2)
            written.append(clock.now)

    clock = backoff_until(tmp_path, settings, draws, 12, during=write_alert_mid_backoff)
    assert written
    after = [t for t in _attempt_times(clock) if t > written[0]]
    assert after[0] - written[0] <= RETRY_STEP_SECONDS
    assert all(b - a <= RETRY_STEP_SECONDS for a, b in itertools.pairwise(after))
    assert len(after) >= 5  # no 16 s or 30 s pause while the alert waits


def _attempt_times(clock: FakeClock) -> list[float]:
    """Fake time at which each attempt after the first was made (end of its backoff)."""
    now, times, last = 0.0, [], 1
    for attempt, seconds in clock.sleeps:
        if attempt != last:
            times.append(now)
            last = attempt
        now += seconds
    return times


@pytest.mark.mosquitto
@pytest.mark.slow
def test_a_pending_alert_arrives_soon_after_the_broker_returns(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """A real outage long enough that the backoff is at 8 s when the broker comes back with an
    alert waiting: it arrives one step later, well before that backoff would end.

    The exporter is held at the end of its current 1 s step while the alert is written, the
    broker restarted and the test's subscriber listens (alerts are not retained: a subscriber
    that came after the alert would miss it, and an attempt while the broker was still starting
    would draw a new wait), then let go."""
    draws = Draws(5, highest=True)  # delays 1, 2, 4, 8, ...: the slowest schedule allowed
    gate = asyncio.Event()
    slept: list[float] = []

    async def held_sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)
        slept.append(seconds)
        await gate.wait()

    async def scenario() -> None:
        gate.set()
        with open_store(tmp_path / "v.db") as store:
            settings = settings_for(
                mosquitto, reconnect_min_seconds=1.0, reconnect_max_seconds=30.0
            )
            exporter = MqttExporter(
                settings, store=store, device_id=DEVICE, rng=draws, sleep=held_sleep
            )
            async with running(exporter):
                await until(lambda: exporter.connected)
                await asyncio.to_thread(mosquitto.stop)
                await until(lambda: len(draws.draws) >= 4, 60)  # now in the 8 s delay
                gate.clear()
                slept.clear()
                seq = enqueue(store, "alias-a", "ok", "exceeded", 6.1)
                await exporter.handle(changed("alias-a", "ok", "exceeded", seq=seq))
                await asyncio.to_thread(mosquitto.start)
                async with subscribed(mosquitto) as seen:
                    gate.set()
                    await seen.wait(lambda: len(seen.on(TOPICS.alerts)) == 1, 30)
                assert seen.on(TOPICS.alerts)[0]["seq"] == seq
                await until(lambda: store.pending_count() == 0)
                assert draws.draws[3][2] == 8.0 and len(draws.draws) == 4  # no 8 s wait
                assert len(slept) == 1 and slept[0] <= RETRY_STEP_SECONDS  # one step, not 8 s

    run(scenario)


class CountedSleep:
    """The exporters' sleep, counting the seconds each one slept since ``mark()``."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def mark(self) -> None:
        self.slept.clear()

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(seconds)


@pytest.mark.mosquitto
@pytest.mark.slow
def test_the_shared_connection_returns_soon_after_a_killed_broker_restarts(
    mosquitto: MosquittoBroker, tmp_path: Path
) -> None:
    """The broker is SIGKILLed and stays away until the backoff is at 8 s or more, then starts
    again on its port with nothing waiting in the outbox: the one connection the alert sender
    and Home Assistant discovery share is back before its current wait ends, one or two 1 s
    steps after the port opens, and both publish on it again.
    """
    from tests.exporters.exporter_events import started
    from tests.exporters.test_exporter_homeassistant import PREFIX, configs, household

    settings = settings_for(mosquitto, reconnect_min_seconds=1.0, reconnect_max_seconds=30.0)
    draws, sleep = Draws(11, highest=True), CountedSleep()

    async def scenario() -> None:
        from monitor.settings.sections import HomeAssistantSettings

        with household(tmp_path / "v.db") as store:
            plain = MqttExporter(
                settings,
                store=store,
                device_id=DEVICE,
                clear_expired=False,
                rng=draws,
                sleep=sleep,
            )
            ha = HomeAssistantExporter(
                HomeAssistantSettings(discovery=True, discovery_prefix=PREFIX),
                settings,
                store=store,
                device_id=DEVICE,
                connection=plain.connection,
            )
            assert ha.connection is plain.connection
            async with running(plain), running(ha):  # type: ignore[arg-type]
                await ha.handle(started())
                await until(lambda: plain.connected and ha.connected)
                await asyncio.to_thread(mosquitto.kill)
                # attempts wait 1, 2, 4, 8 s: the fourth draw is an 8 s wait, now under way
                await until(lambda: len(draws.draws) >= 4, 60)
                assert not (plain.connected or ha.connected)
                drawn = draws.draws[-1][2]
                assert drawn >= 8.0
                count = len(draws.draws)
                sleep.mark()
                await asyncio.to_thread(mosquitto.start)
                async with subscribed(mosquitto, "#") as seen:
                    await until(lambda: plain.connected and ha.connected, 60)
                    assert len(draws.draws) == count  # in the same wait
                    assert len(sleep.slept) <= 2 and sum(sleep.slept) < drawn, sleep.slept
                    # the restarted broker forgot everything: both users published again
                    await seen.wait(
                        lambda: len(configs(seen)) >= 3 and bool(seen.on(TOPICS.status))
                    )
                assert store.pending_count() == 0  # no alert waited: the port did it

    run(scenario)


def test_a_broker_that_refuses_us_is_probed_once_per_wait(tmp_path: Path) -> None:
    """An open port that refuses us (here a real TCP server that hangs up at once: not MQTT)
    does not end the backoff early: the port is probed once per wait, not every second, and the
    schedule is the random capped one."""
    draws = Draws(9, highest=True)
    clock = FakeClock(draws)
    connections: list[int] = []

    async def sleep(seconds: float) -> None:
        if len(draws.draws) >= 5:
            raise asyncio.CancelledError
        await clock.sleep(seconds)

    def hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(draws.draws))
        writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        settings = MqttSettings(
            enabled=True,
            port=server.sockets[0].getsockname()[1],
            reconnect_min_seconds=0.5,
            reconnect_max_seconds=4.0,
        )
        async with server:
            with open_store(tmp_path / "v.db") as store:
                exporter = MqttExporter(
                    settings, store=store, device_id=DEVICE, rng=draws, sleep=sleep
                )
                with pytest.raises(asyncio.CancelledError):
                    await exporter.run()

    asyncio.run(asyncio.wait_for(scenario(), 120))
    assert per_attempt(clock)[:4] == pytest.approx([0.5, 1.0, 2.0, 4.0], rel=1e-12)
    # attempt k, then its wait's one probe: two connections per attempt, none in between
    attempts = len(draws.draws)
    assert sorted(connections) == sorted([*range(attempts), *range(1, attempts + 1)])
