"""What recognising and checking a database costs at open (issue 23): ``open_store`` for writing
(header read, ``PRAGMA quick_check``, WAL) against a read-only open, on databases of 10⁴ and
10⁵ identities with one 256-d embedding template each (about 22 and 220 MB). The files are in
the page cache (just written): the figures are CPU cost, not disk reads.

    python -m bench store_open            # both sizes; bench/results/store_open.json
    python -m bench store_open quick      # 10⁴ only
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import Run, best_of
from monitor.features.base import Observation
from monitor.store import Enrolment, open_store

DIMENSION = 256


def build(path: Path, identities: int) -> None:
    rng = np.random.default_rng(0)
    with open_store(path) as store:
        for start in range(0, identities, 10_000):
            batch = [
                Enrolment(
                    f"id{i:06d}",
                    {"embedding": Observation("embedding", rng.normal(size=DIMENSION), 10.0)},
                    models={"embedding": "bench"},
                )
                for i in range(start, min(start + 10_000, identities))
            ]
            store.bulk_replace_templates(batch)


def quick_check(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def measure(folder: Path, identities: int) -> dict[str, Any]:
    path = folder / f"db-{identities}.db"
    build(path, identities)
    return {
        "identities": identities,
        "megabytes": round(path.stat().st_size / 1e6, 1),
        "open_for_writing": best_of(lambda: open_store(path).close(), 3),
        "open_read_only": best_of(lambda: open_store(path, read_only=True).close(), 3),
        "quick_check_alone": best_of(lambda: quick_check(path), 3),
    }


def main() -> None:
    record = Run("store_open", command="python -m bench store_open")
    quick = "quick" in sys.argv[1:]
    sizes = [10_000] if quick else [10_000, 100_000]
    with tempfile.TemporaryDirectory(prefix="voxmeter-bench-") as scratch:
        results = [measure(Path(scratch), n) for n in sizes]
    for row in results:
        print(
            f"{row['identities']} identities ({row['megabytes']} MB): open for writing "
            f"{row['open_for_writing']['wall_seconds']:.3f} s, read-only "
            f"{row['open_read_only']['wall_seconds']:.3f} s, quick_check alone "
            f"{row['quick_check_alone']['wall_seconds']:.3f} s"
        )
    record.figures["sizes"] = results
    print(f"wrote {record.write()}")


if __name__ == "__main__":
    main()
