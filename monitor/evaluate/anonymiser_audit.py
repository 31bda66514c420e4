"""``voxmeter evaluate --protect mcadams``: what an anonymiser leaves of who speaks, and what it
costs the words.

The audited split is anonymised into a temporary copy (same speaker folders and file names,
α per utterance from a seeded draw, FLAC; deleted at the end, never cached), its features
extracted, and the main length setting audited once per attacker on the utterances both versions
keep (:data:`~monitor.evaluate.results.CONDITIONS`): *original* (clean templates, clean tests),
*ignorant* (clean templates, anonymised tests: an attacker who does not know of the protection)
and *lazy-informed* (templates anonymised the same way: one who applies it to his enrolment
audio). Both versions are split alike (the clean audio's speech seconds), so the conditions
score the same trials (the semi-informed attacker the lazy-informed one's). The paper 002
figures (DeID, GVD) of the two versions are filled in as with ``--protected``. pocketsphinx's
word error rate on the corpus prompts (``utterances.tsv``) and its command accuracy with a
grammar of those prompts, before and after, are :mod:`monitor.evaluate.asr`'s.

The fourth attacker, *semi-informed*, scores the lazy-informed trials through a back-end
trained on the corpus's train speakers anonymised the same way (:mod:`monitor.protect.backend`,
:mod:`monitor.evaluate.semi_informed`): the VoicePrivacy Challenge's ranking attacker.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.calibration.protocol import SpeakerUtterances, pool_trials
from monitor.corpus.jobs import DEFAULT_JOB, CorpusJob
from monitor.corpus.speakers import CorpusSpeakers
from monitor.evaluate.results import (
    CONDITIONS,
    Audit,
    CommandAccuracy,
    ProtectionAudit,
    SettingAudit,
    WordErrors,
)
from monitor.protect import METHODS
from monitor.protect.backend import Backend, shipped_backend
from monitor.protect.files import DEFAULT_SEED, anonymise_file, utterance_alphas
from monitor.protect.mcadams import ALPHA_RANGE_2024, Alpha, anonymise

logger = logging.getLogger(__name__)


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


def anonymised_speakers(
    root: Path,
    *,
    split: str | None,
    alpha: Alpha,
    seed: int,
    features: Sequence[str],
    job: CorpusJob = DEFAULT_JOB,
) -> CorpusSpeakers:
    """The split's speakers as the upstream would hear them: anonymised into a temporary
    copy, their features extracted, the copy deleted (nothing cached, whatever ``job.cache``:
    temporary files give no cache key worth keeping)."""
    import tempfile

    from monitor.corpus.speakers import load_speakers

    with tempfile.TemporaryDirectory(prefix="voxmeter-protect-") as scratch:
        anonymise_corpus(
            root, Path(scratch), split=split, alpha=alpha, seed=seed, progress=job.progress
        )
        uncached = dataclasses.replace(job, cache=None)
        return load_speakers(scratch, split=split, features=features, job=uncached)


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
    backend: Backend | None = None,
    **options: Any,
) -> dict[str, SettingAudit]:
    """The setting audited for each attacker of :data:`CONDITIONS` (``audit`` is
    :func:`monitor.evaluate.audit.audit_setting`, given the trials through ``pooled``); the
    semi-informed one only with a ``backend`` and the embedding among ``features``. Every
    attacker reads the same LID calibration (the clean one, as the live received view)."""
    from monitor.evaluate.semi_informed import FEATURE, semi_informed_trials

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
    if backend is not None and FEATURE in features:
        trials["semi-informed"] = semi_informed_trials(pooled_protected, backend)
    return {
        name: audit(clean, pooled=trials[name], per_speaker=False, **setting, **options)
        for name in CONDITIONS
        if name in trials
    }


@dataclasses.dataclass(frozen=True)
class ProtectRequest:
    """What ``evaluate --protect`` asks: the method, α (fixed or a range drawn per utterance),
    the draw's seed and how many utterances the word error rate decodes (0: none)."""

    method: str = "mcadams"
    alpha: Alpha = dataclasses.field(default_factory=lambda: Alpha(*ALPHA_RANGE_2024))
    seed: int = DEFAULT_SEED
    wer_utterances: int = 200
    attacker: Path | None = None  # the semi-informed back-end; None: the shipped one

    def __post_init__(self) -> None:
        check_method(self.method)
        if self.wer_utterances < 0:
            raise ValueError(f"wer_utterances must be >= 0, got {self.wer_utterances}")


