"""Long files are streamed in blocks (memory stays flat in length): the blocks give the
same observations as pooling the parts, and reading in blocks gives the same samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from monitor.audio.file import read_audio, read_audio_blocks
from monitor.audio.frames import RATE_HZ
from monitor.features.base import FEATURE_NAMES, get_feature
from monitor.features.extract import extract_file

BLOCK = 8.0  # seconds: small, so a test file of a few utterances spans several blocks


def corpus_parts(corpus_root: Path, speaker_index: int, count: int) -> list[np.ndarray]:
    speaker = sorted(p for p in corpus_root.iterdir() if p.is_dir())[speaker_index]
    parts = []
    for path in sorted(speaker.glob("*.flac"))[:count]:
        samples, rate = sf.read(path, dtype="float32")
        assert rate == RATE_HZ
        parts.append(samples)
    return parts


def pooled_parts(folder: Path, parts: list[np.ndarray]) -> dict[str, object]:
    """Each part extracted on its own (one piece), then pooled by the feature's own pool."""
    results = []
    for index, part in enumerate(parts):
        sf.write(folder / f"part{index}.wav", part, RATE_HZ, subtype="FLOAT")
        results.append(extract_file(folder / f"part{index}.wav"))
    return {
        name: get_feature(name).pool([r.observations[name] for r in results])
        for name in FEATURE_NAMES
    } | {"speech_seconds": sum(r.speech_seconds for r in results)}


@pytest.mark.corpus
def test_blocks_aligned_with_parts_equal_pooling_the_parts(
    corpus_root: Path, tmp_path: Path
) -> None:
    """Each corpus utterance padded with silence to exactly one block: the streamed long file
    and the pooled parts see the same speech, so every observation is the same."""
    parts = []
    for utterance in corpus_parts(corpus_root, 0, 4):
        padded = np.zeros(int(BLOCK * RATE_HZ), dtype=np.float32)
        padded[: min(utterance.size, padded.size)] = utterance[: padded.size]
        parts.append(padded)
    sf.write(tmp_path / "long.wav", np.concatenate(parts), RATE_HZ, subtype="FLOAT")
    streamed = extract_file(tmp_path / "long.wav", block_seconds=BLOCK)
    expected = pooled_parts(tmp_path, parts)
    assert streamed.duration_seconds == pytest.approx(4 * BLOCK)
    assert streamed.speech_seconds == pytest.approx(expected["speech_seconds"])
    for name in FEATURE_NAMES:
        np.testing.assert_allclose(
            streamed.observations[name].values, expected[name].values, atol=1e-9, err_msg=name
        )
        assert streamed.observations[name].seconds == pytest.approx(expected[name].seconds)


@pytest.mark.corpus
def test_blocks_across_utterances_stay_close_to_pooling(corpus_root: Path, tmp_path: Path) -> None:
    """Utterances back to back, blocks cutting through them: the VAD and frame edges move a
    little, the figures stay within a few per cent of pooling the utterances."""
    parts = corpus_parts(corpus_root, 1, 6)
    sf.write(tmp_path / "long.wav", np.concatenate(parts), RATE_HZ, subtype="FLOAT")
    streamed = extract_file(tmp_path / "long.wav", block_seconds=7.0)
    expected = pooled_parts(tmp_path, parts)
    assert streamed.speech_seconds == pytest.approx(expected["speech_seconds"], rel=0.1)
    for name in ("f0", "phone"):
        a, b = streamed.observations[name].values, expected[name].values
        variation = 0.5 * np.abs(a / a.sum() - b / b.sum()).sum()
        assert variation < {"f0": 0.08, "phone": 0.25}[name], (name, variation)
    cosine = streamed.observations["embedding"].values @ expected["embedding"].values
    assert cosine > 0.97


