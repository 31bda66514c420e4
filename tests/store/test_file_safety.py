"""voxmeter never changes a file it has not recognised as its own.

Every command that takes ``--db`` is pointed at files that are not voxmeter databases — another
application's SQLite file (with tables, or empty with user_version 7), text, random bytes — and
at voxmeter databases the owner made read-only, damaged, or hard-linked: each gets one line and
exit 2 with the file's bytes and mode exactly as before. Databases made before the application
id keep working and get it on their first write.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from monitor.cli import app
from monitor.errors import StoreError
from monitor.features.base import Observation
from monitor.store import open_store
from monitor.store.schema import APPLICATION_ID

runner = CliRunner(env={"COLUMNS": "1000"})
PAGE = 16384  # voxmeter's page size


def fingerprint(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file in ``folder``: its sha256 and mode (sidecars appearing would show too)."""
    return {
        p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def one_error_line(result: object, *words: str) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def tiny_corpus(root: Path) -> Path:
    """One speaker, one second of noise: enough for ``enroll`` to reach the database."""
    folder = root / "corpus" / "spk1"
    folder.mkdir(parents=True)
    noise = np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32)
    sf.write(folder / "a.wav", noise, 16000)
    return root / "corpus"


def commands(db: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Each command that opens ``--db``, reading or writing."""
    cache = str(tmp_path / "cache")
    return {
        "db list": ["db", "list", "--db", str(db)],
        "db show": ["db", "show", "spk1", "--db", str(db)],
        "db remove": ["db", "remove", "spk1", "--db", str(db), "--cache", cache],
        "enroll": ["enroll", str(tiny_corpus(tmp_path)), "--db", str(db), "--features", "f0",
                   "--cache", cache],
        "status": ["status", "--db", str(db)],
        "db check": ["db", "check", "--db", str(db)],
    }  # fmt: skip


def voxmeter_run(db: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", "run", "--db", str(db), "--source", "stdin",
         "--set", "prometheus.enabled=false"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def foreign_with_tables(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE songs (title TEXT)")
    conn.execute("INSERT INTO songs VALUES ('a')")
    conn.commit()
    conn.close()


def foreign_empty_user_version_7(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()


def foreign_application_id(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 1234")
    conn.execute("CREATE TABLE schema_migrations (version, description, applied)")
    conn.commit()
    conn.close()


FOREIGN = {
    "sqlite with tables": (foreign_with_tables, "not a voxmeter one"),
    "empty sqlite, user_version 7": (foreign_empty_user_version_7, "not a voxmeter one"),
    "sqlite of another application id": (foreign_application_id, "application id"),
    "text": (lambda p: p.write_text("not a database\n" * 200), "not an SQLite database"),
    "random bytes": (
        lambda p: p.write_bytes(np.random.default_rng(1).bytes(65536)),
        "not an SQLite database",
    ),
}


@pytest.mark.parametrize("kind", sorted(FOREIGN))
def test_a_file_that_is_not_ours_is_left_exactly_as_it_was(kind: str, tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "other.db"
    make, words = FOREIGN[kind]
    make(path)
    os.chmod(path, 0o644)
    before = fingerprint(folder)
    for name, args in commands(path, tmp_path).items():
        line = one_error_line(runner.invoke(app, args), str(path), words)
        assert fingerprint(folder) == before, (name, line)
    done = voxmeter_run(path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert fingerprint(folder) == before


def make_database(path: Path, identities: int = 3, dimension: int = 8) -> None:
    rng = np.random.default_rng(2)
    with open_store(path) as store:
        for index in range(identities):
            values = rng.normal(size=dimension)
            store.replace_templates(f"spk{index + 1}", {"f0": Observation("f0", values, 2.0)})


def test_a_read_only_database_stays_read_only(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "voxmeter.db"
    make_database(db)
    os.chmod(db, 0o444)
    before = fingerprint(folder)
    listed = runner.invoke(app, ["db", "list", "--db", str(db), "--json"])  # reading works
    assert listed.exit_code == 0, listed.stderr
    assert [i["alias"] for i in json.loads(listed.stdout)] == ["spk1", "spk2", "spk3"]
    assert runner.invoke(app, ["status", "--db", str(db), "--json"]).exit_code == 0
    assert runner.invoke(app, ["db", "check", "--db", str(db)]).exit_code == 0
    for name in ("db remove", "enroll"):
        args = commands(db, tmp_path / name.replace(" ", "-"))[name]
        one_error_line(runner.invoke(app, args), str(db), "read-only (mode 0444)", "chmod u+w")
    done = voxmeter_run(db)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "read-only (mode 0444)" in done.stderr
    assert fingerprint(folder) == before  # 0444 stays 0444, nothing beside it
    assert stat.S_IMODE(db.stat().st_mode) == 0o444


def test_an_old_read_only_database_needing_an_upgrade_says_so(tmp_path: Path) -> None:
    from monitor.store.database import connect, migrate

    db = tmp_path / "voxmeter.db"
    path, conn = connect(db)
    migrate(conn, path, target=1)
    conn.close()
    os.chmod(db, 0o444)
    with pytest.raises(StoreError, match=r"schema version 1 must be upgraded .* read-only"):
        open_store(db, read_only=True)
    assert stat.S_IMODE(db.stat().st_mode) == 0o444


def damage(db: Path, page: int) -> None:
    """Overwrite one page (1-based) of a real database with random bytes, as a disk might."""
    with db.open("r+b") as file:
        file.seek((page - 1) * PAGE)
        file.write(np.random.default_rng(page).bytes(PAGE))


def test_a_damaged_database_is_refused_and_can_be_recovered(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "voxmeter.db"
    make_database(db, identities=300, dimension=600)  # ~1.5 MB: templates over many leaves
    with open_store(db, read_only=True) as store:
        aliases, batch = store.template_batch("f0")
        original = dict(zip(aliases, batch.matrix.copy(), strict=True))
    pages = db.stat().st_size // PAGE
    damage(db, pages // 2)
    before = fingerprint(folder)
    with pytest.raises(StoreError) as error:
        open_store(db)
    assert str(error.value).startswith(f"{db}: the database is damaged (")
    assert "voxmeter db recover" in str(error.value)
    for name in ("db remove", "enroll"):
        args = commands(db, tmp_path / name.replace(" ", "-"))[name]
        one_error_line(runner.invoke(app, args), str(db), "damaged", "db recover")
    one_error_line(runner.invoke(app, ["db", "check", "--db", str(db)]), "damaged", "db recover")
    done = voxmeter_run(db)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "the database is damaged" in done.stderr and "db recover" in done.stderr
    assert fingerprint(folder) == before

    out = tmp_path / "recovered.db"
    done = runner.invoke(app, ["db", "recover", str(out), "--db", str(db)])
    assert done.exit_code == 0, done.stderr
    assert "rows lost in unreadable pages of" in done.stdout and "is unchanged" in done.stdout
    assert fingerprint(folder) == before
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert runner.invoke(app, ["db", "check", "--db", str(out)]).exit_code == 0
    with open_store(out) as store:
        templates = store.template_counts().get("f0", 0)
        assert 0 < templates < 300  # what was readable; the damaged page's rows are gone
        aliases, batch = store.template_batch("f0")
        for alias, row in zip(aliases, batch.matrix, strict=True):  # the values, bit for bit
            assert np.array_equal(row, original[alias])
    again = runner.invoke(app, ["db", "recover", str(out), "--db", str(db)])
    one_error_line(again, str(out), "already exists")  # never overwrites


def test_a_sound_database_recovers_whole(tmp_path: Path) -> None:
    db = tmp_path / "voxmeter.db"
    make_database(db, identities=20)
    out = tmp_path / "copy.db"
    done = runner.invoke(app, ["db", "recover", str(out), "--db", str(db)])
    assert done.exit_code == 0, done.stderr
    assert "no unreadable rows" in done.stdout
    with open_store(db) as old, open_store(out) as new:
        assert [i.alias for i in new.identities()] == [i.alias for i in old.identities()]
        assert np.array_equal(
            new.template_batch("f0")[1].matrix, old.template_batch("f0")[1].matrix
        )


def header_application_id(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[68:72], "big")


def test_a_database_made_before_the_application_id_keeps_working(tmp_path: Path) -> None:
    db = tmp_path / "voxmeter.db"
    make_database(db)
    conn = sqlite3.connect(db)  # as voxmeter made it before: no application id
    conn.execute("PRAGMA application_id = 0")
    conn.commit()
    conn.close()
    assert header_application_id(db) == 0
    before = db.read_bytes()
    with open_store(db, read_only=True) as store:  # reading does not mark it
        assert [i.alias for i in store.identities()] == ["spk1", "spk2", "spk3"]
    assert db.read_bytes() == before
    with open_store(db) as store:  # the first write-open does
        assert len(store.identities()) == 3
    assert header_application_id(db) == APPLICATION_ID


def test_a_new_database_carries_the_application_id(tmp_path: Path) -> None:
    db = tmp_path / "voxmeter.db"
    open_store(db).close()
    assert header_application_id(db) == APPLICATION_ID


def test_an_empty_file_becomes_a_database_only_when_creating(tmp_path: Path) -> None:
    db = tmp_path / "voxmeter.db"
    db.touch()
    with pytest.raises(StoreError, match="empty file"):
        open_store(db, create=False)
    with pytest.raises(StoreError, match="empty file"):
        open_store(db, read_only=True)
    assert db.stat().st_size == 0
    open_store(db).close()
    assert header_application_id(db) == APPLICATION_ID


def test_a_hard_linked_database_is_not_written(tmp_path: Path) -> None:
    db = tmp_path / "voxmeter.db"
    make_database(db)
    os.link(db, tmp_path / "second-name.db")
    before = fingerprint(tmp_path)
    with pytest.raises(StoreError, match="2 hard links"):
        open_store(tmp_path / "second-name.db")
    with open_store(db, read_only=True) as store:  # reading through either name is safe
        assert len(store.identities()) == 3
    assert {k: v for k, v in fingerprint(tmp_path).items() if k in before} == before


def test_an_old_schema_made_before_the_application_id_is_migrated_and_marked(
    tmp_path: Path,
) -> None:
    from monitor.store.database import connect, migrate
    from monitor.store.schema import SCHEMA_VERSION

    db = tmp_path / "voxmeter.db"
    path, conn = connect(db)
    migrate(conn, path, target=1)  # schema 1, as the first voxmeter releases left it
    conn.execute("PRAGMA application_id = 0")
    conn.execute("INSERT INTO identities (alias, metadata, created) VALUES ('old', '{}', 'x')")
    conn.close()
    assert header_application_id(db) == 0
    with open_store(db, create=False) as store:  # what `voxmeter run` does at start
        assert store.schema_version == SCHEMA_VERSION
        assert [i.alias for i in store.identities()] == ["old"]
    assert header_application_id(db) == APPLICATION_ID
