"""A real PulseAudio daemon whose null sink ``vmic`` is a virtual microphone (DESIGN Part C).

Works as root on a machine without a sound card. Anything played into the sink with
:meth:`PulseAudio.play` comes back on its monitor source, which is the default source, so
``sounddevice`` records it from the ALSA device ``"pulse"`` (``MicrophoneSource(device="pulse")``).

Fixtures (registered by tests/conftest.py):

- ``pulseaudio`` (session-scoped): one daemon for the whole run; tests that only record share it.
  The test process gets ``PULSE_SERVER`` pointing at it and PortAudio is re-initialised so the
  ``pulse`` device is listed; one short recording warms the daemon up, so a test's stream starts
  at once. Skips only when the PulseAudio binaries are missing.
- :func:`start_pulseaudio` (context manager): a private daemon for a test that must kill or
  restart it (device loss); it does not touch the shared daemon's directories.

Both tear everything down: keep-alive stream and daemon killed, directories removed, environment
restored, PortAudio re-initialised.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.realparts import stop_process

SINK = "vmic"
RATE_HZ = 16000
START_TIMEOUT_SECONDS = 30.0


def reinitialise_portaudio() -> None:
    """Make PortAudio list devices again: it enumerates ALSA/Pulse devices only at start-up."""
    import sounddevice as sd

    sd._terminate()
    sd._initialize()


@dataclass
class PulseAudio:
    """A running daemon: the sounddevice name to record from, and how to play into it."""

    root: Path
    server: str
    """``unix:`` address, the value of ``PULSE_SERVER`` for clients."""
    device: str = "pulse"
    """The sounddevice (ALSA) input device that records the virtual microphone."""
    sink: str = SINK
    daemon: subprocess.Popen[bytes] | None = None
    keepalive: subprocess.Popen[bytes] | None = None
    players: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """Environment for a client process (pactl, paplay) talking to this daemon."""
        return {**os.environ, "PULSE_SERVER": self.server, "HOME": str(self.root / "home")}

    def pactl(self, *args: str) -> str:
        done = subprocess.run(
            ["pactl", *args], env=self.env, capture_output=True, text=True, timeout=10
        )
        if done.returncode != 0:
            raise RuntimeError(f"pactl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def play(self, path: str | os.PathLike[str], *, wait: bool = True) -> subprocess.Popen[bytes]:
        """Play an audio file into the virtual microphone (``paplay --device=vmic``)."""
        player = subprocess.Popen(
            ["paplay", f"--device={self.sink}", str(path)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.players.append(player)
        if wait:
            _, err = player.communicate(timeout=60)
            if player.returncode != 0:
                raise RuntimeError(f"paplay {path} failed: {err.decode(errors='replace').strip()}")
        return player

    @property
    def running(self) -> bool:
        return self.daemon is not None and self.daemon.poll() is None

    def start(self) -> None:
        """Start the daemon, the null sink, the defaults and the keep-alive stream."""
        for sub in ("home", "xdg"):
            (self.root / sub).mkdir(mode=0o700, exist_ok=True)
        socket = self.root / "xdg" / "native"
        log = open(self.root / "daemon.log", "ab")  # noqa: SIM115 - lives as long as the daemon
        self.daemon = subprocess.Popen(
            [
                "pulseaudio",
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--use-pid-file=no",
                "-L",
                f"module-native-protocol-unix auth-anonymous=1 socket={socket}",
                "-L",
                f"module-null-sink sink_name={SINK} rate={RATE_HZ} channels=1 format=s16le",
            ],
            env={
                **os.environ,
                "HOME": str(self.root / "home"),
                "XDG_RUNTIME_DIR": str(self.root / "xdg"),
            },
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"pulseaudio exited at start: {self.log_tail()}")
            try:
                self.pactl("info")
                break
            except (RuntimeError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pulseaudio did not answer: {self.log_tail()}") from None
                time.sleep(0.1)
        self.pactl("set-default-source", f"{SINK}.monitor")
        self.pactl("set-default-sink", SINK)
        # Without a stream playing, the idle sink is suspended and a file's first ~30 ms are lost.
        self.keepalive = subprocess.Popen(
            [
                "pacat",
                "--playback",
                f"--device={SINK}",
                f"--rate={RATE_HZ}",
                "--channels=1",
                "--format=s16le",
                "/dev/zero",
            ],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def warm_up(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Record until the first block arrives: a new daemon's first capture takes ~2 s."""
        import sounddevice as sd

        arrived = threading.Event()
        with sd.InputStream(
            device=self.device,
            samplerate=RATE_HZ,
            channels=1,
            dtype="int16",
            callback=lambda *_: arrived.set(),
        ):
            if not arrived.wait(timeout):
                raise RuntimeError(f"no audio from {self.device!r}: {self.log_tail()}")

    def kill(self) -> None:
        """Stop players, keep-alive stream and daemon (SIGKILL for the daemon: a lost device)."""
        for proc in [*self.players, self.keepalive]:
            _stop(proc, signal.SIGTERM)
        self.players.clear()
        self.keepalive = None
        _stop(self.daemon, signal.SIGKILL)
        self.daemon = None

    def log_tail(self, chars: int = 2000) -> str:
        path = self.root / "daemon.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def _stop(proc: subprocess.Popen[bytes] | None, sig: signal.Signals) -> None:
    stop_process(proc, sig=sig)


def pulseaudio_missing() -> str | None:
    """Why PulseAudio cannot start here, or ``None`` if its binaries are installed."""
    missing = [b for b in ("pulseaudio", "pactl", "pacat", "paplay") if shutil.which(b) is None]
    if missing:
        return f"PulseAudio binaries missing: {', '.join(missing)} (apt-get install pulseaudio)"
    return None


@contextlib.contextmanager
def start_pulseaudio() -> Iterator[PulseAudio]:
    """Run a private daemon; set ``PULSE_SERVER`` for this process while it lives."""
    reason = pulseaudio_missing()
    if reason:
        pytest.skip(reason)
    # A short path: the unix socket path must stay under 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="vxpa-"))
    root.chmod(0o700)
    pulse = PulseAudio(root=root, server=f"unix:{root / 'xdg' / 'native'}")
    saved = os.environ.get("PULSE_SERVER")
    try:
        pulse.start()
        os.environ["PULSE_SERVER"] = pulse.server
        reinitialise_portaudio()
        pulse.warm_up()
        yield pulse
    finally:
        pulse.kill()
        if saved is None:
            os.environ.pop("PULSE_SERVER", None)
        else:
            os.environ["PULSE_SERVER"] = saved
        shutil.rmtree(root, ignore_errors=True)
        reinitialise_portaudio()


@pytest.fixture(scope="session")
def pulseaudio() -> Iterator[PulseAudio]:
    """One PulseAudio daemon with the ``vmic`` virtual microphone for the whole test session."""
    with start_pulseaudio() as pulse:
        yield pulse