def attacker_backend(request: ProtectRequest, features: Sequence[str]) -> Backend | None:
    """The semi-informed attacker's back-end: ``request.attacker``, else the one shipped for
    the selected embedding network; None (the attacker is left out, said in the log) when
    there is none, the embedding is not audited, or it was trained for another network or α."""
    from monitor.features.base import embedding_backend

    if "embedding" not in features:
        return None
    network = embedding_backend()
    backend = (
        Backend.load(request.attacker) if request.attacker is not None else shipped_backend(network)
    )
    if backend is None:
        logger.warning(
            "no semi-informed back-end shipped for %s: that attacker is left out", network
        )
        return None
    trained_for = (backend.facts.get("embedding"), backend.facts.get("alpha"))
    if trained_for != (network, str(request.alpha)):
        logger.warning(
            "the semi-informed back-end was trained for %s at α %s, not %s at α %s: left out",
            *trained_for,
            network,
            request.alpha,
        )
        return None
    return backend


def attacker_facts(backend: Backend) -> dict[str, Any]:
    """What the report says of the semi-informed attacker (the speakers by count only)."""
    facts = dict(backend.facts)
    facts["speakers"] = len(facts.get("speakers", ()))  # type: ignore[arg-type]
    return facts


def every_kth(paths: Sequence[Path], count: int) -> list[Path]:
    """``count`` of ``paths`` spread evenly over the corpus order (every speaker's share)."""
    if count <= 0 or not paths:
        return []
    picks = np.unique(np.linspace(0, len(paths) - 1, min(count, len(paths))).round().astype(int))
    return [paths[i] for i in picks]


def recognition(
    root: Path, split: str | None, request: ProtectRequest, job: CorpusJob
) -> tuple[WordErrors | None, CommandAccuracy | None]:
    """pocketsphinx on ``request.wer_utterances`` of the split, before and after the
    anonymiser (each utterance's α as the audit drew it): the open-vocabulary word error rate
    and the closed-set command accuracy (:mod:`monitor.evaluate.asr`)."""
    from monitor.corpus.scan import scan_corpus
    from monitor.evaluate.asr import command_accuracy, read_prompts, word_errors

    if not request.wer_utterances:
        return None, None
    job.tell(f"word error rate and command accuracy ({request.wer_utterances} utterances)")
    paths = scan_corpus(root, split=split).paths
    alphas = utterance_alphas(paths, request.alpha, request.seed)
    alpha_of = {path: alpha for path, alpha in zip(paths, alphas, strict=True)}
    chosen = every_kth(paths, request.wer_utterances)
    prompts = read_prompts(root)
    wer = word_errors(
        chosen,
        prompts,
        lambda samples, i: anonymise(samples, 16000, alpha_of[chosen[i]]),
        progress=job.progress,
    )
    commands = command_accuracy(
        chosen,
        prompts,
        lambda samples, path: anonymise(samples, 16000, alpha_of[path]),
        progress=job.progress,
    )
    return wer, commands


def audit_protection(
    audit: Audit,
    loaded: CorpusSpeakers,
    request: ProtectRequest,
    *,
    split: str | None,
    test_seconds: float,
    template_seconds: float | None,
    features: Sequence[str],
    job: CorpusJob,
    **options: Any,
) -> Audit:
    """``audit`` with its :class:`ProtectionAudit` (and paper 002's figures of the two
    versions, unless ``--protected`` gave them): anonymise, extract, audit, transcribe."""
    from monitor.evaluate.audit import audit_setting

    job.tell(f"anonymising ({request.method}, α {request.alpha})")
    root = Path(loaded.root)
    other = anonymised_speakers(
        root, split=split, alpha=request.alpha, seed=request.seed, features=features, job=job
    )
    backend = attacker_backend(request, features)
    job.tell("the attackers")
    conditions = condition_audits(
        loaded.speakers,
        other.speakers,
        test_seconds=test_seconds,
        template_seconds=template_seconds,
        features=features,
        audit=audit_setting,
        backend=backend,
        loss=options.pop("loss"),
        **options,
    )
    wer, commands = recognition(root, split, request, job)
    protection = ProtectionAudit(
        method=request.method,
        alpha=str(request.alpha),
        seed=request.seed,
        conditions=conditions,
        wer=wer,
        commands=commands,
        attacker=None if backend is None else attacker_facts(backend),
    )
    return _with_protection(audit, protection, loaded, other, features=features)


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
    from monitor.evaluate.deid import protected_audit

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
