"""Train the semi-informed attacker's back-end shipped with voxmeter.

    python scripts/train_semi_informed.py [CORPUS] [--alpha 0.5,0.9] [--jobs 2]

The corpus's train speakers (speakers.tsv ``original_split`` = train; the audit and the α
curve use the test speakers) anonymised by McAdams with α drawn per utterance as the
protection draws it, embedded by the network the release ships, LDA fitted on them
(:mod:`monitor.evaluate.semi_informed`). Writes
``monitor/protect/shipped/semi-informed-<backend>.npz`` (its facts name the training
speakers) and the training figures, in the benchmarks' schema, to
``bench/results/semi-informed-train-<backend>.json``. The backend is the selected embedding
network (``VOXMETER_EMBEDDING``, else the default): one back-end per network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import CORPUS, Run  # noqa: E402
from monitor.features.base import embedding_backend  # noqa: E402
from monitor.protect.backend import shipped_path  # noqa: E402
from monitor.protect.mcadams import Alpha  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--alpha", default="0.5,0.9", help="fixed α or LOW,HIGH")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--cache", type=Path, help="an .npz keeping the anonymised embeddings between runs"
    )
    args = parser.parse_args(argv)
    import numpy as np

    from monitor.corpus.jobs import CorpusJob
    from monitor.evaluate.anonymiser_audit import anonymised_speakers
    from monitor.evaluate.semi_informed import FEATURE, TRAIN_SEED, fit_chosen, labelled

    bounds = [float(v) for v in args.alpha.split(",")]
    alpha = Alpha(bounds[0], bounds[-1])
    run = Run(
        "semi-informed-train", command=" ".join(["scripts/train_semi_informed.py", *sys.argv[1:]])
    )
    if args.cache is not None and args.cache.is_file():
        with np.load(args.cache) as cached:
            vectors, labels = cached["vectors"], [str(v) for v in cached["labels"]]
    else:
        speakers = anonymised_speakers(
            args.corpus, split="train", alpha=alpha, seed=TRAIN_SEED, features=[FEATURE],
            job=CorpusJob(jobs=args.jobs),
        )  # fmt: skip
        vectors, labels = labelled(speakers.speakers)
        if args.cache is not None:
            np.savez(args.cache, vectors=vectors, labels=np.array(labels))
    backend, figures = fit_chosen(
        vectors, labels, alpha=alpha, seed=TRAIN_SEED, embedding=embedding_backend()
    )
    path = shipped_path(embedding_backend())
    path.parent.mkdir(parents=True, exist_ok=True)
    backend.save(path)
    run.figures.update(figures, alpha=str(alpha), backend=str(path.relative_to(ROOT)))
    run.write(f"semi-informed-train-{embedding_backend()}")
    print(figures)


if __name__ == "__main__":
    main()
