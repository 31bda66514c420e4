"""Hostile input to the offline commands: one line naming the problem, exit 2, nothing lost,
nothing created, and the check made before any audio is processed.

Audio comes from the espeak-ng digits corpus (``digits_corpus``: 6 speakers × 10 digits at
8 kHz), linked into temporary corpora; every command gets a private feature cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from monitor.calibration.buckets import DEFAULT_PATH
from monitor.cli import app
from monitor.store import open_store
from monitor.store.database import SCHEMA_VERSION

runner = CliRunner(env={"COLUMNS": "1000"})


def one_error_line(result: object, *words: str) -> str:
    """The run failed with exit 2 and exactly one stderr line containing every word."""
    assert result.exit_code == 2, (result.stdout, result.stderr)  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    assert "Traceback" not in result.stderr  # type: ignore[attr-defined]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def link_speakers(source: Path, target: Path, names: dict[str, str], files: int = 10) -> Path:
    """``target``/<new name>/ with symlinks to the first ``files`` utterances of each speaker."""
    target.mkdir()
    for old, new in names.items():
        folder = target / new
        folder.mkdir()
        for path in sorted((source / old).glob("*.wav"))[:files]:
            (folder / path.name).symlink_to(path)
    return target


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json")) if cache.is_dir() else []


# ---- score: .npy files that used to give tracebacks or allocate terabytes ---------------------


def huge_npy(path: Path) -> Path:
    """A valid .npy header claiming (10⁸, 10⁵) float64 (80 TB) followed by 80 bytes."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (100000000, 100000), }"
    header = header.ljust(117) + "\n"
    path.write_bytes(
        b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + bytes(80)
    )
    return path


def test_npz_renamed_npy_and_huge_header_are_one_line(tmp_path: Path) -> None:
    np.savez(tmp_path / "m.npz", x=np.zeros((3, 3)))
    (tmp_path / "m.npz").rename(tmp_path / "m.npy")
    np.save(tmp_path / "truth.npy", np.array([0, 1, 2]))
    np.save(tmp_path / "ok.npy", np.eye(3))
    huge_npy(tmp_path / "huge.npy")
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    (tmp_path / "empty.npy").write_bytes(b"")
    cases = [
        ("m.npy", "truth.npy", "m.npy", ".npz (zip) archive"),
        ("huge.npy", "truth.npy", "huge.npy", "file holds 80 bytes"),
        ("ok.npy", "huge.npy", "huge.npy", "file holds 80 bytes"),
        ("objects.npy", "truth.npy", "objects.npy", "dtype object"),
        ("empty.npy", "truth.npy", "empty.npy", "not a readable .npy"),
    ]
    for matrix, truth, named, problem in cases:
        result = runner.invoke(
            app, ["score", "--matrix", str(tmp_path / matrix), "--truth", str(tmp_path / truth)]
        )
        one_error_line(result, named, problem)
    good = runner.invoke(
        app, ["score", "--matrix", str(tmp_path / "ok.npy"), "--truth", str(tmp_path / "truth.npy")]
    )
    assert good.exit_code == 0, good.stderr


# ---- enroll: names and the database are checked before extraction ------------------------------


def test_speaker_folder_with_outer_spaces_fails_before_extraction(
    digits_corpus: Path, tmp_path: Path
) -> None:
    corpus = link_speakers(digits_corpus, tmp_path / "c", {"d1": "d1", "d2": " d2 "})
    db, cache = tmp_path / "v.db", tmp_path / "cache"
    result = runner.invoke(app, ["enroll", str(corpus), "--db", str(db), "--cache", str(cache)])
    one_error_line(result, "' d2 '", "leading or trailing spaces")
    assert not db.exists() and entries(cache) == []  # no database, nothing extracted

    odd = link_speakers(digits_corpus, tmp_path / "o", {"d1": "d1", "d2": "d\n2"})
    result = runner.invoke(app, ["enroll", str(odd), "--db", str(db), "--cache", str(cache)])
    one_error_line(result, "control character")
    assert not db.exists() and entries(cache) == []


