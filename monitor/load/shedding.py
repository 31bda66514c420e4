"""A guest that fits its host: the measuring side sheds work instead of falling behind, and runs
at a lower CPU priority than the relay.

**Shedding.** The measuring side's lag is how long ago the oldest piece of audio it still has to
process arrived (speech waiting for the feeder thread) or the oldest window still waiting for
its features closed: on a live source it grows without bound when the device cannot keep up. Above
``load.shed_lag_seconds`` the daemon stops decoding phones; above twice that it also stops
refining windows at changes of speaker (the turn splitter's part embeddings); the embedding
disclosure of a window is never shed. Each level is left once the lag falls below half the lag
that started it, so the daemon catches up when the speech pauses and then measures everything
again. A window whose phones were shed carries an empty phone observation (no counts, 0 s): it
adds nothing to its track's pooled phone evidence and its own phone figure is 0 bits — absent,
not invented — and the track's phone figure is flagged ``extrapolated`` (its evidence is
shorter than the speech it is scored at). Shed work is counted in seconds of speech per
feature (``voxmeter_shed_seconds_total{feature}``), and entering or leaving a level is logged.
Only sources whose audio arrives in real time shed: a fast file replay has no audio clock to
fall behind, nor has a client that pushes audio faster than real time (judged over the last
10 s).

**Priority.** Linux schedules threads, not processes: :func:`lower_this_thread` gives the
calling thread ``SCHED_IDLE`` (``load.measuring_priority = "idle"``: it runs only when a core
has nothing else to do) or nice 19 (``"nice"``), and :func:`measuring_executor` makes thread
pools whose threads do so as they start. The feature threads (``voxmeter-feed``,
``voxmeter-work``) are such pools; the event loop thread, which relays a Wyoming conversation,
keeps its normal priority. A fast file replay (``--fast``, ``audio.pace = "fast"``) is a batch
job with no live audio to keep up with: it runs at normal priority and never sheds. (A process
in a cgroup of its own competes with other cgroups at the cgroup's weight: for a systemd unit,
``CPUWeight=`` ranks the whole service.)
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from monitor.features.base import Feature, Observation
from monitor.settings.sections import LoadSettings

logger = logging.getLogger(__name__)

SHED_ORDER: tuple[str, ...] = ("phone", "turns")
"""What is shed first, then next, as the lag grows (level 1 sheds the first, level 2 both)."""

PRIORITIES: tuple[str, ...] = ("idle", "nice", "normal")

HISTORY_SECONDS = 10.0  # how far back the source's pace is judged
HISTORY_STEP_SECONDS = 0.5
FASTER = 1.5  # audio this many times faster than real time is a replay, not live audio

NICE = 19


def lower_this_thread(priority: str) -> str:
    """Give the calling thread ``priority`` (idle, nice or normal); returns what it got (a
    kernel without ``SCHED_IDLE`` gets nice 19; one refusing both keeps normal, logged)."""
    if priority == "normal":
        return "normal"
    tid = threading.get_native_id()
    if priority == "idle" and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: this thread
            return "idle"
        except OSError as error:
            logger.debug("SCHED_IDLE refused for thread %d (%s): nice %d instead", tid, error, NICE)
    try:
        os.setpriority(os.PRIO_PROCESS, tid, NICE)  # a thread id: this thread only (Linux)
    except OSError as error:
        logger.warning("measuring thread %d keeps normal priority: %s", tid, error)
        return "normal"
    return "nice"


def measuring_executor(workers: int, prefix: str, priority: str) -> ThreadPoolExecutor:
    """A thread pool for measuring work whose threads take ``priority`` as they start."""
    return ThreadPoolExecutor(
        max_workers=workers,
        thread_name_prefix=prefix,
        initializer=lower_this_thread,
        initargs=(priority,),
    )


class LoadShedder:
    """The shedding level from the measuring side's lag, and the seconds shed per feature.

    Thread-safe: the loop thread notes audio handed to the feeder (:meth:`submitted`) and the
    windows closed and done (:meth:`window_closed`, :meth:`window_done`), the feeder notes its
    audio done (:meth:`processed`), and both ask :meth:`sheds`.
    """

    def __init__(
        self,
        settings: LoadSettings,
        *,
        live: bool = True,
        clock: Callable[[], float],
        audio_seconds: Callable[[], float] | None = None,
    ) -> None:
        self.start_seconds = settings.shed_lag_seconds
        self.enabled = live and self.start_seconds > 0
        # a fast replay is a batch job the user waits for: it keeps normal priority
        self.priority = settings.measuring_priority if live else "normal"
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: deque[float] = deque()  # arrival times of audio the feeder has not done
        self._windows: deque[float] = deque()  # close times of windows whose features are due
        self._audio_seconds = audio_seconds  # the source's audio so far: its clock
        self._history: deque[tuple[float, float]] = deque()  # (monotonic, audio seconds)
        self.level = 0  # how many of SHED_ORDER are shed now
        self.lag_seconds = 0.0
        self.max_lag_seconds = 0.0
        self.shed_seconds: dict[str, float] = dict.fromkeys(SHED_ORDER, 0.0)

    def submitted(self, since: float | None = None) -> None:
        """Audio was handed to the feeder now (loop thread); ``since``: when the oldest of it
        arrived, if the loop held it a while."""
        self._pending.append(self._clock() if since is None else since)

    def processed(self) -> None:
        """The feeder finished the oldest audio handed to it (feeder thread)."""
        if self._pending:
            self._pending.popleft()
        self.update()

    def window_closed(self, closed_monotonic: float) -> None:
        """A window closed at ``closed_monotonic`` goes to the feature stage (loop thread)."""
        self._windows.append(closed_monotonic)

    def window_done(self) -> None:
        """The feature stage finished its oldest window (loop thread)."""
        if self._windows:
            self._windows.popleft()
        self.update()

    def reset(self) -> None:
        """The measuring side restarts (:mod:`monitor.daemon.measuring`): what was in flight
        is lost, the level and the counts are kept."""
        self._pending.clear()
        self._windows.clear()

    def update(self) -> int:
        """The level for the lag now (also called every second by the stats stage, so that an
        idle daemon leaves shedding)."""
        if not self.enabled:
            return 0
        now = self._clock()
        audio = self._pending[0] if self._pending else now
        window = self._windows[0] if self._windows else now
        lag = max(0.0, now - min(audio, window))
        with self._lock:
            if self._faster_than_real_time(now):
                lag = 0.0  # a replay pushed as fast as it is read: no live audio to lag
            self.lag_seconds = lag
            self.max_lag_seconds = max(self.max_lag_seconds, lag)
            level = self.level
            while level < len(SHED_ORDER) and lag >= (level + 1) * self.start_seconds:
                level += 1
            while level > 0 and lag < level * self.start_seconds / 2:
                level -= 1
            if level != self.level:
                self._log(level, lag)
                self.level = level
        return level

    def _faster_than_real_time(self, now: float) -> bool:
        """Has the source delivered audio faster than real time over the last seconds (a
        client streaming a file unpaced)? Live audio comes at 1 s per second."""
        if self._audio_seconds is None:
            return False
        history = self._history
        if not history or now - history[-1][0] >= HISTORY_STEP_SECONDS:
            history.append((now, self._audio_seconds()))
        while len(history) > 2 and now - history[1][0] >= HISTORY_SECONDS:
            history.popleft()
        (then, first), (_, last) = history[0], history[-1]
        span = now - then
        return span >= HISTORY_STEP_SECONDS and last - first > FASTER * span

    def _log(self, level: int, lag: float) -> None:
        if level > self.level:
            logger.warning(
                "measuring lags %.1f s behind the audio: shedding %s (order: %s; never the "
                "embedding)",
                lag,
                ", ".join(SHED_ORDER[:level]),
                ", ".join(SHED_ORDER),
            )
        elif level == 0:
            logger.warning(
                "measuring caught up (lag %.1f s): shedding ends; shed so far %s",
                lag,
                ", ".join(f"{k} {v:.1f} s" for k, v in self.shed_seconds.items()),
            )
        else:
            logger.warning(
                "measuring lag down to %.1f s: shedding only %s", lag, ", ".join(SHED_ORDER[:level])
            )

    def sheds(self, feature: str) -> bool:
        """Is ``feature`` (``phone`` or ``turns``) shed now?"""
        return feature in SHED_ORDER[: self.level]

    def count(self, feature: str, seconds: float) -> None:
        """``seconds`` of speech went without ``feature``."""
        with self._lock:
            self.shed_seconds[feature] = self.shed_seconds.get(feature, 0.0) + seconds


class AbsentStream:
    """The stream of a feature shed for a window: nothing observed (no counts, 0 s of speech),
    which pools as nothing and scores as 0 bits."""

    def __init__(self, feature: Feature) -> None:
        self.feature = feature

    def feed(self, audio: np.ndarray) -> None:
        """Nothing is measured."""

    def finish(self) -> Observation:
        return Observation(self.feature.name, np.zeros(self.feature.dimension), 0.0)
