"""The shipped reference population: present for every backend, made of train speakers only,
checked on load (a damaged file is one line), and joined after the database's templates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.calibration.buckets import load_default
from monitor.errors import InputError
from monitor.features.base import (
    DEFAULT_EMBEDDING,
    EMBEDDING_BACKENDS,
    TemplateBatch,
    set_phone_backend,
)
from monitor.population.shipped import (
    ALIAS_PREFIX,
    NARROW,
    ShippedPopulation,
    join,
    load_shipped,
    shipped_path,
)

SHIPPED = [b for b in EMBEDDING_BACKENDS if shipped_path(b).is_file()]


def _load(backend: str) -> ShippedPopulation:
    """The backend's shipped population as the daemon loads it: with the phone backend its
    shipped calibration was fitted with (the templates were extracted with that one)."""
    set_phone_backend(load_default(backend).phone_backend)
    return load_shipped(backend)


def test_the_default_backend_ships_a_population() -> None:
    assert DEFAULT_EMBEDDING in SHIPPED
    notice = (shipped_path("campplus-int8").parent / "NOTICE.md").read_text()
    assert "CC BY 4.0" in notice and "speechocean762" in notice


@pytest.mark.parametrize("backend", SHIPPED)
def test_a_shipped_population_is_small_unit_and_finite(backend: str) -> None:
    population = _load(backend)
    assert len(population) >= 100
    assert shipped_path(backend).stat().st_size < 400_000  # package data stays small
    for feature in ("embedding", NARROW):
        norms = np.linalg.norm(population.templates[feature], axis=1)
        np.testing.assert_allclose(norms, 1.0, rtol=1e-2)
    for feature in ("f0", "phone"):
        np.testing.assert_allclose(population.templates[feature].sum(axis=1), 1.0, rtol=1e-4)
    assert population.facts["split"] == "train"


@pytest.mark.corpus
@pytest.mark.parametrize("backend", SHIPPED)
def test_only_train_speakers_are_shipped(
    backend: str, corpus_speakers: list[dict[str, str]]
) -> None:
    split = {row["speaker"]: row["original_split"] for row in corpus_speakers}
    population = _load(backend)
    assert {split[s] for s in population.speakers} == {"train"}


def _damaged(tmp_path: Path, change: str) -> Path:
    """A copy of the default backend's file with one thing broken."""
    path = tmp_path / "population.npz"
    if change == "missing":
        return path
    with np.load(shipped_path("campplus-int8"), allow_pickle=False) as data:
        arrays: dict[str, Any] = {key: np.asarray(data[key]) for key in data.files}
    if change == "shape":
        arrays["embedding"] = arrays["embedding"][:, :-1]
    elif change == "nan":
        arrays["phone"] = arrays["phone"].copy()
        arrays["phone"][3, 2] = np.nan
    elif change == "model":
        models = json.loads(str(arrays["models"]))
        arrays["models"] = np.array(json.dumps({**models, "embedding": "ecapa-spkrec-voxceleb-1"}))
    elif change == "truncated":
        shutil.copy(shipped_path("campplus-int8"), path)
        path.write_bytes(path.read_bytes()[:1000])
        return path
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("missing", "missing"),
        ("shape", "shape"),
        ("nan", "not finite"),
        ("model", "this voxmeter extracts"),
        ("truncated", "damaged"),
    ],
)
def test_a_missing_or_damaged_file_is_one_line(tmp_path: Path, change: str, said: str) -> None:
    path = _damaged(tmp_path, change)
    with pytest.raises(InputError) as raised:
        load_shipped("campplus-int8", path)
    message = str(raised.value)
    assert message.startswith(str(path)) and said in message and "\n" not in message


def _population(speakers: list[str], dimension: int = 3) -> ShippedPopulation:
    rows = np.arange(len(speakers) * dimension, dtype=np.float64).reshape(-1, dimension) + 1
    return ShippedPopulation(
        "test", tuple(speakers), {"embedding": rows}, np.ones(len(speakers)), {}
    )


def test_join_puts_the_database_first_and_leaves_out_a_voice_it_holds() -> None:
    shipped = _population(["0001", "0002", "0003"])
    stored = TemplateBatch("embedding", np.full((2, 3), 9.0))
    aliases, batch = join(("home", "0002"), stored, shipped, "embedding")
    assert aliases == ("home", "0002", ALIAS_PREFIX + "0001", ALIAS_PREFIX + "0003")
    np.testing.assert_array_equal(batch.matrix[:2], 9.0)
    np.testing.assert_array_equal(batch.matrix[2:], shipped.templates["embedding"][[0, 2]])


def test_join_of_an_empty_database_is_the_shipped_population() -> None:
    shipped = _population(["0001", "0002"])
    aliases, batch = join((), None, shipped, "embedding")
    assert aliases == shipped.aliases and batch.matrix.shape == (2, 3)
    with pytest.raises(ValueError, match="no 'embedding' templates"):
        join((), None, None, "embedding")
