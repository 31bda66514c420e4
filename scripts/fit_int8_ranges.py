"""Development step: fit the int8 networks' activation ranges on the corpus's train speakers.

Writes ``monitor/features/int8_ranges/<backend>.json`` (committed, a few KB: tensor name ->
[min, max]; no weights), from which ``make models`` builds the int8 graphs on any machine
(:mod:`monitor.features.embedding_int8`). The windows: the first 3 s of speech (webrtcvad) of
the first utterance of every ``--step``-th train speaker, through the float ONNX graph.

With ``--probe-only`` the ranges are not refitted (no corpus needed): the int8 graph is built
from the committed ranges and the float graph in ``--models``, and only its sha256, the library
versions and its embeddings of the synthesised probe are (re)written.

    python scripts/fit_int8_ranges.py [--corpus DIR] [--step 4] [ecapa-int8 campplus-int8]
    python scripts/fit_int8_ranges.py --probe-only [--models DIR] [ecapa-int8 campplus-int8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from monitor.audio.file import read_audio
from monitor.audio.vad import speech_only
from monitor.corpus import scan_corpus
from monitor.features.embedding_int8 import (
    INT8_GRAPHS,
    dump_ranges,
    fit_ranges,
    ranges_path,
    record_probe,
)
from monitor.features.embedding_onnx import graph_path
from monitor.features.fbank import ecapa_fbank, kaldi_fbank

OUT = Path(__file__).resolve().parents[1] / "monitor" / "features" / "int8_ranges"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("../shared/data/speechocean762"))
    parser.add_argument("--step", type=int, default=4, help="every step-th train speaker")
    parser.add_argument("--probe-only", action="store_true", help="keep the ranges; probe only")
    parser.add_argument("--models", type=Path, default=None, help="float graphs' folder")
    parser.add_argument("backends", nargs="*", default=list(INT8_GRAPHS))
    args = parser.parse_args(argv)
    if args.probe_only:
        for backend in args.backends:
            folder = args.models or graph_path(INT8_GRAPHS[backend][0]).parent
            ranges_path(backend).write_text(dump_ranges(record_probe(backend, folder)))
            print(f"{backend}: probe and sha256 -> {ranges_path(backend)}")
        return 0
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
        (OUT / f"{backend}.json").write_text(dump_ranges(document))
        print(f"{backend}: {len(document['tensors'])} tensors -> {OUT / f'{backend}.json'}")
        # the probe of what these ranges build: run again with --probe-only
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
