"""Fixtures that start real services on 127.0.0.1 (one module per service), and their helper."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def stop_process(
    process: subprocess.Popen[Any] | None,
    *,
    sig: signal.Signals = signal.SIGTERM,
    grace_seconds: float = 10.0,
) -> None:
    """Ask ``process`` to stop with ``sig``; kill it if it is still there after the grace time
    (a loaded machine can take seconds), so no test ever leaves a service behind."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
