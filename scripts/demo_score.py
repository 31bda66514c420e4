"""Offline demo of ``voxmeter score --matrix``: build score matrices, run the real CLI on them.

By default it simulates, with a fixed seed, an evaluation population of N = 250 identities and a
disjoint dev population of the same size (Gaussian similarity scores, the true identity shifted
up by a per-speaker amount), writes M.npy/T.npy and DM.npy/DT.npy into a temporary directory and
runs ``voxmeter score`` on them in a subprocess, exactly as a user would.

With ``--corpus`` it instead scores the real corpus (dev = ``train`` speakers, eval = ``test``
speakers; each speaker's first half of utterances are trials, the pooled second half the
template) from observations already in the feature cache. Nothing is extracted here: if any
file is missing from the cache it says so and falls back to the simulation.

    .venv/bin/python scripts/demo_score.py [--seed 7] [--json] [--corpus [ROOT]] [--feature F]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "speechocean762"


def simulate(
    rng: np.random.Generator, n_identities: int, trials_per_identity: int, shift: float
) -> tuple[np.ndarray, np.ndarray]:
    """(T, N) scores and (T,) truth: N(0, 1) noise, the true identity shifted up by a
    per-speaker amount drawn around ``shift`` (some voices are more distinctive than others)."""
    truth = np.repeat(np.arange(n_identities), trials_per_identity)
    rng.shuffle(truth)
    scores = rng.normal(0.0, 1.0, (truth.size, n_identities))
    distinctiveness = np.maximum(rng.normal(shift, 0.8, n_identities), 0.0)
    scores[np.arange(truth.size), truth] += distinctiveness[truth]
    return scores, truth


def corpus_matrices(
    root: Path, feature_name: str, cache_dir: Path | None
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | str:
    """(dev, eval) score matrices from cached observations, or the reason they are unavailable."""
    try:
        from monitor.corpus import scan_corpus
        from monitor.features.base import TemplateBatch, get_feature
        from monitor.features.extract import FeatureCache, default_cache_dir
    except ImportError as error:
        return f"feature modules not available ({error})"
    cache = FeatureCache(cache_dir or default_cache_dir())
    feature = get_feature(feature_name)
    matrices = []
    for split in ("train", "test"):
        corpus = scan_corpus(root, split=split)
        tests, templates = [], []
        for speaker in corpus.speakers:
            observations = []
            for utterance in corpus.utterances_of(speaker):
                cached = cache.get(utterance.path, [feature_name])
                if cached is None:
                    return f"{utterance.path} is not in the feature cache {cache.directory}"
                observations.append(cached.observations[feature_name])
            half = len(observations) // 2
            if half < 1:
                return f"speaker {speaker} has fewer than 2 utterances"
            tests.extend(obs.values for obs in observations[:half])
            templates.append(feature.pool(observations[half:]).values)
        truth = np.repeat(
            np.arange(len(corpus.speakers)),
            [len(corpus.utterances_of(s)) // 2 for s in corpus.speakers],
        )
        batch = TemplateBatch(feature_name, np.array(templates))
        matrices.append((feature.similarities(np.array(tests), batch), truth))
    return matrices[0], matrices[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7, help="simulation seed (default 7)")
    parser.add_argument("--identities", type=int, default=250, help="N per population")
    parser.add_argument("--trials", type=int, default=4, help="trials per identity")
    parser.add_argument("--shift", type=float, default=2.5, help="mean mated score shift")
    parser.add_argument(
        "--corpus",
        nargs="?",
        const=DEFAULT_CORPUS,
        type=Path,
        help=f"score the real corpus from cached features (default root {DEFAULT_CORPUS})",
    )
    parser.add_argument("--feature", default="embedding", help="feature for --corpus")
    parser.add_argument("--cache", type=Path, help="feature cache directory for --corpus")
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--keep", type=Path, help="write the matrices here instead of a temp dir")
    args = parser.parse_args(argv)

    matrices = None
    if args.corpus is not None:
        if not (args.corpus / "speakers.tsv").is_file():
            print(f"demo: no corpus at {args.corpus}; simulating instead")
        else:
            outcome = corpus_matrices(args.corpus, args.feature, args.cache)
            if isinstance(outcome, str):
                print(f"demo: cannot use the corpus: {outcome}; simulating instead")
            else:
                matrices = outcome
                print(f"demo: corpus {args.corpus}, feature {args.feature} (cached observations)")
    if matrices is None:
        rng = np.random.default_rng(args.seed)
        dev = simulate(rng, args.identities, args.trials, args.shift)
        evaluation = simulate(rng, args.identities, args.trials, args.shift)
        matrices = (dev, evaluation)
        print(
            f"demo: simulated N = {args.identities} identities × {args.trials} trials "
            f"(mated shift ~ {args.shift}), with a disjoint dev population; seed {args.seed}"
        )

    with tempfile.TemporaryDirectory(prefix="voxmeter-demo-") as scratch:
        out = args.keep or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        (dev_S, dev_m), (eval_S, eval_m) = matrices
        np.save(out / "DM.npy", dev_S)
        np.save(out / "DT.npy", dev_m)
        np.save(out / "M.npy", eval_S)
        np.save(out / "T.npy", eval_m)
        command = [
            sys.executable,
            "-m",
            "monitor.cli",
            "score",
            *("--matrix", str(out / "M.npy"), "--truth", str(out / "T.npy")),
            *("--dev-matrix", str(out / "DM.npy"), "--dev-truth", str(out / "DT.npy")),
        ]
        if args.json:
            command.append("--json")
        print("demo: $ voxmeter " + " ".join(command[3:]), flush=True)
        return subprocess.run(command, cwd=REPO, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
