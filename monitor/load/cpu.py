"""The daemon's own CPU cost per stage, so that a user sees what voxmeter takes beside the
assistant (``voxmeter_cpu_seconds_total{stage}``).

Each stage runs on threads of its own, so a stage's cost is its threads' CPU time, read from
the kernel's per-thread clocks at each stats interval (never per frame):

- ``vad``: the frame VAD, on the event-loop thread (its calls timed with the thread's clock);
- ``loop``: the rest of the event-loop thread: framing, windowing, moving messages, the
  tracker, the ledger and the exporters;
- ``feeder``: features computed while a window fills, and turn changes (``voxmeter-feed``);
- ``workers``: what a window's end leaves (the embedding network, phone decoding's end),
  and scoring (``voxmeter-work``).

Seconds count from the start of the run (model loading and warm-up are not the daemon's
running cost); a thread that ended keeps what it had.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping

STAGES: tuple[str, ...] = ("vad", "loop", "feeder", "workers")
"""Every ``stage`` label, in the order the module docstring explains them."""

HELP = (
    "The daemon's own CPU seconds per stage (thread CPU time since start): vad (the frame VAD), "
    "loop (the rest of the event-loop thread: framing, windows, tracker, ledger, exporters), "
    "feeder (features while a window fills, turn changes), workers (features at a window's "
    "end, scoring)."
)
"""``voxmeter_cpu_seconds_total{stage}``'s help text."""

THREAD_PREFIXES: Mapping[str, str] = {"feeder": "voxmeter-feed", "workers": "voxmeter-work"}
"""The pool threads of each stage by name prefix (the pools' ``thread_name_prefix``)."""

_TASKS = "/proc/self/task"
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class StageCpu:
    """CPU seconds per stage since :meth:`start` (call both on the event-loop thread)."""

    def __init__(self) -> None:
        self.vad = 0.0  # thread CPU seconds of the VAD's calls, added by the VAD stage
        self._loop_start = 0.0
        self._base: dict[int, float] = {}  # native thread id -> its CPU at start
        self._last: dict[int, tuple[str, float]] = {}  # native thread id -> (stage, seconds)

    def start(self) -> None:
        """The run starts now: what every thread has spent so far is not counted."""
        self._loop_start = time.thread_time()
        self._base = {tid: seconds for tid, (_, seconds) in self._pools().items()}
        self._last = {}

    def seconds(self) -> dict[str, float]:
        """Every stage's CPU seconds since :meth:`start` (on the event-loop thread)."""
        loop = time.thread_time() - self._loop_start
        self._last.update(
            (tid, (stage, seconds - self._base.get(tid, 0.0)))
            for tid, (stage, seconds) in self._pools().items()
        )
        out = {"vad": self.vad, "loop": max(0.0, loop - self.vad), "feeder": 0.0, "workers": 0.0}
        for stage, seconds in self._last.values():
            out[stage] += max(0.0, seconds)
        return out

    @staticmethod
    def _pools() -> dict[int, tuple[str, float]]:
        """native id -> (stage, CPU seconds) of each live pool thread (Linux; else none)."""
        found = {}
        for thread in threading.enumerate():
            stage = next((s for s, p in THREAD_PREFIXES.items() if thread.name.startswith(p)), "")
            if not stage or thread.native_id is None:
                continue
            try:  # three system calls, not pathlib's and io's dozen: this runs every interval
                handle = os.open(f"{_TASKS}/{thread.native_id}/stat", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    stat = os.read(handle, 4096)
                finally:
                    os.close(handle)
            except OSError:  # ended meanwhile, or no /proc: its last reading stays
                continue
            values = stat.rsplit(b")", 1)[1].split()
            found[thread.native_id] = (stage, (int(values[11]) + int(values[12])) / _TICK)
        return found
