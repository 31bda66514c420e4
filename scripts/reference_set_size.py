"""How many reference voices make a disclosure figure meaningful, measured on the corpus.

With N reference voices a figure is at most log2 N bits. When N is small, one window of speech
already reaches that ceiling: every speaker reads "over budget" from the first seconds and more
speech cannot show as more disclosure. For N in a range of sizes this script draws reference
sets from the corpus speakers (templates pooled from each speaker's first TEMPLATE_UTTERANCES
utterances, the daemon's features and shipped calibration) and scores one held-out utterance of
each member of the set (about 3 s of speech: one daemon window) for the budget's figure,
``combined.lid``. Per N it reports the share of windows within SATURATION_MARGIN_BITS of the
ceiling and the median headroom (ceiling minus figure).

The corpus has 250 speakers, fewer than a meaningful set needs, so the size is extrapolated
from the largest set: a window's headroom is log2(1 + (N − 1)·m), m the mean posterior mass an
impostor takes from the truth relative to it, so each window's m is measured at N = 250 and the
shares at every smaller N are predicted from it beside the measured ones (the check of the
model). The meaningful size is the smallest N at which at most MAX_SATURATED of the windows
reach the ceiling (rounded up to two significant digits); the N at which the median window
leaves a whole bit of headroom is reported too.

Run it from the checkout under the shared benchmark lock (it extracts features of 5 utterances
per speaker; the feature cache makes reruns fast)::

    flock /tmp/voxmeter-bench.lock env PYTHONPATH=. python scripts/reference_set_size.py

It writes bench/results/reference-set.json (bench.common.Run); monitor.references holds the
figure the daemon and ``voxmeter enroll`` use, and a test checks the two agree.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CORPUS, Run
from monitor.calibration.buckets import load_default
from monitor.corpus import scan_corpus
from monitor.features.base import FEATURE_NAMES, Observation, TemplateBatch, get_feature
from monitor.features.extract import FeatureCache, FileFeatures, default_cache_dir, extract_many
from monitor.references import SATURATION_MARGIN_BITS
from monitor.scoring.scorer import Scorer

TEMPLATE_UTTERANCES = 4
SIZES = (4, 8, 16, 32, 64, 128, 250)
DRAWS = 6  # reference sets drawn per size (all speakers: one)
MAX_SATURATED = 0.5  # the median window stays below the ceiling
HEADROOM_BITS = 1.0
COMMAND = "flock /tmp/voxmeter-bench.lock env PYTHONPATH=. python scripts/reference_set_size.py"


def speaker_features(
    corpus: Path, jobs: int, limit: int | None = None
) -> tuple[list[str], dict[str, dict[str, Observation]], dict[str, FileFeatures]]:
    """Each speaker's template (pooled observations) and held-out test utterance's features."""
    scanned = scan_corpus(corpus)
    chosen = sorted(scanned.speakers)[:limit]
    wanted = {s: scanned.utterances_of(s)[: TEMPLATE_UTTERANCES + 1] for s in chosen}
    paths = [str(Path(u.path).absolute()) for us in wanted.values() for u in us]
    extraction = extract_many(paths, FeatureCache(default_cache_dir()), jobs=jobs)
    speakers: list[str] = []
    templates: dict[str, dict[str, Observation]] = {}
    tests: dict[str, FileFeatures] = {}
    for speaker, utterances in sorted(wanted.items()):
        files = [extraction.files.get(str(Path(u.path).absolute())) for u in utterances]
        if len(files) <= TEMPLATE_UTTERANCES or any(
            f is None or not f.speech_seconds for f in files
        ):
            continue
        kept = [f for f in files if f is not None]
        templates[speaker] = {
            name: get_feature(name).pool([f.observations[name] for f in kept[:-1]])
            for name in FEATURE_NAMES
        }
        tests[speaker] = kept[-1]
        speakers.append(speaker)
    return speakers, templates, tests


def window_bits(
    members: list[str], templates: dict[str, dict[str, Observation]], tests: dict[str, FileFeatures]
) -> np.ndarray:
    """``combined.lid`` of each member's held-out utterance against the set ``members``."""
    batches = {
        name: TemplateBatch.from_observations([templates[m][name] for m in members])
        for name in FEATURE_NAMES
    }
    features = {name: get_feature(name) for name in FEATURE_NAMES}
    scorer = Scorer(members, batches, load_default(), features)
    evidence = scorer.evaluate_many(
        [(tests[m].observations, tests[m].speech_seconds) for m in members]
    )
    return np.array(
        [e.features["combined"].lid_bits(i) for i, e in enumerate(evidence)], dtype=float
    )


