"""What the command families share: one-line user errors and warnings, the consoles, shared
option types and small printing helpers."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from monitor.errors import VoxmeterError
from monitor.printable import printable

if TYPE_CHECKING:
    from monitor.calibration.buckets import CalibrationSet
    from monitor.corpus.jobs import CorpusJob
    from monitor.store import Store


class _LineConsole(Console):
    """stderr: every text printed is one line, control characters escaped (a file named
    ``a\nvoxmeter: all good.wav`` would split an error in two and forge the second line), and
    not wrapped at the console's width unless a caller asks (``soft_wrap`` defaults to True):
    a printer that forgot it split a long error in two under CliRunner's 80 columns."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs.setdefault("soft_wrap", True)
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)


console = Console()
err_console = _LineConsole(stderr=True)


def user_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a VoxmeterError into one line on stderr and its exit code: no traceback."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except VoxmeterError as error:
            err_console.print(
                f"voxmeter: error: {error}", markup=False, highlight=False, soft_wrap=True
            )
            raise typer.Exit(error.exit_code) from None

    return wrapper


class _WarningLine(logging.Handler):
    """Library warnings of the offline commands as 'voxmeter: warning: ...' lines on stderr
    (through err_console, which follows sys.stderr even when a test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(
            f"voxmeter: warning: {record.getMessage()}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def warning_lines(function: Callable[..., Any]) -> Callable[..., Any]:
    """While an offline command runs, the monitor package's warnings print once each as one
    line; the handler is removed afterwards (the daemon has its own logging set-up)."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        package = logging.getLogger("monitor")
        handler = _WarningLine(logging.WARNING)
        level = package.level
        package.addHandler(handler)
        if level == logging.NOTSET or level > logging.WARNING:
            package.setLevel(logging.WARNING)
        try:
            return function(*args, **kwargs)
        finally:
            package.removeHandler(handler)
            package.setLevel(level)

    return wrapper


DB_HELP = "Template database (default: $VOXMETER_DB or ./voxmeter.db)."


def db_path(db: Path | None) -> Path:
    from monitor.store.database import default_db_path

    return db if db is not None else default_db_path()


def calibration_db_path(db: Path | None) -> Path | None:
    """The database to store the calibration in (--db, else $VOXMETER_DB, else none), checked
    before any audio is processed: what it is, never written yet (it may not exist)."""
    from monitor.store.files import regular_file

    path = (
        db
        if db is not None
        else (Path(os.environ["VOXMETER_DB"]) if os.environ.get("VOXMETER_DB") else None)
    )
    if path is not None:
        regular_file(path)
    return path


