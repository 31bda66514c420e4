"""The exit watchdog of ``voxmeter run``: after SIGTERM/SIGINT the daemon leaves within
:data:`EXIT_DEADLINE_SECONDS`, by force if its own stop path is stuck (moved out of
:mod:`monitor.daemon.pipeline`, which re-exports it)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


#: SIGTERM must end ``voxmeter run`` within 2 s (systemd, containers): past this, by force.
EXIT_DEADLINE_SECONDS = 1.75


class Timer(Protocol):
    """What :class:`ExitWatchdog` needs of :class:`threading.Timer`."""

    def start(self) -> None: ...


def _daemon_timer(seconds: float, function: Callable[[], None]) -> Timer:
    """A daemon thread that calls ``function`` after ``seconds`` (the watchdog's default)."""
    timer = threading.Timer(seconds, function)
    timer.daemon = True
    return timer


def _exit_now(status: int) -> None:
    """Flush the logs and leave the process at once (no cleanup: it is what failed to end)."""
    logging.shutdown()
    os._exit(status)


class ExitWatchdog:
    """After a stop signal, leave the process by force if it is still here ``deadline_seconds``
    later. A thread, so a stuck event loop cannot hold it up; every window is committed by then.

    The exit status is 1: a stop that the daemon's own path finished exits 0. The timer factory
    and the exit function are arguments so tests arm it without ending the test process.
    """

    def __init__(
        self,
        deadline_seconds: float = EXIT_DEADLINE_SECONDS,
        *,
        timer: Callable[[float, Callable[[], None]], Timer] = _daemon_timer,
        exit: Callable[[int], object] = _exit_now,
    ) -> None:
        self.deadline_seconds = deadline_seconds
        self._timer = timer
        self._exit = exit
        self.reason: str | None = None  # the signal that armed it; None until then

    def arm(self, reason: str) -> None:
        """Start the countdown (once: a second signal does not move the deadline)."""
        if self.reason is None:
            self.reason = reason
            self._timer(self.deadline_seconds, self._fire).start()

    def _fire(self) -> None:
        logger.error(
            "still running %.2f s after %s: exiting now", self.deadline_seconds, self.reason
        )
        self._exit(1)
