"""Word error rate of a real recogniser, before and after anonymisation (``evaluate --protect``).

pocketsphinx with the US English model its wheel ships (the recogniser of the Wyoming upstream
the tests relay to), one fresh decoder per version so neither adapts its cepstral normalisation
to the other; the references are the corpus prompts (``utterances.tsv``: utterance, speaker,
seconds, text), scored with jiwer after lower-casing and dropping punctuation. The corpus is
non-native read speech: the baseline is high, the *rise* is the figure.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import InputError
from monitor.evaluate.results import WordErrors

ASR = "pocketsphinx 5 en-us (wheel's model)"
PROMPTS = "utterances.tsv"


def read_prompts(root: Path) -> dict[str, str]:
    """Utterance stem → prompt text from ``<root>/utterances.tsv``."""
    path = root / PROMPTS
    if not path.is_file():
        raise InputError(str(path), "--protect needs the corpus prompts (utterance, text columns)")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows or not {"utterance", "text"} <= set(rows[0]):
        raise InputError(str(path), "expected tab-separated columns 'utterance' and 'text'")
    return {row["utterance"]: row["text"] for row in rows}


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]+", " ", text.lower()).split())


def _decoder() -> Any:
    from pocketsphinx import Decoder

    return Decoder(samprate=16000, loglevel="FATAL")


def transcribe(decoder: Any, samples: np.ndarray) -> str:
    """One utterance (float, 16 kHz, [-1, 1]) through ``decoder``."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    decoder.start_utt()
    decoder.process_raw(pcm, False, True)
    decoder.end_utt()
    hypothesis = decoder.hyp()
    return hypothesis.hypstr if hypothesis is not None else ""


def word_errors(
    paths: Sequence[Path],
    prompts: dict[str, str],
    transform: Callable[[np.ndarray, int], np.ndarray],
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> WordErrors:
    """WER over ``paths`` that have a prompt, on the audio as read and after
    ``transform(samples, index)`` (the anonymiser with that utterance's α)."""
    import jiwer

    from monitor.audio.file import read_audio

    chosen = [p for p in paths if normalise(prompts.get(p.stem, ""))]
    references = [normalise(prompts[p.stem]) for p in chosen]
    clean, protected = _decoder(), _decoder()
    before: list[str] = []
    after: list[str] = []
    for index, path in enumerate(chosen):
        audio, _ = read_audio(path)
        before.append(normalise(transcribe(clean, audio)))
        after.append(normalise(transcribe(protected, transform(audio.astype(np.float64), index))))
        if progress is not None:
            progress(index + 1, len(chosen), str(path))
    if not chosen:
        raise InputError(PROMPTS, "no audited utterance has a prompt")
    return WordErrors(
        asr=ASR,
        utterances=len(chosen),
        words=sum(len(r.split()) for r in references),
        before=float(jiwer.wer(references, before)),
        after=float(jiwer.wer(references, after)),
    )
