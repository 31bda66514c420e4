"""`voxmeter db list|show|remove` and the one-line errors of `voxmeter enroll` (no audio)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.features.base import Observation
from monitor.store import SCHEMA_VERSION, open_store

# Wide enough that rich never wraps the one error line of a long temporary path.
runner = CliRunner(env={"COLUMNS": "1000"})


@pytest.fixture
def filled_db(db_path: Path, rng: np.random.Generator) -> Path:
    with open_store(db_path) as store:
        for alias in ("spk-b", "spk-a"):
            embedding = rng.standard_normal(256)
            store.replace_templates(
                alias,
                {
                    "f0": Observation("f0", rng.integers(0, 9, 107).astype(float), 12.5),
                    "embedding": Observation(
                        "embedding", embedding / np.linalg.norm(embedding), 12.5
                    ),
                },
                metadata={"gender": "f", "corpus": "synthetic"},
            )
        store.add_local_profile("household-1", "spk-a", store.template("spk-a", "embedding"))
    return db_path


def _one_line_error(result: object, *fragments: str) -> None:
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("voxmeter: error: "), lines
    for fragment in fragments:
        assert fragment in lines[0]


def test_db_list(filled_db: Path) -> None:
    result = runner.invoke(app, ["db", "list", "--db", str(filled_db)], terminal_width=200)
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "spk-" in line]
    assert len(rows) == 2
    assert "2 identities" in result.stdout
    row_a = next(r for r in rows if "spk-a" in r)
    assert "f0" in row_a and "embedding" in row_a and "12.5" in row_a and "household-1" in row_a
    listed = json.loads(runner.invoke(app, ["db", "list", "--db", str(filled_db), "--json"]).stdout)
    assert [i["alias"] for i in listed] == ["spk-a", "spk-b"]
    assert listed[0]["local_profiles"] == ["household-1"] and listed[1]["local_profiles"] == []
    assert listed[0]["templates"]["embedding"]["dimension"] == 256


def test_db_list_uses_environment_default(filled_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXMETER_DB", str(filled_db))
    result = runner.invoke(app, ["db", "list", "--json"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == 2


def test_db_show(filled_db: Path) -> None:
    result = runner.invoke(app, ["db", "show", "spk-a", "--db", str(filled_db)])
    assert result.exit_code == 0, result.output
    assert "gender: f" in result.stdout
    assert "template embedding: 256 values, 12.5 s of speech" in result.stdout
    assert "local profiles: household-1" in result.stdout
    shown = json.loads(
        runner.invoke(app, ["db", "show", "spk-b", "--db", str(filled_db), "--json"]).stdout
    )
    assert shown["metadata"] == {"corpus": "synthetic", "gender": "f"}


def test_db_remove(filled_db: Path) -> None:
    result = runner.invoke(app, ["db", "remove", "spk-a", "--db", str(filled_db)])
    assert result.exit_code == 0, result.output
    assert "removed spk-a" in result.stdout and "household-1" in result.stdout
    with open_store(filled_db) as store:
        assert [i.alias for i in store.identities()] == ["spk-b"]
        assert store.local_profiles() == []
    again = runner.invoke(app, ["db", "remove", "spk-a", "--db", str(filled_db)])
    _one_line_error(again, "no identity with alias 'spk-a'", str(filled_db))
    _one_line_error(runner.invoke(app, ["db", "show", "nobody", "--db", str(filled_db)]), "nobody")


def test_db_commands_do_not_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    _one_line_error(runner.invoke(app, ["db", "list", "--db", str(missing)]), "no such database")
    assert not missing.exists()


def test_newer_schema_is_one_line(filled_db: Path) -> None:
    conn = sqlite3.connect(filled_db)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'future', 'x')", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    result = runner.invoke(app, ["db", "list", "--db", str(filled_db)])
    _one_line_error(result, f"schema version {SCHEMA_VERSION + 1} is newer", "upgrade voxmeter")


def test_enroll_errors_are_one_line(filled_db: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-corpus"
    (empty / "spk1").mkdir(parents=True)
    _one_line_error(
        runner.invoke(app, ["enroll", str(empty), "--db", str(filled_db)]), "no readable"
    )
    _one_line_error(
        runner.invoke(app, ["enroll", str(tmp_path / "nowhere"), "--db", str(filled_db)]),
        "not a directory",
    )
    _one_line_error(
        runner.invoke(app, ["enroll", str(empty), "--utterances", "2", "--seconds", "5"]),
        "exclude each other",
    )
    _one_line_error(runner.invoke(app, ["enroll", str(empty), "--features", "f0,pitch"]), "pitch")
    _one_line_error(
        runner.invoke(app, ["enroll", str(empty), "--features", "f0", "--local"]), "--local"
    )


def test_enroll_into_locked_database_fails_before_extraction(
    filled_db: Path, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "spk1").mkdir(parents=True)
    # A readable (silent) file, so the scan passes and the lock is what stops the command.
    import soundfile

    soundfile.write(corpus / "spk1" / "u1.wav", np.zeros(16000, dtype=np.int16), 16000)
    holder = sqlite3.connect(filled_db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = runner.invoke(
            app,
            ["enroll", str(corpus), "--db", str(filled_db), "--no-cache"],
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _one_line_error(result, "database is locked by another process")
