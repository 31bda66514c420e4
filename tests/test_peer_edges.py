"""Edges a hostile peer or a careless operator finds: a port of 0 is logged as the port bound; a
file name that is not UTF-8 is refused naming the byte; an option that needs another one is
refused without it; warnings a peer triggers are rate-limited per peer and kind (the first,
then a count a minute). Real processes and real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.logs import PeerWarnings
from monitor.wyoming.source import WyomingSource, parse_endpoint

REPO = Path(__file__).resolve().parents[1]


def voxmeter(*args: str | bytes, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *args], cwd=REPO, capture_output=True, text=True,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("voxmeter: error: "), done.stderr
    return lines[0]


@contextlib.asynccontextmanager
async def listening(source: WyomingSource) -> AsyncIterator[None]:
    """The ``wyoming-listen`` source serving (its port bound) for the block."""
    frames = source.frames()
    waiting = asyncio.create_task(anext(frames))
    async with asyncio.timeout(10):
        while not source.port:
            await asyncio.sleep(0.01)
    try:
        yield
    finally:
        source.close()
        with contextlib.suppress(StopAsyncIteration):
            await waiting


# ---- a port of 0 -----------------------------------------------------------------------------


def test_the_relay_process_logs_the_port_it_bound_when_0_was_asked(tmp_path: Path) -> None:
    folder = Path(os.path.realpath("/tmp")) / f"vxport-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    command = [
        sys.executable, "-m", "monitor.cli", "relay",
        "--set", "daemon.source=wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:9",
        "--set", f"relay.socket={folder / 'r.sock'}", "--set", "wyoming.zeroconf=false",
    ]  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if "relaying Wyoming" in line:
                break
        found = re.search(r"wyoming-proxy://127\.0\.0\.1:(\d+)", line)
        assert found is not None, line
        port = int(found.group(1))
        assert port != 0

        async def connect() -> None:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()

        asyncio.run(connect())  # the port logged is the one that answers
    finally:
        process.terminate()
        process.wait(30)
        for inner in folder.iterdir():
            inner.unlink()
        folder.rmdir()


def test_a_listener_on_port_0_logs_the_port_it_bound(caplog: pytest.LogCaptureFixture) -> None:
    source = WyomingSource(parse_endpoint("wyoming-listen://127.0.0.1:0"))

    async def scenario() -> None:
        async with listening(source):
            pass

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert f"wyoming-listen://127.0.0.1:{source.port}" in caplog.text
    assert "127.0.0.1:0" not in caplog.text


# ---- names and options -----------------------------------------------------------------------


def test_a_source_file_whose_name_is_not_utf8_is_refused_naming_the_byte(tmp_path: Path) -> None:
    from monitor.store.database import open_store

    name = os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9.wav")
    with open(name, "wb") as out:  # soundfile opens UTF-8 names only
        sf.write(out, np.zeros(16000, dtype=np.int16), 16000, format="WAV")
    open_store(tmp_path / "v.db").close()
    line = one_line(voxmeter("run", "--db", str(tmp_path / "v.db"), "--source", f"file:{name}"))
    assert "0xE9" in line and "not UTF-8" in line and "--source" in line


@pytest.mark.parametrize("command", ["evaluate", "enroll"])
def test_protect_alpha_without_protect_is_refused(command: str, tmp_path: Path) -> None:
    args = ["--out", str(tmp_path / "out")] if command == "evaluate" else []
    if command == "enroll":
        args = ["--db", str(tmp_path / "v.db")]
    line = one_line(voxmeter(command, str(tmp_path), *args, "--protect-alpha", "0.7"))
    assert "--protect-alpha 0.7: needs --protect" in line


@pytest.mark.parametrize("option", [("--wer-utterances", "5"), ("--attacker", "backend.npz")])
def test_evaluate_options_of_protection_without_protect_are_refused(
    option: tuple[str, str], tmp_path: Path
) -> None:
    (tmp_path / "backend.npz").write_bytes(b"")
    value = str(tmp_path / option[1]) if option[0] == "--attacker" else option[1]
    args = ["--out", str(tmp_path / "out"), option[0], value]
    line = one_line(voxmeter("evaluate", str(tmp_path), *args))
    assert f"{option[0]} {value}: needs --protect" in line


# ---- warnings from peers -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_peer_warnings_are_the_first_then_a_count_per_peer_and_kind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    warnings = PeerWarnings(logging.getLogger("test.peers"), window_seconds=60, clock=clock)
    with caplog.at_level(logging.WARNING, "test.peers"):
        for n in range(500):
            clock.now = n * 0.01
            warnings.warn("10.0.0.5", "junk", "junk %d", n)
        warnings.warn("10.0.0.6", "junk", "junk from another")  # another peer: its own first
        warnings.warn("10.0.0.5", "refused", "refused")  # another kind: its own first
        clock.now = 61.0
        warnings.warn("10.0.0.5", "junk", "junk again")  # a new window: logged, with the count
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "junk 0",
        "junk from another",
        "refused",
        "10.0.0.5: 499 more warnings (junk) in the last 60 s",
        "junk again",
    ]


def test_a_listener_flooded_with_junk_logs_two_lines_not_fifty(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """50 connections from one host, each sending a header that is not JSON: the first warning,
    then (on the running loop, once the window ends) one count."""
    source = WyomingSource(parse_endpoint("wyoming-listen://127.0.0.1:0"))
    from monitor.wyoming import source as module

    module.warnings.window_seconds = 0.5  # the test's minute
    module.warnings._tallies.clear()

    async def scenario() -> None:
        async with listening(source):
            for _ in range(50):
                reader, writer = await asyncio.open_connection("127.0.0.1", source.port)
                writer.write(b"GET / HTTP/1.1\r\n\r\n")
                await writer.drain()
                await reader.read()  # dropped: the listener hangs up
                writer.close()
            await asyncio.sleep(0.8)  # the window ends: the count is logged

    try:
        with caplog.at_level(logging.WARNING, "monitor.wyoming.source"):
            asyncio.run(scenario())
    finally:
        module.warnings.window_seconds = 60.0
    lines = [r.getMessage() for r in caplog.records if r.name == "monitor.wyoming.source"]
    assert len(lines) == 2, lines
    assert "dropped" in lines[0] and "49 more warnings" in lines[1]
