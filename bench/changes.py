"""Changes of speaker inside a window, found or missed: the turn splitter measured on the true
change points of the benchmark's streams (recall and precision), not only as mixed windows.

Every window the daemon hands the splitter is recorded with the cuts it made (stream time).
A true change point is a boundary between two truth segments of different speakers inside
the window with at least ``SIDE_SECONDS`` of each voice's speech in the window (a voice's
0.1 s is no turn the splitter could place); a cut within ``TOLERANCE_SECONDS`` of one finds it.
A window's span in stream time includes the pauses its samples leave out, so a cut's time is
placed by speech time (as the splitter's pieces are) and the tolerance is generous. A window
whose truth holds one voice only (``clean``) should never be cut: those cut are counted apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.household import Segment, Stream, overlaps
from monitor.audio.windows import SpeechWindow

SIDE_SECONDS = 0.5
TOLERANCE_SECONDS = 0.75


@dataclass
class SplitLog:
    """Each split window's span and the stream times of its cuts."""

    windows: list[tuple[float, float, tuple[float, ...]]] = field(default_factory=list)

    def watch(self, split: Callable[..., list[SpeechWindow]]) -> Callable[..., list[SpeechWindow]]:
        """``split`` recording what it was given and where it cut."""

        def watched(window: SpeechWindow, *args: Any, **kwargs: Any) -> list[SpeechWindow]:
            pieces = split(window, *args, **kwargs)
            cuts = tuple(p.start_seconds for p in pieces[1:])
            self.windows.append((window.start_seconds, window.end_seconds, cuts))
            return pieces

        return watched


def true_changes(truth: Sequence[Segment], start: float, end: float) -> list[float]:
    """Change points inside [start, end) with ``SIDE_SECONDS`` of each voice in the window."""
    inside = [s for s in truth if s.end > start and s.start < end]
    points = []
    for before, after in itertools.pairwise(inside):
        if before.speaker == after.speaker:
            continue
        heard = overlaps(truth, start, end)
        if min(heard[before.speaker], heard[after.speaker]) >= SIDE_SECONDS:
            points.append((before.end + after.start) / 2)
    return points


def change_counts(stream: Stream, log: SplitLog) -> dict[str, int]:
    """True change points, those found, cuts made and cuts at a true change, over ``log``; the
    windows of one voice only the splitter looked at, and those it cut."""
    truths = found = cuts = right = clean = clean_cut = 0
    for start, end, made in log.windows:
        points = np.asarray(true_changes(stream.truth, start, end))
        made_at = np.asarray(made)
        truths += points.size
        cuts += made_at.size
        one_voice = len(overlaps(stream.truth, start, end)) == 1
        clean += one_voice
        clean_cut += one_voice and made_at.size > 0
        if points.size and made_at.size:
            near = np.abs(points[:, None] - made_at[None, :]) <= TOLERANCE_SECONDS
            found += int(near.any(axis=1).sum())
            right += int(near.any(axis=0).sum())
    return {"change_points": truths, "changes_found": found, "cuts": cuts, "cuts_right": right,
            "clean_windows": clean, "clean_cut": clean_cut}  # fmt: skip


def change_summary(counts: Sequence[dict[str, int]]) -> dict[str, float]:
    """Recall and precision of the change points over streams' :func:`change_counts`."""
    total = {k: sum(c.get(k, 0) for c in counts) for k in ("change_points", "changes_found",
             "cuts", "cuts_right", "clean_windows", "clean_cut")}  # fmt: skip
    return {
        **{k: float(v) for k, v in total.items()},
        "change_recall": total["changes_found"] / max(total["change_points"], 1),
        "change_precision": total["cuts_right"] / max(total["cuts"], 1),
    }