@contextmanager
def new_file_removed_on_error(path: Path) -> Iterator[None]:
    """If ``path`` does not exist yet and the block fails, remove what it created there (the
    database and its -wal/-shm): an error never leaves an empty database behind."""
    names = [path.with_name(path.name + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    existed = [os.path.lexists(name) for name in names]  # a dangling symlink is the user's too
    try:
        yield
    except BaseException:
        if not existed[0]:
            for name, there in zip(names, existed, strict=True):
                if not there:
                    with suppress(OSError):
                        name.unlink()
        raise


# ---- options shared by the corpus commands (enroll, calibrate, evaluate) ----------------------
SplitOption = Annotated[
    str | None,
    typer.Option("--split", help="Only speakers of this original_split (train|test)."),
]
# Each worker process loads torch and the models (~0.6 GB): more than a few per core only
# thrashes the machine; a bigger audit belongs on a cluster (--scheduler).
MAX_LOCAL_JOBS = 4 * (os.cpu_count() or 1)
JobsOption = Annotated[
    int,
    typer.Option(
        "--jobs",
        min=1,
        max=MAX_LOCAL_JOBS,
        help="Dask worker processes on this machine (1: none; at most 4 per CPU).",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option("--scheduler", help="Use a running Dask cluster, e.g. tcp://host:8786."),
]
FeaturesOption = Annotated[str, typer.Option("--features", help="Comma-separated features.")]
CacheOption = Annotated[
    Path | None,
    typer.Option("--cache", help="Feature cache (default $VOXMETER_CACHE, ~/.cache/voxmeter)."),
]
NoCacheOption = Annotated[
    bool, typer.Option("--no-cache", help="Do not read or write the feature cache.")
]
MinSpeechOption = Annotated[
    float,
    typer.Option(
        "--min-speech", min=0.0, help="Skip files with less speech than this (seconds, after VAD)."
    ),
]
ALL_FEATURES = "f0,phone,embedding"


def corpus_job(
    jobs: int,
    scheduler: str | None,
    cache: Path | None,
    no_cache: bool,
    min_speech: float,
    *,
    steps: Callable[[str], None] | None = None,
) -> CorpusJob:
    """The one settings object of a corpus command's shared options (--jobs, --scheduler,
    --cache, --no-cache, --min-speech), passed down instead of the five values; the feature
    cache is opened here, once for every step (its folder created now)."""
    from monitor.corpus.jobs import CorpusJob
    from monitor.features.extract import FeatureCache, default_cache_dir

    feature_cache = None if no_cache else FeatureCache(cache or default_cache_dir())
    return CorpusJob(
        cache=feature_cache,
        jobs=jobs,
        scheduler=scheduler,
        min_speech_seconds=min_speech,
        steps=steps,
    )


EmbeddingOption = Annotated[
    str | None,
    typer.Option(
        "--embedding",
        # written out, not read from monitor.features.base: the relay process imports this
        # module and must not import numpy (tests/docs checks it against DEFAULT_EMBEDDING)
        help="Embedding backend: campplus-int8 (default), ecapa-int8, campplus, ecapa or ge2e "
        "($VOXMETER_EMBEDDING).",
    ),
]


def select_embedding(backend: str | None) -> None:
    """Use ``backend`` for the embedding feature here and in extraction workers."""
    from monitor.features.base import EMBEDDING_BACKENDS, embedding_backend, set_embedding_backend

    if backend is None:
        try:
            embedding_backend()
        except ValueError as error:
            raise VoxmeterError(f"$VOXMETER_EMBEDDING: {error}") from None
        return
    if backend not in EMBEDDING_BACKENDS:
        raise VoxmeterError(
            f"--embedding {backend!r}: expected one of {', '.join(EMBEDDING_BACKENDS)}"
        )
    set_embedding_backend(backend)


def follow_calibration_phone(calibration: CalibrationSet, source: str) -> str:
    """Run the phone backend ``calibration`` was fitted with here and in extraction workers
    ($VOXMETER_PHONE unset or ``auto``); an explicit other one is a ``ConfigError`` (exit 2)
    before any audio: the calibration's phone figures hold for its own backend only."""
    from monitor.errors import ConfigError
    from monitor.features.base import PHONE_ENV, requested_phone_backend, set_phone_backend

    try:
        requested = requested_phone_backend()
    except ValueError as error:
        raise ConfigError(f"${PHONE_ENV}", str(error)) from None
    backend = calibration.resolve_phone_backend(source, requested, key=f"${PHONE_ENV}")
    set_phone_backend(backend)
    return backend


def follow_shipped_phone(features: Sequence[str], store: Store | None = None) -> str | None:
    """:func:`follow_calibration_phone` for the calibration a daemon on this database would
    use by default (the store's, else the shipped one of the selected embedding), when
    ``features`` extract the phone feature."""
    from monitor.calibration.buckets import default_path, load_default

    if "phone" not in features:
        return None
    stored = None if store is None else store.load_calibration()
    if stored is not None:
        return follow_calibration_phone(stored, f"{store.path}: stored calibration")
    return follow_calibration_phone(load_default(), str(default_path()))


def cell(text: str) -> Any:
    """A table cell holding user text (an alias): control characters escaped, no markup."""
    from rich.text import Text

    return Text(printable(text))
