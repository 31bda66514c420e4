"""Usage errors through the real entry point (``python -m monitor.cli``): one line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def voxmeter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("compose", "--delta", "1e-5", "--steps", "10"), "Missing option '--epsilon'"),
        (("compose", "--epsilon", "x", "--delta", "1e-5", "--steps", "10"), "'--epsilon'"),
        (("no-such-command",), "No such command 'no-such-command'"),
        (("score", "--matrix"), "--matrix"),
        # one torch process per file of a corpus would exhaust a machine: capped per CPU
        (("enroll", ".", "--db", "x.db", "--jobs", "10000"), "'--jobs'"),
        # typer parses its number options with pydantic, ASCII digits only: int("٢") is 2
        (("enroll", ".", "--db", "x.db", "--jobs", "٢"), "'--jobs'"),
        (("enroll", ".", "--db", "x.db", "--utterances", "٣"), "'--utterances'"),
        (("compose", "--epsilon", "١", "--delta", "1e-5", "--steps", "10"), "'--epsilon'"),
        (("status", "--interval", "٢"), "'--interval'"),
        (("run", "--duration", "٥"), "'--duration'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: tuple[str, ...], expected: str) -> None:
    result = voxmeter(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and expected in lines[0], result.stderr


def test_help_and_version_still_exit_0() -> None:
    assert voxmeter("--version").stdout.strip().startswith("voxmeter ")
    result = voxmeter("compose", "--help")
    assert result.returncode == 0 and "--epsilon" in result.stdout


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        (("kitchen=mic", "kitchen=stdin"), "'audio.sources': two sources are named 'kitchen'"),
        (
            (
                "a=wyoming-proxy://127.0.0.1:10390?upstream=tcp://127.0.0.1:10300",
                "b=wyoming-listen://127.0.0.1:10390",
            ),
            "'audio.sources': port 10390 is served by two sources (a and b)",
        ),
        (("living room=mic",), "'daemon.source': bad source name 'living room'"),
    ],
)
def test_several_sources_bad_input_is_one_line_before_anything_starts(
    tmp_path: Path, sources: tuple[str, ...], expected: str
) -> None:
    args = [arg for source in sources for arg in ("--source", source)]
    result = voxmeter("run", "--db", f"{tmp_path}/none.db", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.parametrize(
    "command", [["features", "x.wav"], ["enroll", "."], ["evaluate", ".", "--out", "x"]]
)
def test_a_long_error_is_one_line_at_80_columns(command: list[str]) -> None:
    """The --embedding error (over 80 characters) is printed before the command runs, by each
    command's own printer; under CliRunner's 80-column console none may wrap it."""
    from typer.testing import CliRunner

    from monitor.cli import app

    result = CliRunner(env={"COLUMNS": "80"}).invoke(app, [*command, "--embedding", "xvector"])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, result.stderr
    assert lines[0].startswith("voxmeter: error: --embedding 'xvector': expected one of ")
    assert lines[0].endswith("campplus-int8")


def test_the_error_console_prints_any_long_text_as_one_line() -> None:
    from monitor.cli.common import err_console

    with err_console.capture() as captured:
        err_console.print("voxmeter: error: " + "word " * 60, markup=False, highlight=False)
    assert captured.get().count("\n") == 1
