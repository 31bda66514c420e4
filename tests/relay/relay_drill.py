"""The SIGKILL drill of the two-process layout, with real parts: a real pocketsphinx Wyoming ASR
upstream (tests/realparts/wyoming_upstreams.py), a real mosquitto with a persistent subscriber,
``voxmeter relay`` and ``voxmeter run`` as the processes systemd or the add-on starts.

Speech-to-text commands of corpus audio go to the upstream, first directly (each connection's
bytes recorded there), then through the relay while the measuring process is SIGKILLed and
started again (what systemd's ``Restart=always`` does), and once the relay itself is SIGKILLed
and started again. :func:`run_drill` returns what a test asserts and a benchmark records:
transcripts both ways, the bytes the upstream received both ways, the ledger's windows and the
alerts, and how long each recovery took (monotonic clock; recorded, never asserted by tests).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from wyoming.asr import Transcribe

from tests.realparts import stop_process
from tests.realparts.mosquitto import MosquittoBroker, free_port, wait_for_port
from tests.realparts.wyoming_upstreams import serve
from tests.wyoming.wyoming_peers import conversation, talk

REPO = Path(__file__).resolve().parents[2]
VOXMETER = [sys.executable, "-m", "monitor.cli"]
DEVICE = "drill"
SUBSCRIBED = "measuring process subscribed"
HANG_GUARD_SECONDS = 240.0
"""Longest wait for any step (a hang guard on a loaded machine, not a target)."""


@dataclass
class Drill:
    """What happened (see the module docstring)."""

    direct: list[str] = field(default_factory=list)  # transcripts, straight to the upstream
    proxied: list[str] = field(default_factory=list)  # the same commands through the relay
    direct_bytes: list[bytes] = field(default_factory=list)  # per connection, at the upstream
    proxied_bytes: list[bytes] = field(default_factory=list)
    windows_at_kill: list[int] = field(default_factory=list)  # ledger rows when each kill hit
    windows_after_kill: list[int] = field(default_factory=list)  # rows right after the restart
    windows_final: int = 0
    back_seconds: list[float] = field(default_factory=list)  # kill → a new window in the ledger
    subscribed_seconds: list[float] = field(default_factory=list)  # kill → subscribed again
    back_cpu_seconds: list[float] = field(default_factory=list)  # the new process's CPU time
    # from its start until it scored again: what its start costs whatever the machine's load
    relay_listening_seconds: float = 0.0  # relay SIGKILL → listening again (started at once)
    relay_resubscribed_seconds: float = 0.0  # relay SIGKILL → the measuring side subscribed
    integrity: str = ""
    alert_seqs: list[int] = field(default_factory=list)  # every alert the ledger ever queued
    alerts_received: list[int] = field(default_factory=list)  # seqs at the subscriber
    outbox_left: int = -1
    dropped_reported: list[str] = field(default_factory=list)  # the daemon's "dropped" lines
    relay_rss_kib: int = 0


def _rows(db: Path, query: str) -> list[Any]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as connection:
        return connection.execute(query).fetchall()


def windows(db: Path) -> int:
    return int(_rows(db, "SELECT count(*) FROM ledger_windows")[0][0])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _until(predicate: Any, what: str) -> Any:
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{what} not seen within {HANG_GUARD_SECONDS:g} s")


class _Processes:
    """The relay and the measuring process, started as their units start them."""

    def __init__(self, folder: Path, config: Path) -> None:
        self.folder, self.config = folder, config
        self.relay: subprocess.Popen[bytes] | None = None
        self.measuring: subprocess.Popen[bytes] | None = None
        self.relay_log = folder / "relay.log"
        self.starts = 0

    def start_relay(self) -> None:
        with open(self.relay_log, "ab") as log:
            self.relay = subprocess.Popen(
                [*VOXMETER, "relay", "--config", str(self.config)],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip

    def start_measuring(self) -> None:
        self.starts += 1
        with open(self.folder / f"measuring-{self.starts}.log", "wb") as log:
            self.measuring = subprocess.Popen(
                [*VOXMETER, "run", "--config", str(self.config)],
                cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip

    def subscriptions(self) -> int:
        return self.relay_log.read_text(errors="replace").count(SUBSCRIBED)

    def measuring_log(self) -> str:
        return "".join(
            (self.folder / f"measuring-{i}.log").read_text(errors="replace")
            for i in range(1, self.starts + 1)
        )

    def stop(self) -> None:
        stop_process(self.measuring, grace_seconds=30)
        stop_process(self.relay)


async def run_drill(
    folder: Path,
    db: Path,
    commands: list[np.ndarray],
    *,
    kills: tuple[int, ...] = (6, 13),
    relay_kill: int | None = 17,
) -> Drill:
    """The drill (module docstring): ``commands`` (int16 16 kHz) in order; the measuring process
    is SIGKILLed after command number ``kills`` (1-based), the relay after ``relay_kill``."""
    drill = Drill()
    records: list[bytearray] = []
    upstream, upstream_port = await serve("asr", records=records)
    conversations = [conversation(c, Transcribe(language="en").event()) for c in commands]
    for events in conversations:
        (reply,) = await talk(upstream_port, events)
        drill.direct.append(str(reply.data.get("text")))
    drill.direct_bytes = [bytes(r) for r in records]
    records.clear()

    broker = MosquittoBroker(folder / "broker", persistent=True)
    broker.directory.mkdir()
    broker.start()
    sub_log = folder / "mqtt.log"
    port = free_port()
    short = Path(tempfile.mkdtemp(prefix="vxdrill-"))  # a Unix socket path is ≤ 108 bytes
    config = folder / "config.toml"
    config.write_text(
        f'[daemon]\nsource = "wyoming-proxy://127.0.0.1:{port}?upstream=tcp://127.0.0.1:'
        f'{upstream_port}"\ndb = "{db}"\ndevice_id = "{DEVICE}"\n'
        f'[relay]\nsocket = "{short / "relay.sock"}"\n'
        "[wyoming]\nzeroconf = false\n[prometheus]\nenabled = false\n"
        f"[mqtt]\nenabled = true\nport = {broker.port}\nreconnect_max_seconds = 2.0\n"
        "[budget]\nbits = 1.0\nwarn_fraction = 0.5\n"
    )
    processes = _Processes(folder, config)
    subscriber = None
    try:
        with open(sub_log, "wb") as out:
            subscriber = subprocess.Popen(
                ["mosquitto_sub", "-h", broker.host, "-p", str(broker.port), "-q", "1",
                 "-c", "-i", "drill-subscriber", "-v", "-t", f"voxmeter/{DEVICE}/alerts"],
                stdout=out,
            )  # fmt: skip
        processes.start_relay()
        await asyncio.to_thread(wait_for_port, port, timeout_seconds=60)
        processes.start_measuring()
        await _until(lambda: processes.subscriptions() >= 1, "the measuring process subscribed")
        returns: list[asyncio.Task[None]] = []  # each restart: timed until it scores again
        subscribed: list[asyncio.Event] = []
        for number, events in enumerate(conversations, start=1):
            if any(k - 2 <= number <= k for k in kills) or number > len(commands) - 2:
                for event in subscribed:  # so these are measured: a window before the next kill
                    await event.wait()
            (reply,) = await talk(port, events)
            drill.proxied.append(str(reply.data.get("text")))
            if number in kills:
                subscribed.append(asyncio.Event())
                returns.append(await _kill_measuring(drill, processes, db, subscribed[-1]))
            if number == relay_kill:
                await _kill_relay(drill, processes, port)
            await asyncio.sleep(commands[number - 1].shape[0] / 16000)  # paced as spoken
        await asyncio.gather(*returns)
        assert processes.relay is not None
        drill.relay_rss_kib = _rss_kib(processes.relay.pid)
        drill.proxied_bytes = [bytes(r) for r in records if r]  # not the port probes' empty ones
        await _until(lambda: not _rows(db, "SELECT seq FROM outbox"), "the outbox emptied")
        processes.stop()
        drill.windows_final = windows(db)
        drill.integrity = str(_rows(db, "PRAGMA integrity_check")[0][0])
        top = _rows(db, "SELECT seq FROM sqlite_sequence WHERE name = 'outbox'")
        drill.alert_seqs = list(range(1, int(top[0][0]) + 1)) if top else []
        drill.outbox_left = len(_rows(db, "SELECT seq FROM outbox"))
        await asyncio.sleep(1.0)  # the subscriber writes out the last alert it got
        for line in sub_log.read_text().splitlines():
            _, _, payload = line.partition(" ")
            drill.alerts_received.append(int(json.loads(payload)["seq"]))
        drill.dropped_reported = [
            line for line in processes.measuring_log().splitlines() if "audio dropped" in line
        ]
    finally:
        processes.stop()
        stop_process(subscriber)
        broker.stop()
        await upstream.stop()
        shutil.rmtree(short, ignore_errors=True)
    return drill


async def _kill_measuring(
    drill: Drill, processes: _Processes, db: Path, subscribed_again: asyncio.Event
) -> asyncio.Task[None]:
    """Once the measuring side scored since its start: SIGKILL, start it again at once (as
    ``Restart=always`` does); the task returned times it back (subscribed; a new window)."""
    floor = drill.windows_after_kill[-1] if drill.windows_after_kill else 0
    await _until(lambda: windows(db) > floor, "a window scored before the kill")
    subscribed = processes.subscriptions()
    assert processes.measuring is not None
    drill.windows_at_kill.append(windows(db))
    killed = time.monotonic()
    os.kill(processes.measuring.pid, signal.SIGKILL)
    processes.measuring.wait()
    after = windows(db)
    drill.windows_after_kill.append(after)
    processes.start_measuring()

    async def back() -> None:
        await _until(lambda: processes.subscriptions() > subscribed, "subscribed again")
        drill.subscribed_seconds.append(time.monotonic() - killed)
        subscribed_again.set()
        await _until(lambda: windows(db) > after, "a window scored after the restart")
        drill.back_seconds.append(time.monotonic() - killed)
        assert processes.measuring is not None
        drill.back_cpu_seconds.append(_cpu_seconds(processes.measuring.pid))

    return asyncio.get_running_loop().create_task(back())


async def _kill_relay(drill: Drill, processes: _Processes, port: int) -> None:
    """SIGKILL the relay and start it again at once: listening, and the measuring side (not
    restarted) subscribed to it again."""
    assert processes.relay is not None
    subscribed = processes.subscriptions()
    killed = time.monotonic()
    os.kill(processes.relay.pid, signal.SIGKILL)
    processes.relay.wait()
    processes.start_relay()
    await asyncio.to_thread(wait_for_port, port, timeout_seconds=60)
    drill.relay_listening_seconds = time.monotonic() - killed
    await _until(lambda: processes.subscriptions() > subscribed, "subscribed to the new relay")
    drill.relay_resubscribed_seconds = time.monotonic() - killed
