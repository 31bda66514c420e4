"""Numbers a user types are ASCII: ``compose --steps ٧`` is refused, not read as 7.

Python's int()/float() read every Unicode decimal digit; each hand-parsed number (step counts,
bucket lengths, source specs, truth and score text files) must refuse them in one line naming
the option or file (typer's own number options: tests/test_cli_usage.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.errors import InputError
from monitor.numerals import ascii_digits, ascii_float, ascii_int
from monitor.sources.spec import parse_source

runner = CliRunner(env={"COLUMNS": "1000"})

# Arabic-Indic, extended Arabic-Indic (Persian), Devanagari, fullwidth seven; superscript two.
SEVENS = ("٧", "۷", "७", "７")


@pytest.mark.parametrize("seven", SEVENS)
def test_unicode_digits_are_not_numbers(seven: str) -> None:
    assert int(seven) == 7  # what Python does, and why this module exists
    with pytest.raises(ValueError, match="ASCII"):
        ascii_int(seven)
    with pytest.raises(ValueError, match="ASCII"):
        ascii_float(f"{seven}.5")
    assert not ascii_digits(seven) and not ascii_digits("²")
    assert ascii_int(" 7 ") == 7 and ascii_float("7.5") == 7.5 and ascii_digits("0716")


def one_line(args: list[str], *words: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("seven", SEVENS)
def test_compose_steps_in_another_script_is_one_line(seven: str) -> None:
    one_line(["compose", "--epsilon", "1", "--delta", "0.01", "--steps", seven], "--steps", seven)
    one_line(["compose", "--epsilon", "1", "--delta", "0.01", "--steps", "5", seven], "--steps")
    ok = runner.invoke(app, ["compose", "--epsilon", "1", "--delta", "0.01", "--steps", "7"])
    assert ok.exit_code == 0, ok.stderr


def test_corpus_lengths_and_config_values_refuse_unicode_digits(tmp_path: Path) -> None:
    out = str(tmp_path / "c.json")
    one_line(["calibrate", str(tmp_path), "--out", out, "--buckets", "1,٢"], "--buckets", "٢")
    one_line(["calibrate", str(tmp_path), "--out", out, "--template-seconds", "١٢"], "--template")
    one_line(["run", "--set", "budget.bits=٧"], "budget.bits")
    one_line(["run", "--set", "prometheus.port=٩٠٩٠"], "prometheus.port")
    assert not (tmp_path / "c.json").exists()


def test_source_specs_take_ascii_numbers_only() -> None:
    assert parse_source("stdin:16000:2").rate_hz == 16000
    with pytest.raises(InputError, match="stdin"):
        parse_source("stdin:١٦٠٠٠")
    assert parse_source("mic:3").device == 3
    assert parse_source("mic:٣").device == "٣"  # a device name, never index 3
    with pytest.raises(InputError, match="Wyoming"):
        parse_source("wyoming://127.0.0.1:١٠٣٠٠")


def test_score_and_truth_text_files_take_ascii_numbers_only(tmp_path: Path) -> None:
    np.save(tmp_path / "m.npy", np.eye(3))
    (tmp_path / "truth.txt").write_text("0\n١\n2\n", encoding="utf-8")
    one_line(
        ["score", "--matrix", str(tmp_path / "m.npy"), "--truth", str(tmp_path / "truth.txt")],
        "truth.txt:2",
        "١",
    )
    (tmp_path / "truth.txt").write_text("0\n1\n2\n", encoding="utf-8")
    ok = runner.invoke(
        app, ["score", "--matrix", str(tmp_path / "m.npy"), "--truth", str(tmp_path / "truth.txt")]
    )
    assert ok.exit_code == 0, ok.stderr
