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
from monitor.evaluate.results import CommandAccuracy, WordErrors

ASR = "pocketsphinx 5 en-us (wheel's model)"
GRAMMAR_ASR = "pocketsphinx 5 en-us acoustic model, trigram LM of the corpus prompts"
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


def _decoder(lm: Path | None = None) -> Any:
    """A fresh decoder: the wheel's general model, or its acoustic model with ``lm``."""
    from pocketsphinx import Decoder

    if lm is None:
        return Decoder(samprate=16000, loglevel="FATAL")
    return Decoder(samprate=16000, loglevel="FATAL", lm=str(lm))


def known_sentences(prompts: dict[str, str]) -> list[str]:
    """The distinct normalised prompts every word of which the recogniser's dictionary holds
    (a closed-set assistant only accepts sentences it can say; the few prompts with a word
    outside the dictionary, names mostly, are left out of the model and of the count)."""
    decoder = _decoder()
    sentences = sorted({n for n in map(normalise, prompts.values()) if n})
    unknown = {w for s in sentences for w in s.split() if decoder.lookup_word(w) is None}
    return [s for s in sentences if unknown.isdisjoint(s.split())]


def command_accuracy(
    paths: Sequence[Path],
    prompts: dict[str, str],
    transform: Callable[[np.ndarray, Path], np.ndarray],
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> CommandAccuracy:
    """Share of ``paths`` (those whose prompt the model holds) recognised as their own prompt by
    pocketsphinx restricted to the corpus's prompts (:mod:`monitor.evaluate.prompt_lm`, built
    here from ``prompts``: nothing is downloaded), as read and after ``transform(samples,
    path)`` (the anonymiser with that utterance's α), and the word error rate of the same
    decodes."""
    import tempfile

    import jiwer

    from monitor.evaluate.prompt_lm import arpa, nearest

    sentences = known_sentences(prompts)
    allowed = set(sentences)
    chosen = [p for p in paths if normalise(prompts.get(p.stem, "")) in allowed]
    if not chosen:
        raise InputError(PROMPTS, "no audited utterance has a prompt the model holds")
    with tempfile.TemporaryDirectory(prefix="voxmeter-lm-") as scratch:
        lm = Path(scratch) / "prompts.arpa"
        lm.write_text(arpa(sentences))
        clean, protected = _decoder(lm), _decoder(lm)
    references = [normalise(prompts[p.stem]) for p in chosen]
    before, after = decode_both(
        chosen, clean, protected, lambda audio, i: transform(audio, chosen[i]), progress
    )
    matched_before = [nearest(h, sentences) for h in before]
    matched_after = [nearest(h, sentences) for h in after]
    truth = np.array(references)
    return CommandAccuracy(
        asr=GRAMMAR_ASR,
        prompts=len(sentences),
        utterances=len(chosen),
        before=float(np.mean(np.array(matched_before) == truth)),
        after=float(np.mean(np.array(matched_after) == truth)),
        wer_before=float(jiwer.wer(references, before)),
        wer_after=float(jiwer.wer(references, after)),
    )


def decode_both(
    paths: Sequence[Path],
    clean: Any,
    protected: Any,
    transform: Callable[[np.ndarray, int], np.ndarray],
    progress: Callable[[int, int, str], None] | None,
) -> tuple[list[str], list[str]]:
    """Normalised transcripts of each file as read (``clean`` decoder) and after
    ``transform(samples, index)`` (``protected`` decoder): one decoder per version, so
    neither adapts its cepstral normalisation to the other."""
    from monitor.audio.file import read_audio

    before: list[str] = []
    after: list[str] = []
    for index, path in enumerate(paths):
        audio, _ = read_audio(path)
        before.append(normalise(transcribe(clean, audio)))
        after.append(normalise(transcribe(protected, transform(audio.astype(np.float64), index))))
        if progress is not None:
            progress(index + 1, len(paths), str(path))
    return before, after


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

    chosen = [p for p in paths if normalise(prompts.get(p.stem, ""))]
    references = [normalise(prompts[p.stem]) for p in chosen]
    before, after = decode_both(chosen, _decoder(), _decoder(), transform, progress)
    if not chosen:
        raise InputError(PROMPTS, "no audited utterance has a prompt")
    return WordErrors(
        asr=ASR,
        utterances=len(chosen),
        words=sum(len(r.split()) for r in references),
        before=float(jiwer.wer(references, before)),
        after=float(jiwer.wer(references, after)),
    )
