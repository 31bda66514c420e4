"""Bounded reading: every file a user names is checked before it is read — a FIFO
without a writer, /dev/zero, a directory or a socket is one line and exit 2 at once; a config
over 1 MiB, a score or key line over 64 KiB is one line naming the file and line; and no input,
however hostile, prints traceback text."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from monitor.cli import main
from monitor.errors import InputError
from monitor.scorefiles.trials import read_scores_key
from monitor.userfiles import MAX_CONFIG_BYTES, MAX_LINE_BYTES, read_bytes, regular_file

ERROR_PREFIX = "voxmeter: error: "


@contextlib.contextmanager
def guard(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM interrupts a blocked open() or read()."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def voxmeter(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the real entry point in this process; (exit code, stdout, stderr) at fd level, so
    text printed by library threads (pyarrow's) is caught too."""
    capfd.readouterr()
    saved = sys.argv
    sys.argv = ["voxmeter", *map(str, args)]
    try:
        code = main()
    finally:
        sys.argv = saved
    out, err = capfd.readouterr()
    return code, out, err


def assert_one_error_line(code: int, err: str, *words: str) -> str:
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), err
    for word in words:
        assert word in lines[0], lines[0]
    assert "Traceback" not in err and "Exception" not in err
    return lines[0]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Valid files of every kind, and the special files to put in their place."""
    (tmp_path / "s.txt").write_text("a b 1.5\nc d -0.5\n")
    (tmp_path / "k.txt").write_text("a b target\nc d nontarget\n")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "M.npy", rng.normal(size=(6, 3)))
    np.save(tmp_path / "T.npy", np.array([0, 1, 2, 0, 1, 2]))
    (tmp_path / "c.toml").write_text("[budget]\nbits = 20.0\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {
        "scores": tmp_path / "s.txt",
        "key": tmp_path / "k.txt",
        "matrix": tmp_path / "M.npy",
        "truth": tmp_path / "T.npy",
        "config": tmp_path / "c.toml",
        "fifo": fifo,
        "zero": Path("/dev/zero"),
        "folder": tmp_path,
    }


def _score_args(inputs: dict[str, Path], option: str, special: Path) -> list[str]:
    pooled = {"--scores": inputs["scores"], "--key": inputs["key"]}
    matrix = {"--matrix": inputs["matrix"], "--truth": inputs["truth"]}
    dev = {"--dev-matrix": inputs["matrix"], "--dev-truth": inputs["truth"]}
    given = pooled if option in pooled else {**matrix, **dev}
    given[option] = special
    return ["score", *[str(x) for pair in given.items() for x in pair]]


OPTIONS = ("--scores", "--key", "--matrix", "--truth", "--dev-matrix", "--dev-truth", "--config")


@pytest.mark.parametrize("option", OPTIONS)
@pytest.mark.parametrize(("special", "problem"), [("fifo", "FIFO"), ("zero", "character device")])
def test_a_fifo_or_dev_zero_is_refused_within_a_second(
    inputs: dict[str, Path], capfd: pytest.CaptureFixture[str], option: str, special: str, problem
) -> None:
    def command(path: Path) -> list[str]:
        if option == "--config":
            return ["run", "--config", str(path)]
        return _score_args(inputs, option, path)

    voxmeter(capfd, *command(inputs["folder"] / "absent"))  # the same imports done, untimed
    args = command(inputs[special])
    with guard(20.0):
        started = time.monotonic()
        code, _, err = voxmeter(capfd, *args)
        elapsed = time.monotonic() - started
    assert_one_error_line(code, err, str(inputs[special]), "not a regular file", problem)
    assert elapsed < 1.0, elapsed


@pytest.mark.parametrize("option", OPTIONS)
def test_a_directory_or_a_socket_is_refused(
    inputs: dict[str, Path], capfd: pytest.CaptureFixture[str], option: str, tmp_path: Path
) -> None:
    server = socket.socket(socket.AF_UNIX)
    path = tmp_path / "sock"
    server.bind(str(path))
    try:
        for special, problem in ((inputs["folder"], "is a directory"), (path, "a socket")):
            if option == "--config":
                args = ["run", "--config", str(special)]
            else:
                args = _score_args(inputs, option, special)
            with guard(20.0):
                code, _, err = voxmeter(capfd, *args)
            assert_one_error_line(code, err, str(special), problem)
    finally:
        server.close()


def test_a_config_over_1_mib_is_one_line(tmp_path: Path, capfd) -> None:
    big = tmp_path / "big.toml"
    big.write_text("[budget]\nbits = 20.0\n" + "# padding\n" * (MAX_CONFIG_BYTES // 10))
    code, _, err = voxmeter(capfd, "run", "--config", big)
    assert_one_error_line(code, err, str(big), "too large", f"{MAX_CONFIG_BYTES:,}")
    deep = tmp_path / "deep.toml"
    deep.write_text("v = " + "[" * 50_000 + "]" * 50_000 + "\n")
    code, _, err = voxmeter(capfd, "run", "--config", deep)
    assert_one_error_line(code, err, str(deep), "not valid TOML")


def test_read_bytes_refuses_a_file_that_grows_past_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match="too large"):
        read_bytes(path, max_bytes=100)
    assert read_bytes(path, max_bytes=101) == b"x" * 101
    assert regular_file(path, max_bytes=101) == path


@pytest.mark.parametrize("which", ["scores", "key"])
@pytest.mark.parametrize("size", [MAX_LINE_BYTES + 1, 1 << 20, 3 << 20])
def test_a_line_over_64_kib_is_named(tmp_path: Path, which: str, size: int) -> None:
    """A 1 MB trial name took 11.4 s and 1.38 GB; now one line naming the file and line (the
    3 MB one is longer than pyarrow's block, the others fit in it)."""
    (tmp_path / "s.txt").write_text("a b 1.5\nc d -0.5\n")
    (tmp_path / "k.txt").write_text("a b target\nc d nontarget\n")
    target = tmp_path / ("s.txt" if which == "scores" else "k.txt")
    with target.open("a") as handle:
        handle.write(f"e {'x' * size} {'1.0' if which == 'scores' else 'target'}\n")
    with pytest.raises(InputError) as info:
        read_scores_key(tmp_path / "s.txt", tmp_path / "k.txt")
    assert str(info.value) == f"{target}:3: line longer than {MAX_LINE_BYTES:,} characters"


def test_long_names_join_exactly(tmp_path: Path) -> None:
    """Names past 32 words end in a digest: names that share their first 300 bytes and differ
    only at the end, or only in length, are still told apart; rows stay 65 words wide."""
    stem = "n" * 300
    names = [f"{stem}{i}" for i in range(50)] + [stem + "x" * k for k in range(1, 20)]
    names += [f"short{i}" for i in range(30)]
    rng = np.random.default_rng(3)
    values = rng.normal(size=len(names)).round(6).tolist()
    key = "".join(
        f"{n} t{'x' * 400} {'target' if i % 2 else 'nontarget'}\n" for i, n in enumerate(names)
    )
    scores = "".join(f"{n} t{'x' * 400} {v!r}\n" for n, v in zip(names, values, strict=True))
    scores += "".join(f"{n}z t{'x' * 400} 9.0\n" for n in names[:40])  # never keyed
    (tmp_path / "k.txt").write_text(key)
    (tmp_path / "s.txt").write_text("".join(reversed(scores.splitlines(keepends=True))))
    joined = read_scores_key(tmp_path / "s.txt", tmp_path / "k.txt")
    assert joined.tar.tolist() == values[1::2]
    assert joined.non.tolist() == values[0::2]


def test_a_bad_label_or_pair_with_a_long_name_is_shown_short(tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text("a b 1.5\nc d -0.5\n")
    (tmp_path / "k.txt").write_text(f"a b target\nc d {'y' * 5000}\n")
    with pytest.raises(InputError) as info:
        read_scores_key(tmp_path / "s.txt", tmp_path / "k.txt")
    assert "k.txt:2: label 'yyy" in str(info.value) and len(str(info.value)) < 300


def _hostile(rng: np.random.Generator) -> dict[str, bytes]:
    """Inputs that broke readers before: random bytes, NULs, invalid UTF-8, CRLF, huge and
    non-finite numbers, blank and whitespace lines, a lone BOM."""
    return {
        "random": rng.bytes(1 << 16),
        "random-lines": b"\n".join(rng.bytes(40) for _ in range(200)),
        "nul": b"a b 1\n\x00\x00 \x00 2\n" + b"\x00" * 1000,
        "bad-utf8": b"a b 1\n\xc3\x28 d 2\n",
        "crlf": b"a b 1.5\r\nc d -0.5\r\n",
        "huge": b"a b 1e999999\nc d 9" + b"9" * 5000 + b"\n",
        "nan": b"a b nan\nc d -inf\n",
        "blank": b"\n \n\t\n",
        "bom": b"\xef\xbb\xbf",
        "tabs-and-spaces": b"a\tb 1\nc  d\t2\n",
        "commas": b"1,2,3\n4,,6\n",
        "ints": b"0 1 2\n99999999999999999999999999\n",
        "empty": b"",
    }


def test_hostile_inputs_never_print_traceback_text(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Score, key, matrix (CSV), truth and config files of hostile bytes: exit 0 with a report or
    exit 2 with one line; never 'Traceback' or 'Exception ignored' (pyarrow's UTF-8 decoder in
    an invalid-row handler printed one for 64 KiB of random bytes)."""
    rng = np.random.default_rng(23)
    (tmp_path / "s.txt").write_text("a b 1.5\nc d -0.5\n")
    (tmp_path / "k.txt").write_text("a b target\nc d nontarget\n")
    (tmp_path / "M.csv").write_text("1,2,3\n4,5,6\n")
    (tmp_path / "T.txt").write_text("0 1\n")
    for name, data in _hostile(rng).items():
        bad = tmp_path / f"{name}.txt"
        bad.write_bytes(data)
        (tmp_path / f"{name}.csv").write_bytes(data)
        (tmp_path / f"{name}.toml").write_bytes(data)
        runs = [
            ["score", "--scores", bad, "--key", tmp_path / "k.txt"],
            ["score", "--scores", tmp_path / "s.txt", "--key", bad],
            ["score", "--matrix", tmp_path / f"{name}.csv", "--truth", tmp_path / "T.txt"],
            ["score", "--matrix", tmp_path / "M.csv", "--truth", bad],
            ["status", "--config", tmp_path / f"{name}.toml", "--db", tmp_path / "none.db"],
        ]
        for args in runs:
            code, _, err = voxmeter(capfd, *args)
            assert "Traceback" not in err and "Exception" not in err, (name, args, err)
            if code != 0:
                assert code == 2 and len(err.splitlines()) == 1, (name, args, err)
                assert err.startswith(ERROR_PREFIX), (name, args, err)