def impostor_mass(bits: np.ndarray, references: int) -> np.ndarray:
    """Each window's m: headroom log2 N − bits = log2(1 + (N − 1)·m)."""
    return np.expm1((math.log2(references) - bits) * math.log(2.0)) / (references - 1)


def saturated_share(mass: np.ndarray, references: int) -> float:
    """Predicted share of windows within the margin of the ceiling at N = ``references``."""
    headroom = np.log2(1.0 + (references - 1) * mass)
    return round(float(np.mean(headroom <= SATURATION_MARGIN_BITS)), 3)


def two_digits_up(value: float) -> int:
    """``value`` rounded up to two significant digits (641.3 → 650)."""
    step = 10 ** max(math.floor(math.log10(value)) - 1, 0)
    return int(math.ceil(value / step) * step)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--speakers", type=int, default=None, help="the first K only (a check)")
    args = parser.parse_args()
    run = Run("reference-set", command=COMMAND)
    speakers, templates, tests = speaker_features(args.corpus, args.jobs, args.speakers)
    rng = np.random.default_rng(762)
    rows: list[dict[str, Any]] = []
    last = np.zeros(0)
    for size in (s for s in SIZES if s <= len(speakers)):
        bits, ceiling = [], math.log2(size)
        for _ in range(1 if size == len(speakers) else DRAWS):
            members = sorted(rng.choice(speakers, size=size, replace=False).tolist())
            bits.append(window_bits(members, templates, tests))
        values = last = np.concatenate(bits)
        rows.append(
            {
                "references": size,
                "ceiling_bits": round(ceiling, 3),
                "windows": int(values.size),
                "saturated_share": round(
                    float(np.mean(values >= ceiling - SATURATION_MARGIN_BITS)), 3
                ),
                "median_bits": round(float(np.median(values)), 3),
                "median_headroom_bits": round(float(np.median(ceiling - values)), 3),
            }
        )
        print(rows[-1], flush=True)
    largest = int(rows[-1]["references"])
    mass = impostor_mass(last, largest)
    for row in rows:
        row["predicted_saturated_share"] = saturated_share(mass, row["references"])
    quantile = float(np.quantile(mass, MAX_SATURATED))
    meaningful = two_digits_up(1 + (2**SATURATION_MARGIN_BITS - 1) / quantile)
    whole_bit = two_digits_up(1 + (2**HEADROOM_BITS - 1) / float(np.median(mass)))
    run.figures.update(
        {
            "corpus": str(args.corpus.name),
            "speakers": len(speakers),
            "template_utterances": TEMPLATE_UTTERANCES,
            "measure": "combined.lid",
            "margin_bits": SATURATION_MARGIN_BITS,
            "max_saturated_share": MAX_SATURATED,
            "sizes": rows,
            "extrapolated_from": largest,
            "meaningful_references": meaningful,
            "median_headroom_one_bit_references": whole_bit,
        }
    )
    run.target(
        "saturated_share_at_meaningful", saturated_share(mass, meaningful), "<=", MAX_SATURATED
    )
    if args.speakers is None:  # a check on a few speakers writes nothing
        print(f"wrote {run.write()}")
    print(f"meaningful from {meaningful} references; a bit of headroom from {whole_bit}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
