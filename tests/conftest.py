"""Shared fixtures: where the real corpus lives, and a seeded RNG.

Fixtures that start real services live in ``tests/realparts/`` (one module per service) and are
registered here as pytest plugins.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.daemon_corpus import daemon_corpus, daemon_db  # noqa: F401  (shared fixtures)

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("VOXMETER_CORPUS", REPO.parent / "shared" / "data" / "speechocean762"))

pytest_plugins = [
    f"tests.realparts.{p.stem}"
    for p in sorted((Path(__file__).parent / "realparts").glob("*.py"))
    if p.stem != "__init__"
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``) a module whose tests
    share a module- or class-scoped fixture (a started service, a fitted model) stays on one
    worker, so that fixture is built once; every other test is handed out on its own."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(d.scope in ("module", "class") for group in defs for d in group):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _running_mark(item: pytest.Item) -> Path | None:
    """Under pytest-xdist, the file that says ``item`` is running: in the run's temporary root,
    which every worker of the run shares (None outside xdist)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    factory: pytest.TempPathFactory = item.config._tmp_path_factory  # type: ignore[attr-defined]
    folder = factory.getbasetemp().parent / "running"
    folder.mkdir(exist_ok=True)
    return folder / hashlib.sha256(item.nodeid.encode()).hexdigest()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that hangs is ended by pytest-timeout's thread method, which ends its xdist worker;
    xdist then reports it failed but hands it to the replacement worker again (the worker's
    unfinished tests are requeued, the crashed one included), and again, so one hang would cost
    the timeout once per restart. A test that a worker started and never finished is therefore
    reported, not run again."""
    mark = _running_mark(item)
    if mark is None:
        return
    if mark.exists():
        pytest.fail(
            f"{item.nodeid}: ended by the timeout in worker {mark.read_text()}; not run again",
            pytrace=False,
        )
    mark.write_text(os.environ["PYTEST_XDIST_WORKER"])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    mark = _running_mark(item)
    if mark is not None:
        mark.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def monitor_logging_restored() -> Iterator[None]:
    """``voxmeter run`` invoked in this process (CliRunner) routes the ``monitor`` loggers to the
    runner's stderr, which is closed once the command returns; a later test's warnings would go
    to that closed stream too ("Logging error") and print twice. Each test leaves the loggers
    as it found them."""
    logger = logging.getLogger("monitor")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture(autouse=True)
def backend_choice_restored() -> Iterator[None]:
    """``set_embedding_backend`` / ``set_embedding_runtime`` write the process's environment (the
    CLI's choice reaches worker processes that way); a test that calls them must not leave its
    backend to the tests after it (a session fixture enrolled later would take it)."""
    names = ("VOXMETER_EMBEDDING", "VOXMETER_EMBEDDING_RUNTIME", "VOXMETER_PHONE")
    before = {name: os.environ.get(name) for name in names}
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session", autouse=True)
def private_feature_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One feature cache for the whole run, in pytest's temporary folder, never the user's
    ~/.cache: tests share extractions with each other but leave nothing behind. The xdist
    workers of one run share it too (entries are written atomically: temporary file, rename),
    so a corpus one worker extracted is not extracted again by the other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        cache = tmp_path_factory.getbasetemp().parent / "feature-cache"
        cache.mkdir(exist_ok=True)
    else:
        cache = tmp_path_factory.mktemp("feature-cache")
    before = os.environ.get("VOXMETER_CACHE")
    os.environ["VOXMETER_CACHE"] = str(cache)
    try:
        yield cache
    finally:
        if before is None:
            os.environ.pop("VOXMETER_CACHE", None)
        else:
            os.environ["VOXMETER_CACHE"] = before


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    """The real corpus (250 speakers × 10 utterances); skips where it is absent (a user's clone)."""
    if not (CORPUS / "speakers.tsv").is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def corpus_speakers(corpus_root: Path) -> list[dict[str, str]]:
    """Rows of speakers.tsv: speaker, gender, age, original_split."""
    with open(corpus_root / "speakers.tsv", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261122)


DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
DIGIT_VOICES = (  # (espeak-ng voice, pitch 0..99): six distinct synthetic speakers
    ("en-us+m3", 35),
    ("en-gb+f2", 70),
    ("en-gb-scotland+m1", 45),
    ("en-029+f4", 80),
    ("en-gb-x-rp+m5", 25),
    ("en-us+f1", 60),
)


@pytest.fixture(scope="session")
def digits_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An 8 kHz corpus of single spoken digits: 6 espeak-ng speakers × 10 digits (0.3–0.6 s of
    speech each), the small-N, short-utterance case. Made with espeak-ng and sox (Debian)."""
    import shutil
    import subprocess

    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (scripts/install-system.sh installs it)")
    root = tmp_path_factory.mktemp("digits")
    rows = ["speaker\tgender\tage\toriginal_split"]
    for index, (voice, pitch) in enumerate(DIGIT_VOICES):
        speaker = f"d{index + 1}"
        folder = root / speaker
        folder.mkdir()
        for number, word in enumerate(DIGITS):
            raw = folder / f"{number}.22k.wav"
            subprocess.run(
                ["espeak-ng", "-v", voice, "-p", str(pitch), "-s", "150", "-w", str(raw), word],
                check=True,
            )
            subprocess.run(
                [
                    "sox",
                    str(raw),
                    "-r",
                    "8000",
                    "-c",
                    "1",
                    "-b",
                    "16",
                    str(folder / f"{number}.wav"),
                ],
                check=True,
            )
            raw.unlink()
        rows.append(f"{speaker}\t{'f' if '+f' in voice else 'm'}\t30\ttrain")
    (root / "speakers.tsv").write_text("\n".join(rows) + "\n")
    return root
