"""Development step: fit the int8 networks' activation ranges on the corpus's train speakers.

Writes ``monitor/features/int8_ranges/<backend>.json`` (committed, a few KB: tensor name ->
[min, max]; no weights), from which ``make models`` builds the int8 graphs on any machine
(:mod:`monitor.features.embedding_int8`). The windows: the first 3 s of speech (webrtcvad) of
the first utterance of every ``--step``-th train speaker, through the float ONNX graph.

    python scripts/fit_int8_ranges.py [--corpus DIR] [--step 4] [ecapa-int8 campplus-int8]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from monitor.audio.file import read_audio
from monitor.audio.vad import speech_only
from monitor.corpus import scan_corpus
from monitor.features.embedding_int8 import INT8_GRAPHS, fit_ranges
from monitor.features.embedding_onnx import graph_path
from monitor.features.fbank import ecapa_fbank, kaldi_fbank

OUT = Path(__file__).resolve().parents[1] / "monitor" / "features" / "int8_ranges"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/data/speechocean762"))
    parser.add_argument("--step", type=int, default=4, help="every step-th train speaker")
    parser.add_argument("backends", nargs="*", default=list(INT8_GRAPHS))
    args = parser.parse_args(argv)
    train = scan_corpus(args.corpus, split="train")
    speech = [
        speech_only(read_audio(train.utterances_of(s)[0].path)[0], 16000)[:48000]
        for s in list(train.speakers)[:: args.step]
    ]
    for backend in args.backends:
        float_backend = INT8_GRAPHS[backend][0]
        fbank = ecapa_fbank if float_backend == "ecapa" else kaldi_fbank
        document = fit_ranges(backend, graph_path(float_backend), [fbank(s) for s in speech])
        document["windows"] = (
            f"{len(speech)} train-split windows of 3 s speech (--step {args.step})"
        )
        OUT.mkdir(exist_ok=True)
        tensors = document.pop("tensors")
        text = json.dumps(document, indent=1)[:-2] + ',\n "tensors": {\n'
        text += ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in tensors.items())
        (OUT / f"{backend}.json").write_text(text + "\n }\n}\n")  # one line per tensor
        print(f"{backend}: {len(tensors)} tensors -> {OUT / f'{backend}.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