def test_newer_schema_database_fails_before_extraction(digits_corpus: Path, tmp_path: Path) -> None:
    db, cache = tmp_path / "v.db", tmp_path / "cache"
    with open_store(db) as store, store._transaction() as conn:  # a future voxmeter's step
        conn.execute(
            "INSERT INTO schema_migrations VALUES (?, 'future', 'now')", (SCHEMA_VERSION + 1,)
        )
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    result = runner.invoke(
        app, ["enroll", str(digits_corpus), "--db", str(db), "--cache", str(cache)]
    )
    one_error_line(result, str(db), "newer than this voxmeter supports")
    assert entries(cache) == []
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_locked_database_fails_before_extraction(digits_corpus: Path, tmp_path: Path) -> None:
    db, cache = tmp_path / "v.db", tmp_path / "cache"
    with open_store(db):
        pass
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing, as a second enrolment would
    try:
        result = runner.invoke(
            app, ["enroll", str(digits_corpus), "--db", str(db), "--cache", str(cache)]
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    one_error_line(result, str(db), "locked by another process")
    assert entries(cache) == [] and db.exists()  # nothing extracted; the database is kept


def test_failed_enrolment_leaves_no_empty_database(digits_corpus: Path, tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    result = runner.invoke(
        app,
        ["enroll", str(digits_corpus), "--db", str(db), "--features", "f0", "--min-speech", "30",
         "--cache", str(tmp_path / "cache")],
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("voxmeter: error")]
    assert len(errors) == 1 and "no speaker has usable speech" in errors[0], result.stderr
    assert "60 files skipped" in errors[0] and "minimum 30 s" in errors[0]  # names the option
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("v.db")) == []


def test_existing_database_is_made_private(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    with open_store(db):
        pass
    os.chmod(db, 0o644)
    result = runner.invoke(app, ["db", "list", "--db", str(db)])
    assert result.exit_code == 0, result.stderr
    for file in tmp_path.glob("v.db*"):
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file


# ---- calibrate / evaluate: where they write is checked first -----------------------------------


def test_outputs_are_checked_before_extraction(digits_corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    existing = tmp_path / "report.md"
    existing.write_text("keep me")
    result = runner.invoke(
        app, ["evaluate", str(digits_corpus), "--out", str(existing), "--cache", str(cache)]
    )
    one_error_line(result, str(existing), "--out", "is a file")
    assert existing.read_text() == "keep me"
    result = runner.invoke(
        app, ["calibrate", str(digits_corpus), "--out", str(tmp_path), "--cache", str(cache)]
    )
    one_error_line(result, "--out", "is a folder")
    result = runner.invoke(
        app,
        ["calibrate", str(digits_corpus), "--out", str(existing / "c.json"), "--cache", str(cache)],
    )
    one_error_line(result, "--out", "is a file, not a folder")
    result = runner.invoke(
        app,
        ["evaluate", str(digits_corpus), "--out", str(tmp_path / "r"), "--protected",
         str(tmp_path / "missing"), "--cache", str(cache)],
    )  # fmt: skip
    one_error_line(result, "--protected", "missing")
    assert entries(cache) == []


def test_calibrate_never_replaces_the_shipped_file_by_default(
    digits_corpus: Path, tmp_path: Path
) -> None:
    shipped = hashlib.sha256(DEFAULT_PATH.read_bytes()).hexdigest()
    # Through the real entry point, run from the checkout root.
    checkout = DEFAULT_PATH.parents[3]
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from monitor.cli import main; sys.exit(main())",
         "calibrate", str(digits_corpus), "--no-cache"],
        cwd=checkout, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--out" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert hashlib.sha256(DEFAULT_PATH.read_bytes()).hexdigest() == shipped


# ---- the feature cache: read-only is a warning, privacy commands ------------------------------


@contextlib.contextmanager
def read_only_folder(path: Path, fill: Callable[[Path], None] = lambda _: None) -> Iterator[Path]:
    """A folder nobody can write in, after ``fill(path)`` put files there: mode 0500 for a
    normal user; for root (who ignores modes) a tmpfs remounted read-only, or a skip where
    mounting is not allowed."""
    path.mkdir()
    if os.geteuid() != 0:
        fill(path)
        path.chmod(0o500)
        try:
            yield path
        finally:
            path.chmod(0o700)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"root cannot make a read-only folder here: {mounted.stderr.decode().strip()}")
    try:
        fill(path)
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_read_only_database_fails_before_extraction(digits_corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    def database(folder: Path) -> None:
        with open_store(folder / "v.db"):
            pass

    with read_only_folder(tmp_path / "ro", database) as folder:
        for db in (folder / "v.db", folder / "new.db"):  # existing, and to be created
            result = runner.invoke(
                app, ["enroll", str(digits_corpus), "--db", str(db), "--cache", str(cache)]
            )
            line = one_error_line(result, str(db))
            assert "read-only" in line.lower(), line
            assert entries(cache) == []
        assert sorted(p.name for p in folder.iterdir()) == ["v.db"]


def test_read_only_cache_warns_once_and_enrols(digits_corpus: Path, tmp_path: Path) -> None:
    corpus = link_speakers(digits_corpus, tmp_path / "c", {"d1": "d1", "d2": "d2"}, files=3)
    db = tmp_path / "v.db"
    with read_only_folder(tmp_path / "ro") as cache:
        result = runner.invoke(
            app, ["enroll", str(corpus), "--db", str(db), "--features", "f0", "--cache", str(cache)]
        )
    assert result.exit_code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "continuing without it" in warnings[0], result.stderr
    assert str(cache) in warnings[0]
    assert "enrolled 2 speakers" in result.stdout
    # A cache path under a file cannot even be created: the same single warning.
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(
        app,
        ["enroll", str(corpus), "--db", str(db), "--features", "f0", "--cache", str(blocker / "c")],
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("continuing without it") == 1


def test_cache_info_clear_and_db_remove(digits_corpus: Path, tmp_path: Path) -> None:
    corpus = link_speakers(digits_corpus, tmp_path / "c", {"d1": "d1", "d2": "d2"}, files=3)
    (corpus / "speakers.tsv").write_text(
        "speaker\tname\temail\tgender\tage\toriginal_split\n"
        "d1\tAlice Example\talice@example.org\tf\t31\ttrain\n"
        "d2\tBob Example\tbob@example.org\tm\t42\ttest\n"
    )
    db, cache = tmp_path / "v.db", tmp_path / "cache"
    base = ["--db", str(db), "--features", "f0", "--cache", str(cache)]
    assert runner.invoke(app, ["enroll", str(corpus), *base]).exit_code == 0
    with open_store(db) as store:
        metadata = store.identity("d1").metadata
    assert metadata == {"gender": "f", "age": "31", "original_split": "train", "corpus": "c"}
    assert "Alice" not in db.read_bytes().decode("latin-1")  # nowhere in the file

    info = runner.invoke(app, ["cache", "info", "--cache", str(cache)])
    assert info.exit_code == 0 and f"{cache}: 6 entries" in info.stdout, info.stdout
    removed = runner.invoke(app, ["db", "remove", "d1", "--db", str(db), "--cache", str(cache)])
    assert removed.exit_code == 0, removed.stderr
    assert "3 feature cache entries" in removed.stdout
    left = [json.loads(e.read_text())["stamp"]["path"] for e in entries(cache)]
    assert len(left) == 3 and all("/d2/" in p for p in left)
    cleared = runner.invoke(app, ["cache", "clear", "--cache", str(cache)])
    assert cleared.exit_code == 0 and "removed 3 feature cache entries" in cleared.stdout
    assert entries(cache) == []
    one_error_line(runner.invoke(app, ["cache", "info", "--cache", str(db)]), "not a feature cache")


def test_db_show_and_remove_find_an_alias_typed_in_another_unicode_form(tmp_path: Path) -> None:
    """A folder enrolled as "José" with a combining accent (macOS) is found when "José" is
    typed precomposed; an alias matching nothing stays one error line."""
    db = tmp_path / "v.db"
    with open_store(db) as store:
        store.add_identity("Jose\u0301", {"corpus": "c"})
        store.add_identity("名前", {})
    shown = runner.invoke(app, ["db", "show", "Jos\u00e9", "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["alias"] == "Jose\u0301"
    removed = runner.invoke(
        app, ["db", "remove", "Jos\u00e9", "--db", str(db), "--cache", str(tmp_path / "none")]
    )
    assert removed.exit_code == 0, removed.stderr
    with open_store(db) as store:
        assert [i.alias for i in store.identities()] == ["名前"]
    one_error_line(runner.invoke(app, ["db", "show", "Jos\u00e9", "--db", str(db)]), "no identity")


def test_cache_clear_on_a_folder_with_other_files_deletes_only_entries(tmp_path: Path) -> None:
    """``--cache`` pointed at a report folder: its report.json and notes stay (they were deleted
    as if they were entries)."""
    folder = tmp_path / "report"
    folder.mkdir()
    mine = {folder / "report.json": "{}", folder / "notes.tmp": "draft"}
    theirs = {folder / f"{'ab' * 16}.json": "{}", folder / "tmpk3_9x0qz.tmp": "{"}
    for path, text in {**mine, **theirs}.items():
        path.write_text(text)
    info = runner.invoke(app, ["cache", "info", "--cache", str(folder)])
    assert info.exit_code == 0 and f"{folder}: 1 entries" in info.stdout, info.stdout
    cleared = runner.invoke(app, ["cache", "clear", "--cache", str(folder)])
    assert cleared.exit_code == 0 and "removed 1 feature cache entries" in cleared.stdout
    assert sorted(folder.iterdir()) == sorted(mine)


@pytest.mark.parametrize(
    "args",
    [
        ["enroll", "--seconds", "inf"],
        ["evaluate", "--test-seconds", "3,inf", "--out", "OUT"],
        ["evaluate", "--test-seconds", "3", "--template-seconds", "inf", "--out", "OUT"],
        ["calibrate", "--buckets", "inf", "--out", "OUT/c.json"],
    ],
)
def test_infinite_lengths_are_one_line(tmp_path: Path, args: list[str]) -> None:
    """``inf`` seconds was a traceback (enroll) or an "inf s" audit that could never run."""
    folder = tmp_path / "c" / "spk"
    folder.mkdir(parents=True)
    (folder / "a.wav").write_bytes(b"")
    command = [a.replace("OUT", str(tmp_path / "out")) for a in args]
    result = runner.invoke(
        app,
        [command[0], str(tmp_path / "c"), *command[1:], "--db", str(tmp_path / "v.db")]
        if command[0] == "enroll"
        else [command[0], str(tmp_path / "c"), *command[1:]],
    )
    one_error_line(result, "inf", "positive")
    assert not (tmp_path / "v.db").exists() and not (tmp_path / "out").exists()


def test_a_file_name_with_a_newline_is_one_escaped_error_line(tmp_path: Path) -> None:
    """The name's newline would split the message and forge a second 'voxmeter:' line."""
    path = tmp_path / "a\nvoxmeter: all good.wav"
    path.write_text("not audio")
    line = one_error_line(runner.invoke(app, ["features", str(path)]), "not readable as audio")
    assert "a\\nvoxmeter: all good.wav" in line


def test_calibrate_out_on_a_pipe_or_device_is_refused_and_left_alone(
    digits_corpus: Path, tmp_path: Path
) -> None:
    """The atomic rename replaced whatever ``--out`` named: as root, ``--out /dev/full`` turned
    the device into a JSON file. A FIFO stands in for the device here."""
    from monitor.errors import InputError
    from monitor.outputs import write_text_atomic

    pipe = tmp_path / "calibration.json"
    os.mkfifo(pipe)
    cache = tmp_path / "cache"
    result = runner.invoke(
        app, ["calibrate", str(digits_corpus), "--out", str(pipe), "--cache", str(cache)]
    )
    one_error_line(result, str(pipe), "--out", "not a regular file")
    with pytest.raises(InputError, match="not a regular file"):
        write_text_atomic(pipe, "{}")
    assert stat.S_ISFIFO(pipe.lstat().st_mode) and entries(cache) == []


@pytest.mark.parametrize("command", [["db", "list"], ["enroll", "CORPUS", "--features", "f0"]])
def test_a_database_path_naming_a_pipe_is_one_line(tmp_path: Path, command: list[str]) -> None:
    """``--db /dev/null`` gave 'disk I/O error' and left /dev/null-journal behind; a FIFO
    stands in for the device."""
    pipe = tmp_path / "v.db"
    os.mkfifo(pipe)
    (tmp_path / "c" / "spk").mkdir(parents=True)
    sf.write(tmp_path / "c" / "spk" / "a.wav", np.zeros(1600, dtype=np.float32), 16000)
    args = [a.replace("CORPUS", str(tmp_path / "c")) for a in command]
    one_error_line(runner.invoke(app, [*args, "--db", str(pipe)]), "not a regular file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "v.db"]


@pytest.mark.parametrize(
    "command",
    [
        ["enroll", "CORPUS", "--features", "f0"],
        ["calibrate", "CORPUS", "--out", "OUT/c.json", "--features", "f0"],
        ["status"],
        ["db", "list"],
        ["db", "show", "someone"],
        ["db", "remove", "someone"],
        ["db", "check"],
        ["db", "recover", "OUT/r.db"],
        ["run", "--source", "file:CORPUS/spk/a.wav", "--set", "prometheus.enabled=false"],
    ],
)
def test_a_dangling_database_symlink_is_one_line_and_nothing_is_created(
    tmp_path: Path, command: list[str]
) -> None:
    """``enroll --db LINK`` with LINK pointing nowhere retried O_EXCL creation until a
    RecursionError (9,845 lines) and then removed the user's link: through the real entry
    point, every command that takes --db says so in one line, exit 2, and leaves the folder,
    the link and its missing target as they were."""
    (tmp_path / "c" / "spk").mkdir(parents=True)
    sf.write(tmp_path / "c" / "spk" / "a.wav", np.zeros(16000, dtype=np.float32), 16000)
    (tmp_path / "out").mkdir()
    link = tmp_path / "v.db"
    link.symlink_to(tmp_path / "gone" / "..." / "v.db")
    (tmp_path / "w.db").symlink_to(tmp_path / "missing.db")  # target's folder exists
    before = sorted(p.name for p in tmp_path.rglob("*"))
    checkout = DEFAULT_PATH.parents[3]
    for db in (link, tmp_path / "w.db"):
        args = [
            a.replace("CORPUS", str(tmp_path / "c")).replace("OUT", str(tmp_path / "out"))
            for a in command
        ]
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from monitor.cli import main; sys.exit(main())",
             *args, "--db", str(db), "--cache", str(tmp_path / "cache")] if command[0] in
            ("enroll", "calibrate") else
            [sys.executable, "-c", "import sys; from monitor.cli import main; sys.exit(main())",
             *args, "--db", str(db)],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(checkout)},
        )  # fmt: skip
        assert done.returncode == 2, (done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, lines
        assert f"{db}: a symbolic link to" in lines[0] and "does not exist" in lines[0], lines
        assert sorted(p.name for p in tmp_path.rglob("*")) == before
        assert db.is_symlink()
