"""``voxmeter evaluate --protect mcadams``: what an anonymiser leaves of who speaks, and what it
costs the words.

The audited split is anonymised into a temporary copy (same speaker folders and file names,
α per utterance from a seeded draw, FLAC; deleted at the end, never cached), its features
extracted, and the main length setting audited three times on the utterances both versions
keep (:data:`~monitor.evaluate.results.CONDITIONS`): *original* (clean templates, clean tests),
*ignorant* (clean templates, anonymised tests: an attacker who does not know of the protection)
and *lazy-informed* (templates anonymised the same way: one who applies it to his enrolment
audio). Both versions are split alike (the clean audio's speech seconds), so the three
conditions score the same trials. The paper 002 figures (DeID, GVD) of the two versions are
filled in as with ``--protected``. The word error rate of pocketsphinx on the corpus prompts
(``utterances.tsv``), before and after, is :mod:`monitor.evaluate.asr`'s.

Not measured, because it cannot be without training: a *semi-informed* attacker, who retrains
his speaker model on anonymised speech (the VoicePrivacy 2020 figures: EER back to 7.5 / 1.6 %).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.calibration.protocol import SpeakerUtterances, pool_trials
from monitor.corpus.speakers import CorpusSpeakers
from monitor.evaluate.results import CONDITIONS, Audit, ProtectionAudit, SettingAudit
from monitor.protect import METHODS
from monitor.protect.files import DEFAULT_SEED, anonymise_file, utterance_alphas
from monitor.protect.mcadams import ALPHA_RANGE_2024, Alpha, anonymise

if TYPE_CHECKING:
    from monitor.evaluate.asr import WordErrors


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"unknown protection method {method!r}; known: {', '.join(METHODS)}")
    return method


def anonymise_corpus(
    root: str | Path,
    destination: Path,
    *,
    split: str | None,
    alpha: Alpha,
    seed: int = DEFAULT_SEED,
    progress: Callable[[int, int, str], None] | None = None,
) -> int:
    """Anonymised copies of the split's files under ``destination`` (same speaker folders and
    file names, ``.flac``), with the corpus's speaker metadata; returns how many."""
    from monitor.corpus.scan import scan_corpus

    corpus = scan_corpus(root, split=split)
    paths = corpus.paths
    for name in ("speakers.tsv", "speakers.csv"):
        if (corpus.root / name).is_file():
            shutil.copyfile(corpus.root / name, destination / name)
    for done, (path, value) in enumerate(
        zip(paths, utterance_alphas(paths, alpha, seed), strict=True), 1
    ):
        anonymise_file(path, destination / path.parent.name / f"{path.stem}.flac", value)
        if progress is not None:
            progress(done, len(paths), str(path))
    return len(paths)


def aligned(
    original: Sequence[SpeakerUtterances], anonymised: Sequence[SpeakerUtterances]
) -> tuple[list[SpeakerUtterances], list[SpeakerUtterances]]:
    """Both versions restricted to the utterances each kept, in the same order, the anonymised
    one with the clean audio's speech seconds (so eq. 6 splits both alike)."""
    by_alias = {s.alias: s for s in anonymised}
    left: list[SpeakerUtterances] = []
    right: list[SpeakerUtterances] = []
    for speaker in original:
        other = by_alias.get(speaker.alias)
        if other is None:
            continue
        index = {u: i for i, u in enumerate(other.utterances)}
        mine = np.array([i for i, u in enumerate(speaker.utterances) if u in index], dtype=int)
        if mine.size < 2:
            continue
        theirs = np.array([index[speaker.utterances[i]] for i in mine], dtype=int)
        utterances = tuple(speaker.utterances[i] for i in mine)
        left.append(_subset(speaker, mine, utterances, speaker.speech_seconds[mine]))
        right.append(_subset(other, theirs, utterances, speaker.speech_seconds[mine]))
    return left, right


def _subset(
    speaker: SpeakerUtterances, rows: np.ndarray, utterances: tuple[str, ...], seconds: np.ndarray
) -> SpeakerUtterances:
    return SpeakerUtterances(
        alias=speaker.alias,
        utterances=utterances,
        speech_seconds=seconds,
        values={f: np.asarray(v)[rows] for f, v in speaker.values.items()},
        weights={f: np.asarray(w)[rows] for f, w in speaker.weights.items()},
    )


def condition_audits(
    original: Sequence[SpeakerUtterances],
    anonymised: Sequence[SpeakerUtterances],
    *,
    test_seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
    audit: Callable[..., SettingAudit],
    **options: Any,
) -> dict[str, SettingAudit]:
    """The setting audited for each attacker of :data:`CONDITIONS` (``audit`` is
    :func:`monitor.evaluate.audit.audit_setting`, given the trials through ``pooled``)."""
    clean, protected = aligned(original, anonymised)
    setting = {
        "test_seconds": test_seconds,
        "template_seconds": template_seconds,
        "features": features,
    }
    pooled_clean = pool_trials(clean, **setting)
    pooled_protected = pool_trials(protected, **setting)
    trials = {
        "original": pooled_clean,
        "ignorant": dataclasses.replace(pooled_clean, tests=pooled_protected.tests),
        "lazy-informed": pooled_protected,
    }
    return {
        name: audit(clean, pooled=trials[name], per_speaker=False, **setting, **options)
        for name in CONDITIONS
    }


