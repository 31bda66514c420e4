"""Lazy-informed templates (issue 30): beside each speaker's embedding template, the template
of the same files anonymised by the protection method, made where the audio is at hand
(``voxmeter enroll --protect mcadams``), since voxmeter never stores audio.

They are stored as the feature ``embedding+mcadams`` (model: the embedding's version plus the
method and α), read by what scores what a protected upstream received against an attacker who
enrolled his targets through the same anonymiser.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from monitor.features.base import Observation, get_feature
from monitor.protect.files import DEFAULT_SEED, LAZY_SUFFIX, anonymise_file, utterance_alphas
from monitor.protect.mcadams import Alpha

FEATURE = "embedding"


def lazy_name(feature: str = FEATURE) -> str:
    return f"{feature}{LAZY_SUFFIX}"


def lazy_templates(
    files: dict[str, Sequence[str]],
    alpha: Alpha,
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    seed: int = DEFAULT_SEED,
) -> dict[str, Observation]:
    """Speaker → the embedding template of its ``files`` anonymised (α per file from a seeded
    draw in speaker then file order); a speaker none of whose copies gives an embedding is left
    out. The copies live in a temporary folder, deleted before this returns."""
    from monitor.features.extract import extract_many

    ordered = [(alias, Path(path)) for alias, paths in files.items() for path in paths]
    alphas = utterance_alphas([p for _, p in ordered], alpha, seed)
    with tempfile.TemporaryDirectory(prefix="voxmeter-lazy-") as scratch:
        copies: dict[str, list[str]] = {}
        for index, ((alias, path), value) in enumerate(zip(ordered, alphas, strict=True)):
            copy = Path(scratch) / alias / f"{index:06d}-{path.stem}.flac"
            anonymise_file(path, copy, value)
            copies.setdefault(alias, []).append(str(copy))
        extraction = extract_many(
            [p for paths in copies.values() for p in paths],
            None,  # temporary files: nothing to key a cache entry on afterwards
            features=(FEATURE,),
            jobs=jobs,
            scheduler=scheduler,
        )
    templates: dict[str, Observation] = {}
    for alias, paths in copies.items():
        results = [extraction.files[p] for p in paths if p in extraction.files]
        if results:
            observations = [r.observations[FEATURE] for r in results]
            kept = [o for o in observations if np.any(o.values != 0)]
            if not kept:
                continue
            pooled = get_feature(FEATURE).pool(kept)
            templates[alias] = dataclasses.replace(pooled, feature=lazy_name())
    return templates
