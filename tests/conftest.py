"""Shared fixtures: where the real corpus lives, and a seeded RNG.

Fixtures that start real services live in ``tests/realparts/`` (one module per service) and are
registered here as pytest plugins.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("VOXMETER_CORPUS", REPO.parent / "shared" / "data" / "speechocean762"))

pytest_plugins = [
    f"tests.realparts.{p.stem}"
    for p in sorted((Path(__file__).parent / "realparts").glob("*.py"))
    if p.stem != "__init__"
]


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    """The real corpus (250 speakers × 10 utterances); skips where it is absent (a user's clone)."""
    if not (CORPUS / "speakers.tsv").is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def corpus_speakers(corpus_root: Path) -> list[dict[str, str]]:
    """Rows of speakers.tsv: speaker, gender, age, original_split."""
    with open(corpus_root / "speakers.tsv", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261122)