@dataclasses.dataclass(frozen=True)
class ProtectRequest:
    """What ``evaluate --protect`` asks: the method, α (fixed or a range drawn per utterance),
    the draw's seed and how many utterances the word error rate decodes (0: none)."""

    method: str = "mcadams"
    alpha: Alpha = dataclasses.field(default_factory=lambda: Alpha(*ALPHA_RANGE_2024))
    seed: int = DEFAULT_SEED
    wer_utterances: int = 200

    def __post_init__(self) -> None:
        check_method(self.method)
        if self.wer_utterances < 0:
            raise ValueError(f"wer_utterances must be >= 0, got {self.wer_utterances}")


def every_kth(paths: Sequence[Path], count: int) -> list[Path]:
    """``count`` of ``paths`` spread evenly over the corpus order (every speaker's share)."""
    if count <= 0 or not paths:
        return []
    picks = np.unique(np.linspace(0, len(paths) - 1, min(count, len(paths))).round().astype(int))
    return [paths[i] for i in picks]


def audit_protection(
    audit: Audit,
    loaded: CorpusSpeakers,
    request: ProtectRequest,
    *,
    split: str | None,
    test_seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
    jobs: int,
    scheduler: str | None,
    min_speech_seconds: float,
    extraction_progress: Callable[[int, int, str], None] | None,
    progress: Callable[[str], None] | None,
    **options: Any,
) -> Audit:
    """``audit`` with its :class:`ProtectionAudit` (and paper 002's figures of the two
    versions, unless ``--protected`` gave them): anonymise, extract, audit, transcribe."""
    from monitor.evaluate.audit import audit_setting

    if progress is not None:
        progress(f"anonymising ({request.method}, α {request.alpha})")
    root = Path(loaded.root)
    other = _anonymised_speakers(
        root,
        request,
        split=split,
        features=features,
        jobs=jobs,
        scheduler=scheduler,
        min_speech_seconds=min_speech_seconds,
        extraction_progress=extraction_progress,
    )
    if progress is not None:
        progress("the three attackers")
    conditions = condition_audits(
        loaded.speakers,
        other.speakers,
        test_seconds=test_seconds,
        template_seconds=template_seconds,
        features=features,
        audit=audit_setting,
        loss=options.pop("loss"),
        **options,
    )
    wer = None
    if request.wer_utterances:
        if progress is not None:
            progress(f"word error rate ({request.wer_utterances} utterances)")
        wer = _word_errors(root, request, split=split, progress=extraction_progress)
    protection = ProtectionAudit(
        method=request.method,
        alpha=str(request.alpha),
        seed=request.seed,
        conditions=conditions,
        wer=wer,
    )
    return _with_protection(audit, protection, loaded, other, features=features)


def _word_errors(
    root: Path,
    request: ProtectRequest,
    *,
    split: str | None,
    progress: Callable[[int, int, str], None] | None,
) -> WordErrors:
    """The word error rate of every k-th utterance anonymised with the very α the corpus copy
    drew for it: what protection costs the assistant's understanding."""
    from monitor.corpus.scan import scan_corpus
    from monitor.evaluate.asr import read_prompts, word_errors

    paths = scan_corpus(root, split=split).paths
    alphas = utterance_alphas(paths, request.alpha, request.seed)
    alpha_of = {path: alpha for path, alpha in zip(paths, alphas, strict=True)}
    chosen = every_kth(paths, request.wer_utterances)
    return word_errors(
        chosen,
        read_prompts(root),
        lambda samples, i: anonymise(samples, 16000, alpha_of[chosen[i]]),
        progress=progress,
    )


def _anonymised_speakers(
    root: Path,
    request: ProtectRequest,
    *,
    split: str | None,
    features: Sequence[str],
    jobs: int,
    scheduler: str | None,
    min_speech_seconds: float,
    extraction_progress: Callable[[int, int, str], None] | None,
) -> CorpusSpeakers:
    """The split anonymised into a scratch folder and its speakers extracted from there: the
    anonymised audio never outlives the audit."""
    import tempfile

    from monitor.corpus.speakers import load_speakers

    with tempfile.TemporaryDirectory(prefix="voxmeter-protect-") as scratch:
        anonymise_corpus(
            root,
            Path(scratch),
            split=split,
            alpha=request.alpha,
            seed=request.seed,
            progress=extraction_progress,
        )
        return load_speakers(
            scratch,
            split=split,
            features=features,
            cache_dir=None,  # temporary files: nothing to key a cache entry on afterwards
            jobs=jobs,
            scheduler=scheduler,
            progress=extraction_progress,
            min_speech_seconds=min_speech_seconds,
        )


def _with_protection(
    audit: Audit,
    protection: ProtectionAudit,
    loaded: CorpusSpeakers,
    other: CorpusSpeakers,
    *,
    features: Sequence[str],
) -> Audit:
    """``audit`` with its protection audit, and paper 002's figures of the two versions unless
    ``--protected`` already gave them."""
    from monitor.evaluate.protected import protected_audit

    feature = "embedding" if "embedding" in features else features[0]
    root = Path(loaded.root)
    paper_002 = audit.protected or protected_audit(
        loaded.speakers,
        other.speakers,
        corpus=f"{root.name} ({protection.method})",
        feature=feature,
    )
    return dataclasses.replace(
        audit,
        protected=paper_002,
        protection=protection,
        skipped=audit.skipped + other.skipped,
    )
