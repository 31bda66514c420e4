"""Run every benchmark module (``bench/bench_*.py``, each with a ``main()``), or those named.

Options after the names (``python -m bench tracking --streams 2``) go to the one module named."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(args: list[str]) -> None:
    here = Path(__file__).parent
    first_option = next((i for i, a in enumerate(args) if a.startswith("-")), len(args))
    names, options = args[:first_option], args[first_option:]
    modules = sorted(p.stem for p in here.glob("bench_*.py"))
    chosen = [m for m in modules if not names or any(n in m for n in names)]
    if options and len(chosen) != 1:
        raise SystemExit(f"options {options} need exactly one benchmark named, got {chosen}")
    for name in chosen:
        print(f"== {name}", flush=True)
        module = importlib.import_module(f"bench.{name}")
        module.main(options) if options else module.main()


if __name__ == "__main__":
    main(sys.argv[1:])
