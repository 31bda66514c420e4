"""Windower: windows hold exactly ``window_seconds`` of speech, cut across chunks and pauses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.audio.frames import RATE_HZ
from monitor.audio.vad import SpeechChunk
from monitor.audio.windows import SpeechWindow, Windower


def make_chunks(lengths: list[int], pauses: list[int]) -> list[SpeechChunk]:
    """Chunks of consecutive sample values (so every sample is identifiable) with pauses."""
    chunks, value, time_samples = [], 0, 0
    for length, pause in zip(lengths, pauses, strict=True):
        time_samples += pause
        samples = (np.arange(value, value + length) % 30000).astype(np.int16)
        chunks.append(
            SpeechChunk(samples, time_samples / RATE_HZ, (time_samples + length) / RATE_HZ)
        )
        value += length
        time_samples += length
    return chunks


def reference_times(chunks: list[SpeechChunk], first: int, n: int) -> tuple[float, float]:
    """Stream time of speech sample ``first`` and just after sample ``first + n - 1``."""
    times = np.concatenate(
        [c.start_seconds + np.arange(c.samples.shape[0]) / RATE_HZ for c in chunks]
    )
    return float(times[first]), float(times[first + n - 1] + 1 / RATE_HZ)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 9000), min_size=1, max_size=25),
    pause=st.integers(0, 4000),
    window_seconds=st.sampled_from([0.1, 0.25, 0.5]),
)
def test_windows_partition_the_speech(
    lengths: list[int], pause: int, window_seconds: float
) -> None:
    chunks = make_chunks(lengths, [pause] * len(lengths))
    windower = Windower(window_seconds)
    windows: list[SpeechWindow] = []
    for chunk in chunks:
        windows += windower.process(chunk)
    n = round(window_seconds * RATE_HZ)
    total = sum(lengths)
    assert len(windows) == total // n
    assert windower.pending_seconds == pytest.approx((total % n) / RATE_HZ)
    windows += windower.flush()
    speech = np.concatenate([c.samples for c in chunks]).astype(np.float32) / 32768
    np.testing.assert_array_equal(np.concatenate([w.samples for w in windows]), speech)
    first = 0
    for w in windows:
        size = w.samples.shape[0]
        assert w.samples.dtype == np.float32
        assert w.speech_seconds == pytest.approx(size / RATE_HZ)
        start, end = reference_times(chunks, first, size)
        assert w.start_seconds == pytest.approx(start)
        assert w.end_seconds == pytest.approx(end)
        assert w.end_seconds - w.start_seconds >= w.speech_seconds - 1e-9
        first += size
    assert all(w.samples.shape[0] == n for w in windows[:-1])


def test_one_long_chunk_gives_several_windows() -> None:
    chunk = make_chunks([RATE_HZ * 7 + 5], [RATE_HZ])[0]
    windower = Windower(3.0)
    windows = windower.process(chunk)
    assert [(w.start_seconds, w.end_seconds) for w in windows] == [(1.0, 4.0), (4.0, 7.0)]
    assert windower.pending_seconds == pytest.approx(1 + 5 / RATE_HZ)


def test_flush_minimum_and_reset() -> None:
    windower = Windower(3.0)
    windower.process(make_chunks([RATE_HZ // 2], [0])[0])
    assert windower.flush(min_seconds=1.0) == []
    assert windower.pending_seconds == 0
    windower.process(make_chunks([RATE_HZ * 2], [0])[0])
    (short,) = windower.flush(min_seconds=1.0)
    assert short.speech_seconds == pytest.approx(2.0)
    windower.process(make_chunks([RATE_HZ], [0])[0])
    windower.reset()
    assert windower.flush() == []


def test_bad_window_length() -> None:
    with pytest.raises(ValueError, match="window_seconds"):
        Windower(0)


def test_a_turn_pause_ends_the_window_early() -> None:
    # 1.5 s of speech, a 0.5 s pause (a turn may change hands), 2 s, a 0.1 s pause, 2 s
    chunks = make_chunks([24000, 32000, 32000], [0, 8000, 1600])
    windower = Windower(3.0, turn_pause_seconds=0.3, min_window_seconds=1.0)
    windows = [w for c in chunks for w in windower.process(c)]
    # the first turn closes short at the pause; the short pause does not end the second one
    assert [w.speech_seconds for w in windows] == [1.5, 3.0]
    assert windows[0].start_seconds == 0.0 and windows[0].end_seconds == pytest.approx(1.5)
    assert windows[1].start_seconds == pytest.approx(2.0)
    assert windower.pending_seconds == pytest.approx(1.0)
    # without turn pauses the same speech fills windows across the pause
    plain = Windower(3.0)
    assert [w.speech_seconds for w in (w for c in chunks for w in plain.process(c))] == [3.0]
    assert plain.pending_seconds == pytest.approx(2.5)


def test_close_turn_scores_a_second_or_more_and_counts_less() -> None:
    windower = Windower(3.0, turn_pause_seconds=0.3)
    windower.process(make_chunks([RATE_HZ // 2], [0])[0])
    assert windower.close_turn(min_seconds=1.0) == []
    assert windower.dropped_seconds == pytest.approx(0.5) and windower.pending_seconds == 0
    windower.process(make_chunks([RATE_HZ * 2], [0])[0])
    (short,) = windower.close_turn(min_seconds=1.0)
    assert short.speech_seconds == 2.0 and not short.mixed
    assert windower.close_turn() == [] and windower.dropped_seconds == pytest.approx(0.5)
    # a pause shorter than a window ending a turn below the minimum drops that speech too
    first, second = make_chunks([RATE_HZ // 4, RATE_HZ * 3], [0, RATE_HZ])
    assert windower.process(first) == []
    (window,) = windower.process(second)
    assert window.start_seconds == pytest.approx(1.25)
    assert windower.dropped_seconds == pytest.approx(0.75)


def test_a_turn_that_ends_closes_a_short_window_from_one_second_of_speech() -> None:
    windower = Windower(3.0)
    speech = np.arange(round(1.4 * RATE_HZ), dtype=np.int16)
    assert windower.process(SpeechChunk(speech, 5.0, 6.4)) == []
    (window,) = windower.close_turn()
    assert window.speech_seconds == pytest.approx(1.4)
    assert (window.start_seconds, window.end_seconds) == (5.0, pytest.approx(6.4))
    np.testing.assert_array_equal(window.samples, speech.astype(np.float32) / 32768)
    assert windower.pending_seconds == 0.0
    windower.process(SpeechChunk(speech[: round(0.9 * RATE_HZ)], 9.0, 9.9))
    assert windower.close_turn() == []  # under 1 s: counted as speech seconds only, no window
    assert windower.pending_seconds == 0.0
    windower.process(SpeechChunk(np.zeros(4 * RATE_HZ, dtype=np.int16), 12.0, 16.0))
    (rest,) = windower.close_turn()  # the full window went out before; its 1 s remainder here
    assert rest.speech_seconds == pytest.approx(1.0)


def test_windows_of_one_turn_continue_and_a_pause_starts_a_new_turn() -> None:
    chunks = make_chunks([RATE_HZ * 7, RATE_HZ * 4], [0, RATE_HZ])  # 7 s, a 1 s pause, 4 s
    windower = Windower(3.0, turn_pause_seconds=0.3)
    windows = [w for c in chunks for w in windower.process(c)] + windower.close_turn()
    assert [w.speech_seconds for w in windows] == [3.0, 3.0, 1.0, 3.0, 1.0]
    assert [w.continues for w in windows] == [False, True, True, False, True]


def test_a_turns_last_window_takes_its_short_tail() -> None:
    """With tail_seconds, 7 s of one turn are 3 s + 4 s, not 3 + 3 + a 1 s remainder."""
    windower = Windower(3.0, turn_pause_seconds=0.3, tail_seconds=2.0)
    speech = SpeechChunk(np.ones(7 * RATE_HZ, np.int16), 0.0, 7.0)
    cut = windower.process(speech)
    assert [w.speech_seconds for w in cut] == [3.0]
    last = windower.close_turn()
    assert [w.speech_seconds for w in last] == [4.0] and last[0].continues
    assert last[0].start_seconds == 3.0 and last[0].end_seconds == 7.0
    # 8 s: 3 + 3 + 2 (the tail never falls below 2 s)
    windower = Windower(3.0, turn_pause_seconds=0.3, tail_seconds=2.0)
    cut = windower.process(SpeechChunk(np.ones(8 * RATE_HZ, np.int16), 0.0, 8.0))
    assert [w.speech_seconds for w in cut + windower.close_turn()] == [3.0, 3.0, 2.0]
    with pytest.raises(ValueError, match="tail_seconds"):
        Windower(3.0, tail_seconds=-1.0)
