"""The rooms benchmark's measure of the turn splitter: true change points inside a window
(both voices heard long enough), found by a cut near them, and cuts that are at one; and the
look-alike household: every stranger of a member's gender and age band."""

from __future__ import annotations

import numpy as np

from bench.changes import SplitLog, change_counts, change_summary, true_changes
from bench.household import Household, Segment, Stream, look_alikes
from monitor.audio.windows import SpeechWindow

TRUTH = (
    Segment("a", 0.0, 2.0),
    Segment("b", 2.1, 4.0),
    Segment("b", 4.2, 6.0),
    Segment("a", 6.05, 6.3),  # too short a voice to be a change the splitter could place
)


def _stream() -> Stream:
    return Stream(None, Household(("a",), ("b",)), TRUTH, 6.3, 16000)  # type: ignore[arg-type]


def test_true_change_points_need_both_voices_heard() -> None:
    assert true_changes(TRUTH, 0.5, 3.5) == [2.05]
    assert true_changes(TRUTH, 2.5, 5.5) == []  # one voice across an utterance boundary
    assert true_changes(TRUTH, 4.5, 6.3) == []  # a's 0.25 s is under the half second


def test_cuts_are_counted_found_and_right() -> None:
    def split(window: SpeechWindow) -> list[SpeechWindow]:
        return [window]

    log = SplitLog()
    log.watch(split)  # (the watched splitter records; here the windows are given directly)
    log.windows += [(0.5, 3.5, (2.3,)), (2.5, 5.5, (4.1,)), (0.0, 3.0, ())]
    counts = change_counts(_stream(), log)
    assert counts == {"change_points": 2, "changes_found": 1, "cuts": 2, "cuts_right": 1,
                      "clean_windows": 1, "clean_cut": 1}  # fmt: skip
    summary = change_summary([counts, counts])
    assert summary["change_recall"] == 0.5 and summary["change_precision"] == 0.5


def test_look_alike_strangers_share_a_members_group() -> None:
    groups = {f"s{i}": g for i, g in enumerate(["f-adult"] * 4 + ["m-child"] * 3 + ["m-teen"])}
    for seed in range(20):
        people = look_alikes(np.random.default_rng(seed), list(groups), groups, 2)
        members, strangers = people[:3], people[3:]
        assert len(set(people)) == 5 and "s7" not in strangers  # alone in its group
        assert all(groups[s] in {groups[m] for m in members} for s in strangers)
