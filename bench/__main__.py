"""Run every benchmark module (``bench/bench_*.py``, each with a ``main()``), or those named."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(names: list[str]) -> None:
    here = Path(__file__).parent
    modules = sorted(p.stem for p in here.glob("bench_*.py"))
    chosen = [m for m in modules if not names or any(n in m for n in names)]
    for name in chosen:
        print(f"== {name}", flush=True)
        importlib.import_module(f"bench.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
