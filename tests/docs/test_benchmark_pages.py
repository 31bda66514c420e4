"""The benchmark pages are generated from bench/results: every results file carries the
common schema, and every page equals a fresh rendering (a stale page fails here)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))
SCHEMA_KEYS = {
    "schema", "benchmark", "command", "commit", "date", "cpu_model", "cores", "cpu_features",
    "load_average", "targets", "figures",
}  # fmt: skip
TARGET_KEYS = {"name", "value", "op", "bound", "met", "note"}


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_results_file_carries_the_common_schema(path: Path) -> None:
    record = json.loads(path.read_text())
    assert set(record) == SCHEMA_KEYS, path.name
    assert record["schema"] == 1
    assert record["date"][:4].isdigit() and record["cpu_model"]
    assert set(record["load_average"]) == {"start", "end"}
    for target in record["targets"]:
        assert set(target) == TARGET_KEYS, (path.name, target)
        assert target["op"] in ("<=", ">=", "<", ">")


def test_every_results_file_is_on_a_page() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from render_benchmarks import PAGES

    shown = {r.name for page in PAGES for r in page.results}
    assert shown == {p.stem for p in RESULTS}


def test_the_pages_are_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_benchmarks.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_a_page_edited_by_hand_is_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: a figure changed on a page, or a missing plot, is reported."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_benchmarks

    pages = tmp_path / "benchmarks"
    shutil.copytree(render_benchmarks.PAGES_DIR, pages)
    monkeypatch.setattr(render_benchmarks, "PAGES_DIR", pages)
    assert render_benchmarks.stale() == []
    edge = pages / "edge.md"
    edge.write_text(edge.read_text().replace("| 0.12 |", "| 0.02 |", 1))
    (pages / "images" / "rooms.png").unlink()
    assert render_benchmarks.stale() == [
        "docs/benchmarks/edge.md",
        "docs/benchmarks/images/rooms.png",
    ]


HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def test_the_pages_speak_of_the_product() -> None:
    """No commit hashes or issue numbers reach a page from a results file."""
    for page in (ROOT / "docs" / "benchmarks").glob("*.md"):
        text = page.read_text()
        assert not HASH.search(text), (page.name, HASH.search(text))
        assert not re.search(r"\bissues? \d", text, re.IGNORECASE), page.name


def test_a_run_writes_the_common_schema(tmp_path: Path) -> None:
    """What a benchmark writes through bench.common.Run is what the pages read."""
    from bench.common import Run

    run = Run("example", command="python -m bench example")
    run.figures["cpu_per_audio_second"] = 0.12
    assert run.target("cpu_per_audio_second", 0.12, "<=", 0.03) is False
    assert run.target("member_right", 0.97, ">=", 0.95) is True
    record = json.loads(run.write(path=tmp_path / "example.json").read_text())
    assert set(record) == SCHEMA_KEYS
    assert [t["met"] for t in record["targets"]] == [False, True]
    assert len(record["load_average"]["start"]) == 3 and record["cores"] >= 1


def _room_summary(member_right: float) -> dict[str, object]:
    return {
        "member_right": member_right, "mixed_attributed": 0.02, "shown_tracks_per_stranger": 1.0,
        "disclosure_error_lid": {"share_within_0.1": 1.0}, "stranger_to_member": 0.0,
        "unattributed_share": 0.01, "cpu_per_audio_second": 0.01 / member_right,
    }  # fmt: skip


def test_a_rooms_run_of_several_backends_sets_them_side_by_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rooms page of a run with two embedding backends: the targets are the first
    backend's, the baseline runs only that one, and one table holds every condition's
    backends next to each other with the targets' measures and the CPU."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_benchmarks

    from bench.common import Run
    from bench.rooms_report import backend_rows, own_options, record_targets

    argv = ["--rooms", "--streams", "4", "--backends", "campplus-int8,ecapa", "--baseline", "b"]
    assert own_options(argv) == ["--streams", "4", "--backends", "campplus-int8"]
    assert own_options(["--backends=ecapa,campplus"]) == ["--backends=ecapa"]
    summaries = {
        "room16@campplus-int8": _room_summary(0.96), "tv16@campplus-int8": _room_summary(0.88),
        "room16@ecapa": _room_summary(0.80), "tv16@ecapa": _room_summary(0.70),
    }  # fmt: skip
    run = Run("rooms", command="python -m bench tracking " + " ".join(argv))
    record_targets(run, summaries, None)
    assert {t["name"].split()[0] for t in run.targets} == {
        "room16@campplus-int8",
        "tv16@campplus-int8",
    }
    rows = backend_rows(summaries)
    assert [r["row"] for r in rows] == [
        "room16@campplus-int8", "room16@ecapa", "tv16@campplus-int8", "tv16@ecapa",
    ]  # fmt: skip
    assert rows[1]["member_right"] == 0.80 and rows[1]["disclosure_share_within_0.1"] == 1.0
    run.figures = {"seed": 1, "backends": rows}
    run.write(path=tmp_path / "rooms.json")
    monkeypatch.setattr(render_benchmarks, "RESULTS", tmp_path)
    result = next(r for p in render_benchmarks.PAGES for r in p.results if r.name == "rooms")
    lines = render_benchmarks.render_result(result, {})
    header = next(line for line in lines if "member_right" in line and "cpu_per" in line)
    assert header.startswith("|  | row | member_right | mixed_attributed |")
    assert "| tv16@ecapa | tv16@ecapa | 0.7 | 0.02 |" in "\n".join(lines)
