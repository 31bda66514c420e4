"""Channel messages are checked by one schema on both ends (monitor/wyoming/channel_schema.py):
every malformed message is one warning and is ignored, never a traceback, never a reconnect.

Real parts: ``voxmeter relay`` as a process (its channel socket) for what a measuring process
may send; the measuring side's :func:`receive` against a relay written by hand on a real Unix
socket, so that it can be broken on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
from pathlib import Path

import pytest

from monitor.wyoming.channel import encode, read_message, receive
from monitor.wyoming.channel_schema import message_problem
from tests.fakes import RecordingTap
from tests.realparts.mosquitto import free_port

SOURCE = "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:1"
FMT = {"rate": 16000, "width": 2, "channels": 1}

MALFORMED_FROM_MEASURING = {
    "sources 5": {"kind": "subscribe", "sources": 5},
    "sources [[1]]": {"kind": "subscribe", "sources": [[1]]},
    "sources null": {"kind": "subscribe", "sources": None},
    "no sources": {"kind": "subscribe"},
}

MALFORMED_AFTER_SUBSCRIBING = [
    {"kind": "protect", "protect": "yes"},
    {"kind": "protect"},
    {"kind": "protect", "protect": True, "speaker": ["x"]},
    {"kind": "protect", "protect": True, "alpha": {"low": 1}},
    {"kind": 7},
    {"kind": None},
]

MALFORMED_FROM_RELAY = [
    {"kind": "hello", "relay": "r", "unmeasured": "x"},
    {"kind": "hello", "relay": 5, "unmeasured": {}},
    {"kind": "event", "source": SOURCE, "stream": 5, "unmeasured": 0, "type": "audio-stop",
     "data": {}},
    {"kind": "event", "source": SOURCE, "stream": "s", "unmeasured": 0, "type": "audio-start",
     "data": {**FMT, "rate": 10**9}},
    {"kind": "event", "source": SOURCE, "stream": "s", "unmeasured": "lots",
     "type": "audio-stop", "data": {}},
    {"kind": "event", "source": SOURCE, "stream": "s", "unmeasured": 0, "type": "transcript",
     "data": {}},
    {"kind": "left", "source": SOURCE},
    {"kind": "subscribe", "sources": [SOURCE]},
]  # fmt: skip


@pytest.mark.parametrize(
    "header", [*MALFORMED_FROM_MEASURING.values(), *MALFORMED_AFTER_SUBSCRIBING[:-1],
               *MALFORMED_FROM_RELAY[:-1]],
)  # fmt: skip
def test_the_schema_names_what_is_wrong_in_one_line(header: dict[str, object]) -> None:
    problem = message_problem(header)
    assert problem is not None and "\n" not in problem
    assert str(header["kind"]) in problem


def test_a_kind_of_a_later_version_fits() -> None:
    assert message_problem({"kind": "later", "n": 1}) is None


def test_the_relay_process_warns_once_per_malformed_message_and_serves_on() -> None:
    """Subscriptions with ``"sources": 5`` or ``[[1]]`` (once a traceback in the relay's log)
    and malformed messages after a good subscription: warnings, no traceback, repeated ones
    counted rather than repeated; a good subscriber is still answered."""
    from tests.relay.test_relay_protect import relay_process

    async def scenario() -> str:
        upstream = free_port()
        async with relay_process(upstream) as relay:
            spec = f"wyoming-proxy://127.0.0.1:{relay.port}?upstream=tcp://127.0.0.1:{upstream}"
            for header in MALFORMED_FROM_MEASURING.values():
                for _ in range(3):  # the same mistake again: counted, not logged again
                    reader, writer = await asyncio.open_unix_connection(str(relay.socket))
                    writer.write(encode(header))
                    assert await read_message(reader) is None  # let go, no hello
                    writer.close()
            reader, writer = await asyncio.open_unix_connection(str(relay.socket))
            writer.write(encode({"kind": "subscribe", "sources": [spec]}))
            hello = await read_message(reader)
            assert hello is not None and hello[0]["kind"] == "hello"
            for header in MALFORMED_AFTER_SUBSCRIBING * 3:
                writer.write(encode(header))
            writer.write(struct.pack(">II", 5, 0) + b"nope!")  # a whole frame, not JSON
            writer.write(encode({"kind": "protect", "protect": True}))  # still heard after all
            await writer.drain()
            async with asyncio.timeout(30):
                while "the measuring process protects" not in relay.log.read_text():
                    await asyncio.sleep(0.05)
            writer.close()
            assert relay.process.poll() is None
            return relay.log.read_text()

    log = asyncio.run(scenario())
    assert "Traceback" not in log and "exception" not in log.lower()
    dropped = log.count("subscriber was dropped")
    assert 1 <= dropped <= 2, log  # 12 bad subscriptions: the first, then a count at most
    assert 1 <= log.count("relay channel: ignored") <= 2, log  # 20 bad messages, one connection


def test_the_measuring_side_ignores_each_malformed_message_and_keeps_the_channel(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "relay.sock"
    recorder = RecordingTap()
    connections = 0

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_message(reader)  # the subscription
        for header in MALFORMED_FROM_RELAY:
            writer.write(encode(header))
        good = {"kind": "event", "source": SOURCE, "stream": "s", "unmeasured": 0.0,
                "type": "audio-chunk", "data": FMT}  # fmt: skip
        writer.write(encode(good, b"\0\0" * 160))
        await writer.drain()
        with contextlib.suppress(asyncio.CancelledError):
            await read_message(reader)  # until the measuring side leaves
        writer.close()

    async def scenario() -> None:
        server = await asyncio.start_unix_server(relay, str(path))
        task = asyncio.create_task(
            receive(path, SOURCE, recorder, lambda seconds: None, rng=random.Random(1))
        )
        try:
            async with asyncio.timeout(10):
                while not recorder.seen:
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            server.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert [s for s in recorder.seen if s[1]] == [("s", "audio-chunk")]  # the good one only
    assert connections == 1  # never a reconnect
    ours = [r for r in caplog.records if r.name.startswith("monitor")]
    ignored = [r for r in ours if "ignored" in r.getMessage()]
    assert 1 <= len(ignored) <= 2 and not any(r.exc_info for r in ours)