def test_reading_in_blocks_gives_the_same_samples(digits_corpus: Path, tmp_path: Path) -> None:
    """An 8 kHz file read in blocks (resampled by one soxr stream) equals reading it whole."""
    digits = [sf.read(p, dtype="float32")[0] for p in sorted((digits_corpus / "d1").glob("*.wav"))]
    sf.write(tmp_path / "d.wav", np.concatenate(digits * 3), 8000)
    whole, duration = read_audio(tmp_path / "d.wav")
    blocks = list(read_audio_blocks(tmp_path / "d.wav", 1.3))
    assert len(blocks) > 10 and max(b.size for b in blocks) <= 1.4 * RATE_HZ
    joined = np.concatenate(blocks)
    assert joined.size == whole.size
    np.testing.assert_allclose(joined, whole, atol=1e-6)
    assert duration == pytest.approx(whole.size / RATE_HZ, abs=1e-3)


def _write_speech(corpus_root: Path, path: Path, seconds: float) -> None:
    """``seconds`` of the corpus's utterances back to back (16-bit PCM, format by suffix)."""
    wanted = int(seconds * RATE_HZ)
    written = 0
    utterances = sorted(corpus_root.glob("*/*.flac"))
    with sf.SoundFile(path, "w", samplerate=RATE_HZ, channels=1, subtype="PCM_16") as out:
        for utterance in utterances:
            samples, _ = sf.read(utterance, dtype="int16")
            out.write(samples[: wanted - written])
            written += min(samples.size, wanted - written)
            if written == wanted:
                return
    raise AssertionError(f"the corpus holds less than {seconds} s")


# A child's ru_maxrss starts from its parent's resident size at fork (Linux keeps the high-water
# mark across exec), so a child forked by a pytest that already holds 2 GB reports 2 GB. A small
# fresh Python forks the measured process and reports its peak instead.
_TRAMPOLINE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(f"maxrss_kib={usage.ru_maxrss}", file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _peak_rss_bytes(path: Path, scratch: Path) -> tuple[int, dict[str, object]]:
    """Peak resident memory of ``voxmeter features PATH --json`` (``wait4``'s ``ru_maxrss``,
    KiB on Linux, taken by a small trampoline: see above), and its report."""
    import json
    import subprocess
    import sys

    command = [sys.executable, "-m", "monitor.cli", "features", str(path), "--json"]
    with open(scratch / "out.json", "w+") as out, open(scratch / "err.txt", "w+") as err:
        done = subprocess.run(
            [sys.executable, "-c", _TRAMPOLINE, *command], stdout=out, stderr=err, check=False
        )
        err.seek(0)
        lines = err.read().splitlines()
        assert done.returncode == 0, "\n".join(lines)
        out.seek(0)
        maxrss_kib = int(lines[-1].removeprefix("maxrss_kib="))
        return maxrss_kib * 1024, json.load(out)


@pytest.mark.slow
@pytest.mark.corpus
@pytest.mark.timeout(1800)
def test_peak_memory_is_flat_in_length(corpus_root: Path, tmp_path: Path) -> None:
    """A 2-hour FLAC peaked at 2.09 GB (the embedding saw 60 s of speech at once, 1.1 GB from
    the first minute). Now the peak stays well under 1 GB and grows little with length: on
    2026-11-26 1.5 min peaked at 429 MB and 7.5 min at 570 MB (ratio 1.33; the allocator's
    heaps fill over the first minutes), 10 min at 560 MB, and a 2-hour FLAC at 567 MB after
    its first ~12 min (bench_long_file). The bounds catch 60 s blocks at once again (1.1 GB)
    and growth of more than ~35 MB a minute; slower growth is for the benchmark's trace of a
    2-hour file to show."""
    peaks = {}
    for minutes in (1.5, 7.5):
        path = tmp_path / f"speech-{minutes}.flac"
        _write_speech(corpus_root, path, minutes * 60)
        peaks[minutes], report = _peak_rss_bytes(path, tmp_path)
        assert report["duration_seconds"] == pytest.approx(minutes * 60)
        path.unlink()
    assert peaks[7.5] < 1.5 * peaks[1.5], peaks
    assert max(peaks.values()) < 0.8e9, peaks
