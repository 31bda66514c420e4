"""Changes of speaker found at pauses (:mod:`monitor.tracking.pauses`), with the shipped models:
a window holding two voices is cut near where the second starts, a window of one voice never
is (synthetic voices: harmonic tones an octave apart; the real corpus in the tests marked
``corpus``: test-split speakers, the models were fitted on the train split)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from monitor.audio.file import read_audio
from monitor.audio.frames import RATE_HZ
from monitor.audio.vad import speech_only
from monitor.audio.windows import SpeechWindow
from monitor.errors import ConfigError
from monitor.features.change import cepstra
from monitor.settings.config import load_config
from monitor.tracking.pauses import (
    PauseModel,
    best_change,
    dips,
    load_pause_model,
    loud_scores,
    loudness,
)
from monitor.tracking.turns import TurnSplitter, frames_of, load_change_models


def voice(f0: float, seconds: float, rng: np.random.Generator, level: float = 0.2) -> np.ndarray:
    """A harmonic tone with a little noise: a stand-in for one voice."""
    t = np.arange(round(seconds * RATE_HZ)) / RATE_HZ
    tone = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 6))
    return (level * tone + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def pause(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """What the VAD keeps of a short pause in a room: a quiet tail, 30 dB down."""
    return (0.006 * rng.standard_normal(round(seconds * RATE_HZ))).astype(np.float32)


def window(samples: np.ndarray, start: float = 10.0) -> SpeechWindow:
    seconds = samples.shape[0] / RATE_HZ
    return SpeechWindow(samples, start, start + seconds, seconds)


def never_embed(samples: np.ndarray) -> np.ndarray:
    raise AssertionError("the pause detector embeds nothing")


@pytest.fixture(scope="module")
def splitter() -> TurnSplitter:
    """The splitter as the daemon builds it with ``tracker.change_detection = "pauses"``."""
    return TurnSplitter(never_embed, change_cosine=-1.0, pauses=load_pause_model())


def cut_at(pieces: list[SpeechWindow]) -> list[float]:
    """Seconds of speech into the window where each cut is."""
    lengths = itertools.accumulate(p.samples.shape[0] for p in pieces[:-1])
    return [n / RATE_HZ for n in lengths]


@pytest.mark.parametrize("at", [0.6, 1.4, 2.2])
def test_two_voices_at_a_pause_are_cut_there(
    rng: np.random.Generator, splitter: TurnSplitter, at: float
) -> None:
    samples = np.concatenate(
        [voice(140.0, at, rng), pause(0.12, rng), voice(290.0, 2.88 - at, rng)]
    )
    pieces = splitter.split(window(samples))
    [cut] = cut_at(pieces)
    assert at - 0.06 <= cut <= at + 0.18  # in the pause, or at its edge
    assert pieces[0].start_seconds == 10.0 and pieces[-1].end_seconds == pytest.approx(13.0)
    assert not any(p.mixed for p in pieces)


def test_two_voices_without_a_pause_are_cut_too(
    rng: np.random.Generator, splitter: TurnSplitter
) -> None:
    samples = np.concatenate([voice(140.0, 1.7, rng), voice(290.0, 1.3, rng)])
    [cut] = cut_at(splitter.split(window(samples)))
    assert cut == pytest.approx(1.7, abs=0.05)


def test_one_voice_with_pauses_stays_whole(
    rng: np.random.Generator, splitter: TurnSplitter
) -> None:
    """One voice, its level changing and pausing twice (as breaths between utterances)."""
    samples = np.concatenate([
        voice(160.0, 0.9, rng), pause(0.12, rng), voice(160.0, 1.0, rng, level=0.08),
        pause(0.1, rng), voice(160.0, 0.9, rng, level=0.3),
    ])  # fmt: skip
    w = window(samples)
    assert splitter.split(w) == [w]


def test_three_voices_give_a_mixed_middle(rng: np.random.Generator, splitter: TurnSplitter) -> None:
    samples = np.concatenate([
        voice(140.0, 1.0, rng), pause(0.1, rng), voice(290.0, 0.9, rng), pause(0.1, rng),
        voice(600.0, 1.0, rng),
    ])  # fmt: skip
    pieces = splitter.split(window(samples))
    assert len(pieces) == 3 and [p.mixed for p in pieces] == [False, True, False]


def test_parts_of_the_detector(rng: np.random.Generator) -> None:
    samples = np.concatenate([voice(140.0, 1.0, rng), pause(0.15, rng), voice(140.0, 1.0, rng)])
    fbank = frames_of(samples).fbank
    level = loudness(fbank)
    [dip] = dips(level, 6.0, 30)
    assert 100 <= dip <= 116  # the pause: frames 100..115
    assert dips(level, 6.0, 120).size == 0  # too near an end for 1.2 s either side
    z = np.zeros((200, 3))
    z[100:] = 1.0  # a change of mean by 1 in each of 3 dimensions at frame 100
    scores = loud_scores(z, np.ones(200, dtype=bool), 30)
    assert int(np.argmax(scores)) == 100
    assert scores[100] == pytest.approx(0.5 * 50.0 * 3.0 / 100.0)  # ½·n₁n₂/(n₁+n₂)·‖Δ‖²/F
    assert not scores[:30].any() and not scores[171:].any()
    assert not loud_scores(z, np.zeros(200, dtype=bool), 30).any()  # nothing loud: no score
    model = load_pause_model()
    assert 0 < model.pause_threshold <= model.anywhere_threshold
    assert best_change(fbank[:40], z[:40], model) is None  # too short to hold two sides
    with pytest.raises(ValueError, match="non-positive"):
        PauseModel(0.0, 25.0, 0.3, 1.0, 1.0)


# the real corpus: test-split speakers' VAD speech, two of each gender and age band


def _band(row: dict[str, str]) -> str:
    age = int(row["age"])
    return row["gender"] + ("-child" if age < 13 else "-teen" if age < 18 else "-adult")


@pytest.fixture(scope="module")
def speakers(corpus_speakers: list[dict[str, str]]) -> list[dict[str, str]]:
    """Two test-split speakers of each of four groups (boys, girls, women, men)."""
    test = [r for r in corpus_speakers if r["original_split"] == "test"]
    groups = ("m-child", "f-child", "f-adult", "m-adult")
    return [r for g in groups for r in [r for r in test if _band(r) == g][:2]]


@pytest.fixture(scope="module")
def utterances(corpus_root: Path, speakers: list[dict[str, str]]) -> list[list[np.ndarray]]:
    """Each speaker's VAD speech, utterance by utterance (longest first)."""
    out = []
    for row in speakers:
        paths = sorted((corpus_root / row["speaker"]).glob("*.flac"))[:6]
        speech = [speech_only(read_audio(p)[0], RATE_HZ).astype(np.float32) for p in paths]
        out.append(sorted(speech, key=len, reverse=True))
    return out


