"""The phone backend follows the calibration in use: ``features.phone = "auto"`` (and an unset
``$VOXMETER_PHONE``) runs the backend the calibration was fitted with; an explicit other one is
refused in one line before any audio."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from monitor.calibration.buckets import (
    LEGACY_PHONE,
    BucketCalibration,
    CalibrationSet,
    default_path,
    load_default,
)
from monitor.cli import app
from monitor.cli.common import follow_shipped_phone
from monitor.daemon.build import select_phone_backend
from monitor.errors import ConfigError
from monitor.features.base import (
    EMBEDDING_BACKENDS,
    PHONE_ENV,
    phone_backend,
    set_embedding_backend,
)
from monitor.settings.config import load_config
from monitor.store import open_store


def _recorded(backend: str) -> str:
    value = load_default(backend).metadata.get("phone_backend")
    return value if isinstance(value, str) else LEGACY_PHONE


@pytest.mark.parametrize("backend", list(EMBEDDING_BACKENDS))
def test_auto_follows_each_shipped_calibration(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PHONE_ENV, raising=False)
    set_embedding_backend(backend)
    expected = _recorded(backend)
    assert load_default(backend).resolve_phone_backend("x.json", "auto") == expected
    assert follow_shipped_phone(["phone"]) == expected and phone_backend() == expected
    assert follow_shipped_phone(["f0"]) is None


def test_the_shipped_calibrations_record_their_phone_backends() -> None:
    # the default is refitted with the network; the others still hold pocketsphinx buckets
    assert _recorded("campplus-int8") == "network"
    assert _recorded("ecapa-int8") == "pocketsphinx"


def test_a_calibration_without_the_record_is_pocketsphinx() -> None:
    bucket = BucketCalibration(3.0, 0.4, 3.0, "ll", 1.0, 0.0, 0.0)
    old = CalibrationSet({"phone": (bucket,)}, {})
    assert old.phone_backend == "pocketsphinx"
    assert old.resolve_phone_backend("old.json", "auto") == "pocketsphinx"
    assert old.resolve_phone_backend("old.json", "pocketsphinx") == "pocketsphinx"
    with pytest.raises(ConfigError, match=r"old\.json was fitted with 'pocketsphinx'"):
        old.resolve_phone_backend("old.json", "network")


def test_the_daemon_refuses_a_phone_backend_its_calibration_was_not_fitted_with(
    tmp_path: Path,
) -> None:
    with open_store(tmp_path / "voxmeter.db") as store:
        auto = load_config(None, ["features.embedding=ecapa-int8"])
        assert auto.features.phone == "auto"
        assert select_phone_backend(auto, store) == "pocketsphinx" == phone_backend()
        default = load_config(None, [])
        assert select_phone_backend(default, store) == "network" == phone_backend()
        explicit = load_config(None, ["features.embedding=ecapa-int8", "features.phone=network"])
        with pytest.raises(ConfigError) as caught:
            select_phone_backend(explicit, store)
    message = str(caught.value)
    assert "\n" not in message
    assert message == (
        f"config key 'features.phone': 'network', but the calibration "
        f"{default_path('ecapa-int8')} was fitted with 'pocketsphinx': set features.phone = "
        '"auto" (or "pocketsphinx"), or fit a calibration with '
        "`VOXMETER_PHONE=network voxmeter calibrate`"
    )
    assert caught.value.exit_code == 2


def test_evaluate_refuses_a_phone_backend_its_calibration_was_not_fitted_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PHONE_ENV, "network")
    corpus = tmp_path / "corpus"
    corpus.mkdir()  # empty: the refusal comes before any audio is looked for
    args = ["evaluate", str(corpus), "--out", str(tmp_path / "out"), "--embedding", "ecapa-int8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "'$VOXMETER_PHONE': 'network'" in lines[0]
    assert str(default_path("ecapa-int8")) in lines[0] and '"auto"' in lines[0]
    assert not (tmp_path / "out").exists()
