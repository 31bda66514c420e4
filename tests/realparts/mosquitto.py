"""A real Debian mosquitto broker on a free loopback port, with stop()/kill()/start() for outages.

Use the ``mosquitto`` fixture (marker ``mosquitto``). The broker keeps its port across
``stop()``/``start()`` so a client that reconnects finds it again; ``persistence false`` means a
restarted broker has forgotten everything, like a broker that crashed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.realparts import stop_process


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, *, timeout_seconds: float = 10.0, up: bool = True) -> None:
    """Block until 127.0.0.1:port accepts connections (``up``) or refuses them (not ``up``)."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                listening = True
        except OSError:
            listening = False
        if listening == up:
            return
        time.sleep(0.05)
    state = "listening" if up else "closed"
    raise TimeoutError(f"127.0.0.1:{port} not {state} after {timeout_seconds} s")


@dataclass
class MosquittoBroker:
    """One mosquitto process; ``host``/``port`` stay the same across restarts."""

    directory: Path
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    persistent: bool = False  # keep sessions and queued messages across restarts (on disk)
    extra_config: str = ""  # appended to mosquitto.conf: more listeners (TLS), their options
    process: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "mosquitto.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "mosquitto.log"

    def start(self) -> None:
        """Start the broker (again) and wait until it accepts connections."""
        if self.process is not None and self.process.poll() is None:
            return
        persistence = (
            f"persistence true\npersistence_location {self.directory}/\n"
            if self.persistent
            else "persistence false\n"
        )
        # Run as root, mosquitto drops to the `mosquitto` user, which cannot write its log or
        # its persistence file into a test's private (0700) folder: keep the caller's user.
        user = "user root\n" if os.geteuid() == 0 else ""
        self.config_path.write_text(
            f"listener {self.port} {self.host}\n"
            f"{user}"
            "allow_anonymous true\n"
            f"{persistence}"
            f"log_dest file {self.log_path}\n"
            "log_type error\nlog_type warning\nlog_type notice\n"
            f"{self.extra_config}"
        )
        self.process = subprocess.Popen(
            [shutil.which("mosquitto") or "mosquitto", "-c", str(self.config_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    def stop(self) -> None:
        """Terminate the broker (an outage) and wait until the port is closed."""
        if self.process is None:
            return
        stop_process(self.process)
        self.process = None
        wait_for_port(self.port, up=False)

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no goodbye to its clients) and wait for the port."""
        if self.process is None:
            return
        stop_process(self.process, sig=signal.SIGKILL)
        self.process = None
        wait_for_port(self.port, up=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@pytest.fixture
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MosquittoBroker]:
    """A running broker, stopped after the test; skips where mosquitto is not installed."""
    if shutil.which("mosquitto") is None:
        pytest.skip("mosquitto is not installed (apt-get install mosquitto)")
    broker = MosquittoBroker(tmp_path_factory.mktemp("mosquitto"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
