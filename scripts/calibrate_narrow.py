"""Refit the tracker's statistics (``tracking_narrow``, ``tracking``) in the shipped calibrations.

``voxmeter calibrate`` makes them on every run; this script refits only them in the
calibrations already shipped (monitor/calibration/shipped), so the buckets stay as fitted: the
train split of the corpus, crops of every utterance's first 1, 2 and 3 s of speech against
templates of 12 s of the speaker's other utterances, raw and normalised against the other
templates (:mod:`monitor.calibration.cohort`). Narrow band (the default): every utterance
band-limited as an 8 kHz device delivers it (scipy resample_poly 16k→8k→16k, the templates
too, :func:`monitor.calibration.crops.narrow_statistics`); ``--bands narrow,wide`` refits
the wide-band statistics as well.

    PYTHONPATH=. python scripts/calibrate_narrow.py [--backends ecapa,ecapa-int8] [--jobs 1]
        [--bands narrow,wide]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from monitor.calibration.buckets import default_path
from monitor.calibration.crops import (
    TRACKING_LENGTHS,
    cosine_statistics,
    crop_speakers,
    narrow_statistics,
)
from monitor.corpus.jobs import CorpusJob
from monitor.corpus.scan import scan_corpus
from monitor.corpus.speakers import load_speakers
from monitor.features.base import set_embedding_backend
from monitor.features.extract import FeatureCache, default_cache_dir

CORPUS = Path(__file__).resolve().parents[2] / "shared/data/speechocean762"


def add_narrow(
    backend: str, corpus: Path, jobs: int, bands: Sequence[str] = ("narrow",)
) -> dict[str, object]:
    """Fit ``tracking_narrow`` (and ``tracking`` when ``bands`` names it) for ``backend`` and
    write them into its shipped calibration."""
    set_embedding_backend(backend)
    path = default_path(backend)
    document = json.loads(path.read_text(encoding="utf-8"))
    metadata = document["metadata"]
    started, cpu = time.time(), time.process_time()
    loaded = load_speakers(
        corpus,
        split="train",
        features=("embedding",),
        job=CorpusJob(cache=FeatureCache(default_cache_dir()), jobs=jobs),
    )
    dev = set(metadata.get("dev_speakers", []))
    speakers = [s for s in loaded.speakers if not dev or s.alias in dev]
    utterances = scan_corpus(corpus, split="train").utterances
    paths = {(u.speaker, u.path.stem): u.path for u in utterances}

    def note(done: int, total: int) -> None:
        if done % 250 == 0 or done == total:
            print(f"{backend}: {done}/{total} utterances", flush=True)

    template_seconds = metadata["protocol"].get("template_seconds", 12.0)
    if "wide" in bands:
        lengths = {seconds: ["embedding"] for seconds in TRACKING_LENGTHS}
        crops = crop_speakers(
            speakers, paths, lengths, cache_dir=default_cache_dir(), progress=note
        )
        metadata["tracking"] = cosine_statistics(speakers, crops, template_seconds=template_seconds)
    stats = narrow_statistics(
        speakers,
        paths,
        template_seconds=template_seconds,
        cache_dir=default_cache_dir(),
        progress=note,
    )
    stats["source"] = {
        "corpus": corpus.name,
        "split": "train",
        "speakers": len(speakers),
        "utterances": sum(len(s.utterances) for s in speakers),
        "script": "scripts/calibrate_narrow.py",
        "cpu_seconds": round(time.process_time() - cpu, 1),
        "wall_seconds": round(time.time() - started, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    metadata["tracking_narrow"] = stats
    if "wide" in bands:
        metadata["tracking"]["refit"] = stats["source"] | {"band": "wide"}
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return stats


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="ecapa,ecapa-int8")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--bands", default="narrow", help="narrow, or narrow,wide")
    args = parser.parse_args(argv)
    for backend in args.backends.split(","):
        stats = add_narrow(backend, args.corpus, args.jobs, args.bands.split(","))
        print(f"{backend}: {json.dumps(stats['source'])}", flush=True)


if __name__ == "__main__":
    main()
