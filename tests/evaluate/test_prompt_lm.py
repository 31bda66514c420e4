"""The prompts' trigram model: a proper distribution per context, read by the real
pocketsphinx, and the nearest-prompt match of a closed-set assistant."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from monitor.evaluate.prompt_lm import arpa, nearest

SENTENCES = ["turn on the light", "turn off the light", "what time is it", "play some music"]


def _entries(text: str) -> dict[tuple[str, ...], tuple[float, float]]:
    """(n-gram) → (probability, back-off weight), read section by section."""
    out = {}
    order = 0
    for line in text.splitlines():
        if line.endswith("-grams:"):
            order = int(line[1])
            continue
        parts = line.split()
        if not order or len(parts) < order + 1:
            continue
        gram = tuple(parts[1 : 1 + order])
        backoff = float(parts[1 + order]) if len(parts) == order + 2 else 0.0
        out[gram] = (10 ** float(parts[0]), 10**backoff)
    return out


def test_every_context_sums_to_one() -> None:
    entries = _entries(arpa(SENTENCES))
    vocabulary = [g[0] for g in entries if len(g) == 1 and g[0] != "<s>"]
    assert sum(entries[(w,)][0] for w in vocabulary) == pytest.approx(1.0, rel=1e-5)
    seen: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for gram in entries:
        if len(gram) > 1:
            seen[gram[:-1]].add(gram[-1])

    def prob(context: tuple[str, ...], word: str) -> float:
        if (*context, word) in entries:
            return entries[(*context, word)][0]
        weight = entries[context][1] if context in entries else 1.0
        return weight * prob(context[1:], word) if context else entries[(word,)][0]

    for context in seen:
        total = sum(prob(context, w) for w in vocabulary)
        assert total == pytest.approx(1.0, rel=1e-4), context


def test_pocketsphinx_reads_it(tmp_path: Path) -> None:
    from pocketsphinx import Decoder

    path = tmp_path / "prompts.arpa"
    path.write_text(arpa(SENTENCES))
    decoder = Decoder(samprate=16000, loglevel="FATAL", lm=str(path))
    decoder.start_utt()
    decoder.process_raw(bytes(3200), False, True)  # 0.1 s of silence decodes to nothing
    decoder.end_utt()
    assert decoder.hyp() is None or decoder.hyp().hypstr.strip() == ""


def test_nearest_prompt() -> None:
    assert nearest("turn off light", SENTENCES) == "turn off the light"
    assert nearest("what time", SENTENCES) == "what time is it"
    assert nearest("", SENTENCES) == "play some music"  # the shortest
