"""Phone disclosure of each phone backend on the test speakers: the rule that a cheaper phone
front end may not under-report pocketsphinx's disclosure by more than 0.05 bits.

``python -m bench.bench_edge phone_backends`` → bench/results/phone-model-disclosure.json: for
the phone network (the default) and pocketsphinx, ``voxmeter evaluate --features phone
--test-seconds 3 --split test --lid-from crossfit`` (all 125 test speakers, 12 s templates;
the LID weight cross-fitted on halves of the test speakers for both, so that the two front ends
are compared on their evidence alone, not on two calibrations): MeanD (measured and the
fitted model's), mean LID, IdR, EER. Through the feature cache (``$VOXMETER_CACHE``): the
figures do not depend on CPU or load.
"""

from __future__ import annotations

import tempfile
from typing import Any

RULE_BITS = 0.05
"""How far below pocketsphinx's a backend's MeanD or mean LID may fall."""


def disclosure(backend: str, split: str = "test") -> dict[str, Any]:
    """One phone backend's disclosure figures at 3 s of test speech."""
    from bench.common import CORPUS
    from monitor.evaluate import evaluate_corpus
    from monitor.features.base import set_phone_backend

    set_phone_backend(backend)
    with tempfile.TemporaryDirectory() as out:
        audit, _ = evaluate_corpus(
            CORPUS,
            out,
            split=split,
            test_seconds=(3.0,),
            features=("phone",),
            lid_source="crossfit",
        )
    audited = audit.main.features["phone"]
    row = {
        "backend": backend,
        "MeanD_bits": round(audited.histogram_stats.MeanD, 4),
        "MeanD_model_bits": round(audited.model.stats.MeanD, 4),
        "mean_LID_bits": round(audited.lid_summary.ALID, 4),
        "IdR_percent": round(100 * audited.histogram_stats.IdR, 2),
        "EER_percent": round(100 * audited.EER, 2),
        "speakers": audit.main.N,
    }
    print(f"phone disclosure {row}", flush=True)
    return row


def bench_phone_backends(record: Any) -> None:
    """Both backends' rows in ``record``, and the 0.05-bit rule as targets."""
    rows = {backend: disclosure(backend) for backend in ("network", "pocketsphinx")}
    record.figures.update({"split": "test", "test_seconds": 3.0, "lid": "crossfit", **rows})
    for figure in ("MeanD_bits", "mean_LID_bits"):
        bound = round(rows["pocketsphinx"][figure] - RULE_BITS, 4)
        record.target(f"phone network {figure}", rows["network"][figure], ">=", bound,
                      note=f"pocketsphinx's less {RULE_BITS} bits")  # fmt: skip
