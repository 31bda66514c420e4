"""Lazy-informed templates: beside each speaker's embedding template, the template
of the same files anonymised by the protection method, made where the audio is at hand
(``voxmeter enroll --protect mcadams``), since voxmeter never stores audio.

They are stored as the feature ``embedding+mcadams`` (model: the embedding's version plus the
method and α), read by what scores what a protected upstream received against an attacker who
enrolled his targets through the same anonymiser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from monitor.corpus.jobs import DEFAULT_JOB, CorpusJob
from monitor.enrolment.variants import FEATURE, variant_templates
from monitor.features.base import Observation
from monitor.protect.files import DEFAULT_SEED, LAZY_SUFFIX, anonymise_file, utterance_alphas
from monitor.protect.mcadams import Alpha


def lazy_name(feature: str = FEATURE) -> str:
    return f"{feature}{LAZY_SUFFIX}"


def lazy_templates(
    files: Mapping[str, Sequence[str]],
    alpha: Alpha,
    job: CorpusJob = DEFAULT_JOB,
    *,
    seed: int = DEFAULT_SEED,
) -> dict[str, Observation]:
    """Speaker → the embedding template of its ``files`` anonymised (α per file from a seeded
    draw in speaker then file order); a speaker none of whose copies gives an embedding is left
    out. The copies live in a temporary folder, deleted before this returns
    (:func:`monitor.enrolment.variants.variant_templates`, as the narrow-band copies)."""
    ordered = [Path(path) for paths in files.values() for path in paths]
    alphas = utterance_alphas(ordered, alpha, seed)

    def copy(source: Path, destination: Path, index: int) -> None:
        anonymise_file(source, destination, alphas[index])

    return variant_templates(files, copy, lazy_name(), job, prefix="voxmeter-lazy-")
