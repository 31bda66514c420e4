"""Bad input about the population: ``[population] size`` out of range (one line naming the key
and the value, exit 2, the config file untouched), below the templates present, a database of
another backend, a shipped population file missing or damaged (the daemon does not start)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.errors import ConfigError, InputError
from monitor.features.base import FEATURE_NAMES, Observation, embedding_class, get_feature
from monitor.population import shipped
from monitor.population.shipped import load_shipped
from monitor.settings.config import load_config
from monitor.store.database import open_store
from monitor.store.templates import Enrolment


@pytest.mark.parametrize(
    ("value", "shown"),
    [("0", "0"), ("-5", "-5"), ("nan", "nan"), ("2e10", "20000000000.0"), ("1", "1")],
)
def test_a_size_out_of_range_names_the_key_and_value(value: str, shown: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"population.size={value}"])
    message = str(caught.value)
    assert caught.value.key == "population.size" and shown in message and "\n" not in message


def test_a_size_that_is_not_a_number_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[population]\nsize = "a town"\n')
    before = config.read_bytes()
    result = CliRunner().invoke(
        app, ["run", "--config", str(config), "--db", str(tmp_path / "v.db")]
    )
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        "voxmeter: error: config key 'population.size': must be a number, got 'a town'"
    ]
    assert config.read_bytes() == before and not (tmp_path / "v.db").exists()


def _enrol(db: Path, backend: str, count: int) -> None:
    """``count`` identities with random templates, the embedding made by ``backend``."""
    rng = np.random.default_rng(7)
    models = {"embedding": embedding_class(backend).version}
    enrolments = []
    for i in range(count):
        observations = {
            name: Observation(name, rng.random(get_feature(name).dimension) + 0.1, 10.0)
            for name in FEATURE_NAMES
            if name != "embedding"
        }
        dimension = embedding_class(backend).dimension
        observations["embedding"] = Observation("embedding", rng.normal(size=dimension), 10.0)
        enrolments.append(Enrolment(f"member-{i}", observations, {}, models=models))
    with open_store(db) as store:
        store.bulk_replace_templates(enrolments)


def _run(db: Path, *settings: str) -> list[str]:
    result = CliRunner().invoke(
        app,
        ["run", "--db", str(db), "--source", "stdin", *(f"--set={s}" for s in settings)],
        input=b"",
    )
    assert result.exit_code == 2, result.output
    return [line for line in result.output.splitlines() if line.strip()]


def test_a_size_below_the_templates_present_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    _enrol(db, "campplus-int8", 4)
    n = 4 + len(load_shipped("campplus-int8"))
    (line,) = _run(db, "population.size=100", "prometheus.enabled=false")
    assert line.startswith("voxmeter: error: config key 'population.size': 100 is below the")
    assert f"set it to {n} or more" in line


def test_a_database_of_another_backend_names_the_fix(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    _enrol(db, "ecapa-int8", 2)
    (line,) = _run(db, "prometheus.enabled=false")
    assert "features.embedding" in line and 'set features.embedding = "ecapa-int8"' in line


@pytest.mark.parametrize("damage", ["missing", "shape"])
def test_a_missing_or_damaged_shipped_population_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    if damage == "shape":
        with np.load(shipped.shipped_path("campplus-int8"), allow_pickle=False) as stored:
            arrays = {key: np.asarray(stored[key]) for key in stored.files}
        arrays["f0"] = arrays["f0"][:, :5]
        np.savez(data / "population-campplus-int8.npz", **arrays)  # type: ignore[arg-type]
    monkeypatch.setattr(shipped, "DATA_DIR", data)
    db = tmp_path / "v.db"
    (line,) = _run(db, "prometheus.enabled=false")
    assert line.startswith(f"voxmeter: error: {data / 'population-campplus-int8.npz'}: ")
    assert "reinstall voxmeter" in line
    assert not db.exists()  # the refused start leaves no database behind
    with pytest.raises(InputError):
        load_shipped("campplus-int8")
    shutil.rmtree(data)
