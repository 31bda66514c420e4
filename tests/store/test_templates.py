"""Identities, atomic template replacement, template batches, local profiles, calibrations."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from monitor.calibration.buckets import BucketCalibration, CalibrationSet
from monitor.errors import StoreError
from monitor.features.base import Observation
from monitor.store import Enrolment, Store, open_store


def _templates(rng: np.random.Generator, seconds: float = 10.0) -> dict[str, Observation]:
    embedding = rng.standard_normal(256)
    return {
        "f0": Observation("f0", rng.integers(0, 50, 107).astype(float), seconds),
        "embedding": Observation("embedding", embedding / np.linalg.norm(embedding), seconds),
    }


def test_identities_and_metadata(store: Store, rng: np.random.Generator) -> None:
    store.replace_templates("spk2", _templates(rng), metadata={"gender": "f"})
    store.add_identity("spk1", {"split": "train"})
    with pytest.raises(StoreError, match="'spk1' already exists"):
        store.add_identity("spk1")
    listed = store.identities()
    assert [i.alias for i in listed] == ["spk1", "spk2"]
    assert listed[0].metadata == {"split": "train"} and listed[0].templates == {}
    assert list(listed[1].templates) == ["f0", "embedding"]  # FEATURE_NAMES order
    assert listed[1].templates["embedding"].dimension == 256
    assert listed[1].templates["f0"].seconds == 10.0
    assert store.identity("spk2").metadata == {"gender": "f"}
    store.replace_templates("spk2", _templates(rng))  # metadata=None keeps it
    assert store.identity("spk2").metadata == {"gender": "f"}
    with pytest.raises(ValueError, match="alias ' x'"):
        store.add_identity(" x")


def test_remove_identity_cascades(store: Store, rng: np.random.Generator) -> None:
    templates = _templates(rng)
    store.replace_templates("spk1", templates)
    store.add_local_profile("alice", "spk1", templates["embedding"])
    store.remove_identity("spk1")
    assert store.identities() == [] and store.local_profiles() == []
    assert store.template_counts() == {}
    with pytest.raises(StoreError, match="no identity with alias 'spk1'"):
        store.remove_identity("spk1")


def test_reenrolment_replaces_all_templates(store: Store, rng: np.random.Generator) -> None:
    store.replace_templates("spk1", _templates(rng))
    new = {"f0": Observation("f0", np.arange(107.0), 4.0)}
    store.replace_templates("spk1", new)
    assert set(store.identity("spk1").templates) == {"f0"}  # embedding gone: replaced, not merged
    np.testing.assert_array_equal(store.template("spk1", "f0").values, np.arange(107.0))


def test_failure_mid_replace_keeps_old_templates(store: Store, rng: np.random.Generator) -> None:
    store.replace_templates("other", _templates(rng))  # fixes embedding dimension 256
    old = _templates(rng, seconds=7.0)
    store.replace_templates("spk1", old)
    # f0 is valid and is written after the delete; the 255-d embedding then fails.
    bad = {
        "f0": Observation("f0", np.ones(107), 1.0),
        "embedding": Observation("embedding", np.ones(255), 1.0),
    }
    with pytest.raises(ValueError, match="dimension 255 differs from the stored templates' 256"):
        store.replace_templates("spk1", bad)
    for feature, observation in old.items():
        kept = store.template("spk1", feature)
        np.testing.assert_array_equal(kept.values, observation.values)
        assert kept.seconds == 7.0
    # The same in bulk: the first enrolment is rolled back with the failing second one.
    with pytest.raises(ValueError, match="identity 'spk1'"):
        store.bulk_replace_templates([Enrolment("new", _templates(rng)), Enrolment("spk1", bad)])
    assert [i.alias for i in store.identities()] == ["other", "spk1"]


def test_template_batch_order_and_shape(store: Store, rng: np.random.Generator) -> None:
    aliases = ["zed", "amy", "kim", "bob"]
    enrolled = {a: _templates(rng) for a in aliases}
    store.bulk_replace_templates(Enrolment(a, t) for a, t in enrolled.items())
    store.replace_templates("amy", enrolled["amy"])  # re-enrolment keeps the row's place
    store.replace_templates("only-f0", {"f0": Observation("f0", np.ones(107), 1.0)})
    names, batch = store.template_batch("embedding")
    assert names == tuple(aliases)  # enrolment order, stable
    assert batch.feature == "embedding" and batch.matrix.shape == (4, 256)
    assert batch.matrix.dtype == np.float64
    expected = np.stack([enrolled[a]["embedding"].values for a in names])
    np.testing.assert_array_equal(batch.matrix, expected)
    f0_names, f0 = store.template_batch("f0")
    assert f0_names == (*aliases, "only-f0") and f0.matrix.shape == (5, 107)
    assert store.template_batch("f0")[0] == f0_names  # same order on every call
    assert store.template_counts() == {"embedding": 4, "f0": 5}
    with pytest.raises(StoreError, match="no 'phone' templates"):
        store.template_batch("phone")


def test_template_batch_of_1e5_identities(tmp_path: Path, rng: np.random.Generator) -> None:
    N, D = 100_000, 256
    matrix = rng.standard_normal((N, D))
    with open_store(tmp_path / "big.db") as store:
        started = time.perf_counter()
        store.bulk_replace_templates(
            Enrolment(f"id{i:06d}", {"embedding": Observation("embedding", matrix[i], 3.0)})
            for i in range(N)
        )
        enrolled = time.perf_counter() - started
    with open_store(tmp_path / "big.db") as store:
        started = time.perf_counter()
        aliases, batch = store.template_batch("embedding")
        loaded = time.perf_counter() - started
    print(f"\nN={N} D={D}: bulk enrol {enrolled:.2f} s, template_batch {loaded:.3f} s")
    assert len(aliases) == N and aliases[12345] == "id012345"
    np.testing.assert_array_equal(batch.matrix, matrix)


def test_local_profiles(store: Store, rng: np.random.Generator) -> None:
    templates = _templates(rng)
    store.replace_templates("spk7", templates)
    store.add_local_profile("kitchen-user", "spk7", templates["embedding"])
    newer = Observation("embedding", -templates["embedding"].values, 20.0)
    store.add_local_profile("kitchen-user", "spk7", newer)  # update in place
    (profile,) = store.local_profiles()
    assert profile.alias == "kitchen-user" and profile.identity_alias == "spk7"
    np.testing.assert_array_equal(profile.embedding.values, newer.values)
    assert profile.embedding.seconds == 20.0
    assert store.identity("spk7").local_profiles == ("kitchen-user",)
    with pytest.raises(StoreError, match="no identity with alias 'ghost'"):
        store.add_local_profile("x", "ghost", newer)
    store.remove_local_profile("kitchen-user")
    assert store.local_profiles() == [] and store.identity("spk7").templates
    with pytest.raises(StoreError, match="no local profile"):
        store.remove_local_profile("kitchen-user")


def test_calibration_round_trip(store: Store) -> None:
    assert store.load_calibration() is None
    bucket = BucketCalibration(
        seconds=3.0,
        alpha=1.2,
        beta=8.0,
        loss="ll",
        lid_weight=2.5,
        lid_bias=-1.0,
        log_prior_odds=-5.5,
    )
    calibration = CalibrationSet(
        {"embedding": (bucket,)},
        {"corpus": "speechocean762", "protocol": {"name": "eq. 6"}, "created": "2026-11-22"},
    )
    store.save_calibration(calibration)
    loaded = store.load_calibration()
    assert loaded is not None
    assert loaded.lookup("embedding", 3.0)[0].alpha == 1.2
    record = store.calibration_record()
    assert record is not None
    assert (record.corpus, record.fitted) == ("speechocean762", "2026-11-22")
    assert '"eq. 6"' in (record.protocol or "")
    store.save_calibration_document({"format": "other"}, name="default")
    with pytest.raises(Exception, match="calibration 'default'"):
        store.load_calibration()  # the latest document is not a calibration: named error
