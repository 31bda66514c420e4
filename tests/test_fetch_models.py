"""scripts/fetch_models.py: weights are accepted only with their recorded sha256, and a
complete folder is left alone (no download)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("fetch_models", ROOT / "scripts" / "fetch_models.py")
assert _spec is not None and _spec.loader is not None
fetch_models = importlib.util.module_from_spec(_spec)
sys.modules["fetch_models"] = fetch_models  # dataclasses look their module up
_spec.loader.exec_module(fetch_models)


def test_the_fetched_weights_are_complete_and_fetching_again_does_nothing() -> None:
    # make test fetches them first (Makefile target `models`)
    assert fetch_models.missing(fetch_models.DEFAULT_DEST) == []
    assert fetch_models.fetch(fetch_models.DEFAULT_DEST) == []
    assert fetch_models.main(["--check"]) == 0


def test_a_tampered_or_truncated_weight_is_refused(tmp_path: Path) -> None:
    weight = next(w for w in fetch_models.WEIGHTS if w.name == "ecapa_mean_var_norm_emb.ckpt")
    copy = tmp_path / weight.name
    shutil.copyfile(fetch_models.DEFAULT_DEST / weight.name, copy)
    assert fetch_models.is_valid(weight, copy)
    data = bytearray(copy.read_bytes())
    data[100] ^= 0xFF
    copy.write_bytes(bytes(data))
    assert not fetch_models.is_valid(weight, copy)  # same size, other bytes
    copy.write_bytes(bytes(data[:-1]))
    assert not fetch_models.is_valid(weight, copy)
    assert weight in fetch_models.missing(tmp_path)
    assert fetch_models.main(["--check", "--dest", str(tmp_path)]) == 1