@pytest.mark.corpus
def test_real_two_speaker_windows_are_cut_near_the_change(
    utterances: list[list[np.ndarray]], speakers: list[dict[str, str]], splitter: TurnSplitter
) -> None:
    """1.8 s from the middle of one speaker's longest utterance, a 0.12 s quiet pause, then
    1.2 s from the middle of another's (every ordered pair of speakers of different groups):
    where a window is cut, it is cut near the change. Not every pair is cut: a change is taken
    only where the frames differ more than nearly every one-voice window's did (on these
    pairs about a third are, none cut elsewhere: the detector errs towards scoring whole)."""
    rng = np.random.default_rng(48)
    first_s, second_s = round(1.8 * RATE_HZ), round(1.2 * RATE_HZ)
    near = wrong = 0
    pairs = [(a, b) for a, b in itertools.permutations(range(len(utterances)), 2)
             if _band(speakers[a]) != _band(speakers[b])]  # fmt: skip
    for a, b in pairs:
        first, second = utterances[a][0], utterances[b][0]
        middle_a, middle_b = first.shape[0] // 2, second.shape[0] // 2
        samples = np.concatenate([
            first[middle_a - first_s : middle_a], pause(0.12, rng),
            second[middle_b : middle_b + second_s],
        ])  # fmt: skip
        cuts = cut_at(splitter.split(window(samples)))
        near += any(abs(c - 1.86) <= 0.3 for c in cuts)
        wrong += sum(abs(c - 1.86) > 0.3 for c in cuts)
    assert len(pairs) == 48
    assert near >= 10 and wrong <= 3


@pytest.mark.corpus
def test_real_one_speaker_windows_are_not_cut(
    utterances: list[list[np.ndarray]], splitter: TurnSplitter
) -> None:
    """3 s windows from inside one utterance (a hop of 1.5 s): never cut; one speaker's
    utterances joined (as a turn's windows are) and cut into 3 s windows: hardly ever (the
    joins between two recordings are the only changes these windows hold)."""
    windows = cut = 0
    for speech in utterances:
        for utterance in speech:
            for start in range(0, utterance.shape[0] - 3 * RATE_HZ + 1, 3 * RATE_HZ // 2):
                windows += 1
                cut += len(splitter.split(window(utterance[start : start + 3 * RATE_HZ]))) > 1
    assert windows >= 40 and cut == 0
    windows = cut = 0
    for speech in utterances:
        joined = np.concatenate(speech)
        for start in range(0, joined.shape[0] - 3 * RATE_HZ + 1, 3 * RATE_HZ):
            windows += 1
            cut += len(splitter.split(window(joined[start : start + 3 * RATE_HZ]))) > 1
    assert windows >= 50 and cut <= 3


def test_the_shipped_models_fit_together() -> None:
    """The pause model reads the turn splitter's projected cepstra (its side at least 0.25 s)."""
    model = load_pause_model()
    assert model.side >= 25
    projection = load_change_models()["ecapa"]
    z = cepstra(np.zeros((100, 80)), projection.cepstra) @ projection.projection
    assert z.shape == (100, projection.projection.shape[1])


def test_the_setting_chooses_the_detector() -> None:
    """Pauses by default; the band or none on request; anything else is a config error."""
    assert load_config(None, []).tracker.change_detection == "pauses"
    assert load_config(None, ['tracker.change_detection="band"']).tracker.change_detection == "band"
    with pytest.raises(ConfigError, match=r"tracker\.change_detection.*must be one of pauses"):
        load_config(None, ['tracker.change_detection="sometimes"'])
