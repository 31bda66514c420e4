"""The template database records which model made each template and never mixes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from typer.testing import CliRunner

from monitor.calibration.buckets import BucketCalibration, CalibrationSet
from monitor.cli import app
from monitor.daemon.build import check_template_model, load_calibration
from monitor.errors import ConfigError, InputError, StoreError
from monitor.features.base import (
    EMBEDDING_ENV,
    Observation,
    embedding_backend,
    get_feature,
    set_embedding_backend,
)
from monitor.features.embedding import EcapaEmbedding, GE2EEmbedding
from monitor.settings.config import load_config
from monitor.store import Store, open_store
from monitor.store.database import connect, migrate
from monitor.store.templates import Enrolment


@pytest.fixture(autouse=True)
def restore_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMBEDDING_ENV, embedding_backend())


def _unit(dimension: int, seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return vector / np.linalg.norm(vector)


def _enrol(store: Store, alias: str, backend: str, seed: int = 0) -> None:
    set_embedding_backend(backend)
    dimension = get_feature("embedding").dimension
    store.replace_templates(
        alias,
        {
            "f0": Observation("f0", np.arange(4.0), 3.0),
            "embedding": Observation("embedding", _unit(dimension, seed), 3.0),
        },
    )


def test_each_template_records_its_model(store: Store) -> None:
    _enrol(store, "alice", "ecapa")
    info = store.identity("alice").templates
    assert info["embedding"].model == EcapaEmbedding.version
    assert info["f0"].model == get_feature("f0").version
    assert store.template_model("embedding") == EcapaEmbedding.version


def test_enrolling_with_another_backend_is_refused_and_changes_nothing(store: Store) -> None:
    _enrol(store, "alice", "ge2e", 1)
    _enrol(store, "bob", "ge2e", 2)
    before = store.template("alice", "embedding")
    for alias in ("carol", "alice"):  # a new speaker, or re-enrolling one of several
        with pytest.raises(StoreError) as caught:
            _enrol(store, alias, "ecapa", 3)
        message = str(caught.value)
        assert "\n" not in message
        assert "made by ge2e, not ecapa" in message and "--embedding ge2e" in message
    assert [i.alias for i in store.identities()] == ["alice", "bob"]
    assert np.array_equal(store.template("alice", "embedding").values, before.values)


def test_bulk_enrolment_with_mixed_backends_is_refused_whole(store: Store) -> None:
    set_embedding_backend("ge2e")
    ge2e = Observation("embedding", _unit(256, 1), 3.0)
    ecapa = Observation("embedding", _unit(192, 2), 3.0)
    with pytest.raises(StoreError, match="made by ge2e, not ecapa"):
        store.bulk_replace_templates(
            [
                Enrolment("a", {"embedding": ge2e}),
                Enrolment("b", {"embedding": ecapa}, models={"embedding": EcapaEmbedding.version}),
            ]
        )
    assert store.identities() == []


def test_the_only_speaker_may_be_re_enrolled_with_another_backend(store: Store) -> None:
    _enrol(store, "alice", "ge2e")
    _enrol(store, "alice", "ecapa")  # nothing left to mix with
    assert store.template_model("embedding") == EcapaEmbedding.version


def test_migration_marks_old_embedding_templates_as_ge2e(db_path: Path) -> None:
    path, conn = connect(db_path)
    migrate(conn, path, target=2)
    conn.execute("INSERT INTO identities (alias, metadata, created) VALUES ('old', '{}', 'x')")
    conn.execute(
        "INSERT INTO templates VALUES (1, 'embedding', 2, 3.5, ?, 'x')",
        (np.array([0.6, 0.8]).tobytes(),),
    )
    conn.execute("INSERT INTO templates VALUES (1, 'f0', 1, 3.5, ?, 'x')", (np.ones(1).tobytes(),))
    conn.close()
    with open_store(db_path) as store:
        assert store.template_model("embedding") == GE2EEmbedding.version
        assert store.identity("old").templates["f0"].model == ""


def test_daemon_refuses_a_database_of_another_backend(store: Store) -> None:
    _enrol(store, "alice", "ge2e")
    config = load_config(None, ["features.embedding=ecapa"])
    set_embedding_backend(config.features.embedding)
    with pytest.raises(ConfigError) as caught:
        check_template_model(store, "embedding", get_feature("embedding"))
    assert str(caught.value) == (
        f"config key 'features.embedding': {store.path} was enrolled with the ge2e backend, "
        'not ecapa: set features.embedding = "ge2e" or re-enrol into a new database'
    )
    set_embedding_backend("ge2e")
    check_template_model(store, "embedding", get_feature("embedding"))  # the right one passes


def test_voxmeter_run_on_a_database_of_the_previous_default_is_one_line(
    db_path: Path, tmp_path: Path
) -> None:
    with open_store(db_path) as store:
        _enrol(store, "alice", "ecapa-int8")  # the default before CAM++ int8
    stream = tmp_path / "silence.wav"
    soundfile.write(stream, np.zeros(16000, dtype=np.float32), 16000)
    # the real entry point in its own process: `run` configures logging for the process
    env = {k: v for k, v in os.environ.items() if k != EMBEDDING_ENV}
    result = subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--db", str(db_path),
         "--source", f"file:{stream}"],
        capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert (
        "enrolled with the ecapa-int8 backend, not campplus-int8: set features.embedding = "
        '"ecapa-int8" or re-enrol into a new database'
    ) in lines[0]


def test_a_calibration_of_another_backend_is_refused(store: Store, tmp_path: Path) -> None:
    bucket = BucketCalibration(3.0, 0.4, 3.0, "ll", 1.0, 0.0, 0.0)
    fitted = CalibrationSet({"embedding": (bucket,)}, {"embedding_backend": "ge2e"})
    with pytest.raises(InputError, match="fitted with the ge2e embedding, not ecapa"):
        fitted.check_embedding_backend("cal.json", "ecapa")
    fitted.check_embedding_backend("cal.json", "ge2e")
    CalibrationSet({}, {}).check_embedding_backend("old.json", "ecapa")  # unrecorded: accepted
    path = tmp_path / "cal.json"
    path.write_text(fitted.to_json())
    config = load_config(None, [f"scorer.calibration={path}", "features.embedding=ecapa"])
    with pytest.raises(InputError, match="not ecapa"):
        load_calibration(config, store)


def test_db_list_and_show_name_each_template_model(db_path: Path) -> None:
    import json

    with open_store(db_path) as store:
        _enrol(store, "alice", "campplus")
    runner = CliRunner()
    listed = json.loads(runner.invoke(app, ["db", "list", "--db", str(db_path), "--json"]).stdout)
    assert listed[0]["templates"]["embedding"]["model"] == "campplus-zh-en-common-1"
    shown = runner.invoke(app, ["db", "show", "alice", "--db", str(db_path)]).stdout
    assert "template embedding: 192 values, 3.0 s of speech" in shown
    assert "model campplus-zh-en-common-1" in shown
