"""The measuring side of the daemon (VAD → features → tracker → scorer → ledger) under one
supervisor, so that a failure there never ends a relay.

Without a relay, a failing stage ends the daemon: the error reaches the CLI (one line for a
user error, the traceback for a bug), and systemd restarts the process with its own capped
backoff (``RestartSec``, ``StartLimitBurst``). Where the source relays a live conversation to
an upstream service (the Wyoming proxy: Home Assistant's pipeline talks through us), ending the
process would cut the assistant off, which the measurement must never do. There the failure is
logged (with its traceback when it is not a user error), counted
(``voxmeter_measuring_restarts_total``), the measuring state is reset (what was in flight is
lost; the ledger keeps every window committed before), and the stages start again after a
random capped backoff, while the relay goes on: what the measuring side cannot take meanwhile
is dropped by the source's side tap and counted in seconds, as for a slow extractor.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from monitor.audio.frames import backoff_seconds
from monitor.errors import VoxmeterError

logger = logging.getLogger(__name__)

Stages = Callable[[], Sequence[tuple[str, Coroutine[Any, Any, None]]]]
"""Fresh coroutines of the measuring stages, named, for each (re)start."""

RESTART_INITIAL_SECONDS = 1.0
RESTART_MAX_SECONDS = 60.0
HEALTHY_SECONDS = 60.0
"""A measuring side that ran this long before failing restarts from the shortest backoff."""


class MeasuringSupervisor:
    """Runs the measuring stages in a TaskGroup of their own; restarts them after a failure
    when ``restart`` (the source relays), else lets the failure end the daemon."""

    def __init__(
        self,
        *,
        restart: bool,
        reset: Callable[[], Awaitable[None]],
        initial_seconds: float = RESTART_INITIAL_SECONDS,
        max_seconds: float = RESTART_MAX_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.restart = restart
        self._reset = reset
        self.initial_seconds = initial_seconds
        self.max_seconds = max_seconds
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.restarts = 0  # failures survived since start (a Prometheus counter)

    async def run(self, stages: Stages) -> None:
        """Until the stages end (end of input), are cancelled (the daemon stops), or fail
        where no restart is allowed."""
        attempt = 0
        while True:
            started = self._clock()
            try:
                async with asyncio.TaskGroup() as group:
                    for name, coroutine in stages():
                        group.create_task(_named(name, coroutine), name=f"voxmeter.{name}")
                return
            except ExceptionGroup as failure:
                if not self.restart:
                    raise
                healthy = self._clock() - started >= HEALTHY_SECONDS
                attempt = 1 if healthy else attempt + 1
                delay = backoff_seconds(self._rng, attempt, self.initial_seconds, self.max_seconds)
                self.restarts += 1
                _log_failure(failure, delay)
            await self._sleep(delay)
            await self._reset()


async def _named(name: str, coroutine: Coroutine[Any, Any, None]) -> None:
    """``coroutine``, its failure noted with the stage's name (for the log line)."""
    try:
        await coroutine
    except Exception as error:
        error.add_note(f"in the {name} stage")
        raise


def _log_failure(failure: ExceptionGroup, delay: float) -> None:
    """One line per failed stage; a traceback only for what is not a user error (a bug)."""
    for error in leaves(failure):
        notes = getattr(error, "__notes__", ())
        where = next((n for n in notes if n.startswith("in the")), "in a stage")
        message = (
            "measuring failed %s: %s; the relay goes on, measuring restarts in %.1f s "
            "(what was in flight is lost)"
        )
        if isinstance(error, VoxmeterError):
            logger.error(message, where, error, delay)
        else:
            logger.error(message, where, repr(error), delay, exc_info=error)


def leaves(error: BaseException) -> list[BaseException]:
    """The single exceptions inside (nested) exception groups, in order."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


#: How long a stopping supervisor lets cancelled tasks clean up (say offline to the broker,
#: close the metrics server) before it cancels those still running again.
CANCEL_RETRY_SECONDS = 2.0


async def cancel_until_done(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and repeat for those still running: a task may swallow one
    cancellation (``asyncio.wait_for`` does when its inner future completes in the same loop
    turn, cpython gh-86296, e.g. inside a library) and would otherwise keep the TaskGroup, and
    the daemon, waiting for ever."""
    pending = [t for t in tasks if not t.done()]
    while pending:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=CANCEL_RETRY_SECONDS)
        pending = [t for t in pending if not t.done()]
