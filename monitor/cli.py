"""The ``voxmeter`` command line: one function per command, no logic.

Each command parses its options, calls the library, and prints. User errors
(:class:`monitor.errors.VoxmeterError`) become one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from monitor import __version__
from monitor.errors import VoxmeterError
from monitor.printable import printable

app = typer.Typer(
    name="voxmeter",
    help="Measure how much speech discloses about who is speaking, in bits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Inspect and edit the template database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
cache_app = typer.Typer(
    help="See or clear the feature cache (per-file observations, voice embeddings included).",
    no_args_is_help=True,
)
app.add_typer(cache_app, name="cache")


class _LineConsole(Console):
    """stderr: every text printed is one line, control characters escaped (a file named
    ``a\nvoxmeter: all good.wav`` would split an error in two and forge the second line)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
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


@app.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        console.print(f"voxmeter {__version__}")
        raise typer.Exit(0)


# ---- commands ------------------------------------------------------------------------------
# Each command below is registered with @app.command() (or @db_app.command()) and decorated
# with @user_errors. Keep them thin: parse, call the library, print.


# ---- voxmeter features (owner: features) ---------------------------------------------------


def _print_features(report: dict[str, Any]) -> None:
    """Human-readable form of one file's report: scalars in full, arrays summarised."""
    console.print(
        f"{report['path']}: {report['duration_seconds']:.2f} s audio, "
        f"{report['speech_seconds']:.2f} s speech",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    timing = report["timing_seconds"]
    for name, fields in report.items():
        if not isinstance(fields, dict) or name == "timing_seconds":
            continue
        parts = []
        for key, value in fields.items():
            if isinstance(value, dict):
                top = sorted(value.items(), key=lambda item: -item[1])[:8]
                listed = " ".join(f"{k}:{v}" for k, v in top if v)
                parts.append(f"{key} {sum(value.values())} ({listed})")
            elif isinstance(value, list):
                parts.append(f"{key} [{len(value)} values]")
            elif isinstance(value, float):
                parts.append(f"{key} {value:.1f}")
            else:
                parts.append(f"{key} {value}")
        console.print(
            f"  {name:<10} {', '.join(parts)}  ({timing.get(name, 0.0):.3f} s)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    stages = ", ".join(f"{stage} {seconds:.3f}" for stage, seconds in timing.items())
    console.print(
        f"  {'timing':<10} {stages} (seconds)", markup=False, highlight=False, soft_wrap=True
    )


@app.command("features")
@warning_lines
def features_command(
    files: Annotated[list[Path], typer.Argument(help="Audio files (wav, flac, ...) to analyse.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (a list for several files).")
    ] = False,
    embedding: EmbeddingOption = None,
) -> None:
    """Print each file's observations under every feature and the time each stage took.

    All files are processed in one process (models load once). A file that cannot be read gets
    one error line on stderr; the others are still printed, and the exit status is 2 at the end.
    The first file's times include loading the models.
    """
    from monitor.features.extract import describe, extract_file

    try:
        _select_embedding(embedding)
    except VoxmeterError as error:
        err_console.print(f"voxmeter: error: {error}", markup=False, highlight=False)
        raise typer.Exit(error.exit_code) from None
    reports: list[dict[str, Any]] = []
    status = 0
    for path in files:
        try:
            report = describe(extract_file(path))
        except VoxmeterError as error:
            err_console.print(
                f"voxmeter: error: {error}", markup=False, highlight=False, soft_wrap=True
            )
            status = max(status, error.exit_code)
            continue
        if as_json:
            reports.append(report)
        else:
            _print_features(report)
    if as_json and reports:
        payload: Any = reports[0] if len(files) == 1 else reports
        typer.echo(json.dumps(payload))
    if status:
        raise typer.Exit(status)


# ---- voxmeter score / compose (owner: zebra-baselines-composition) ----------------------------


@app.command("score")
@user_errors
def score_command(
    scores: Annotated[
        Path | None, typer.Option("--scores", help="Score file: 'enroll trial score' lines.")
    ] = None,
    key: Annotated[
        Path | None, typer.Option("--key", help="Key file: 'enroll trial target|nontarget' lines.")
    ] = None,
    matrix: Annotated[
        Path | None, typer.Option("--matrix", help="Score matrix, trials × identities (.npy/.csv).")
    ] = None,
    truth: Annotated[
        Path | None, typer.Option("--truth", help="True identity index per trial (.npy/.csv/.txt).")
    ] = None,
    dev_matrix: Annotated[
        Path | None, typer.Option("--dev-matrix", help="Dev score matrix for the LID calibration.")
    ] = None,
    dev_truth: Annotated[
        Path | None, typer.Option("--dev-truth", help="True identity per dev trial.")
    ] = None,
    lid_weight: Annotated[
        float | None,
        typer.Option("--lid-weight", help="LID calibration weight w (with --lid-bias)."),
    ] = None,
    lid_bias: Annotated[
        float | None, typer.Option("--lid-bias", help="LID calibration bias b (nats).")
    ] = None,
    fit_loss: Annotated[
        str, typer.Option("--fit-loss", help="Beta-binomial fit loss: ll, ms, wms, rwms or cll.")
    ] = "cll",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Disclosure and baseline metrics of a score file (ZEBRA format) or a 1-to-N score matrix."""
    from monitor.score.report import (
        render_report,
        report_json,
        score_report_from_files,
        to_json_text,
    )

    report = score_report_from_files(
        scores=scores,
        key=key,
        matrix=matrix,
        truth=truth,
        dev_matrix=dev_matrix,
        dev_truth=dev_truth,
        lid_weight=lid_weight,
        lid_bias=lid_bias,
        fit_loss=fit_loss,
    )
    if as_json:
        typer.echo(to_json_text(report_json(report)))
    else:
        render_report(report, console)


@app.command("compose", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@user_errors
def compose_command(
    ctx: typer.Context,
    epsilon: Annotated[float, typer.Option("--epsilon", help="ε of one release, in nats.")],
    delta: Annotated[
        float, typer.Option("--delta", help="Target δ of the composition, in (0, 1).")
    ],
    steps: Annotated[
        str, typer.Option("--steps", help="Numbers of releases k: --steps 100 500 1000.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Composed ε after k releases: basic, advanced (Kairouz Thm 3.4) and optimal (Thm 3.3)."""
    from monitor.score.report import (
        compose_json,
        compose_rows,
        parse_steps,
        render_composition,
        to_json_text,
    )

    # click options take one value each; the further step counts arrive as extra arguments.
    rows = compose_rows(epsilon, delta, parse_steps([steps, *ctx.args]))
    if as_json:
        typer.echo(to_json_text(compose_json(rows)))
    else:
        render_composition(rows, epsilon, delta, console)


# ---- voxmeter enroll / db (owner: store) -----------------------------------------------------

_DB_HELP = "Template database (default: $VOXMETER_DB or ./voxmeter.db)."


def _db_path(db: Path | None) -> Path:
    from monitor.enroll import default_db_path

    return db if db is not None else default_db_path()


def _stored_alias(store: Any, alias: str) -> str:
    """``alias`` as stored: typed text may be composed differently from a folder name ("José"
    precomposed, the folder with a combining accent); one stored alias equal to it under NFC
    is the one meant. Otherwise ``alias`` itself (the store names it if it is unknown)."""
    import unicodedata

    wanted = unicodedata.normalize("NFC", alias)
    aliases = [i.alias for i in store.identities()]
    if alias in aliases:
        return alias
    matches = [a for a in aliases if unicodedata.normalize("NFC", a) == wanted]
    return matches[0] if len(matches) == 1 else alias


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
EmbeddingOption = Annotated[
    str | None,
    typer.Option(
        "--embedding",
        help="Embedding backend: ecapa (default), campplus or ge2e ($VOXMETER_EMBEDDING).",
    ),
]


def _select_embedding(backend: str | None) -> None:
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


@app.command("enroll")
@user_errors
@warning_lines
def enroll_command(
    corpus: Annotated[Path, typer.Argument(help="Corpus root: <root>/<speaker>/<utt>.wav|flac.")],
    db: Annotated[Path | None, typer.Option("--db", help=_DB_HELP)] = None,
    utterances: Annotated[
        int | None,
        typer.Option("--utterances", min=1, help="Use each speaker's first K usable utterances."),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option("--seconds", min=0.0, help="Use each speaker's first S seconds of speech."),
    ] = None,
    local: Annotated[
        bool, typer.Option("--local", help="Also register every speaker as a device user.")
    ] = False,
    split: SplitOption = None,
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
    features: FeaturesOption = ALL_FEATURES,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    min_speech: MinSpeechOption = 0.3,
    embedding: EmbeddingOption = None,
) -> None:
    """Build one template per speaker and feature from a corpus (replacing old templates)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from monitor.cluster import shared_scheduler
    from monitor.corpus import check_speaker_names, scan_corpus
    from monitor.enroll import default_cache_dir, enroll_corpus
    from monitor.features.base import FEATURE_NAMES
    from monitor.features.extract import FeatureCache
    from monitor.store import open_store

    _select_embedding(embedding)
    if utterances is not None and seconds is not None:
        raise VoxmeterError("--utterances and --seconds exclude each other: give one")
    if seconds is not None and not 0 < seconds < float("inf"):
        raise VoxmeterError(f"--seconds must be a positive number, got {seconds:g}")
    names = tuple(name.strip() for name in features.split(",") if name.strip())
    unknown = [name for name in names if name not in FEATURE_NAMES]
    if unknown or not names:
        raise VoxmeterError(
            f"--features {features!r}: unknown {unknown or 'empty list'}; "
            f"known: {','.join(FEATURE_NAMES)}"
        )
    if local and "embedding" not in names:
        raise VoxmeterError("--local needs the embedding feature (local profiles track voices)")
    scanned = scan_corpus(corpus, split=split)
    check_speaker_names(scanned)  # before the database is touched or any audio processed
    path = _db_path(db)
    feature_cache = None if no_cache else FeatureCache(cache or default_cache_dir())
    with _new_file_removed_on_error(path), open_store(path) as store:
        store.check_writable()  # fail now, not after minutes of extraction
        with Progress(
            TextColumn("[bold]enrolling[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err_console,
        ) as bar:
            task = bar.add_task("", total=None)

            def progress(done: int, total: int, file: str) -> None:
                speaker_file = "/".join(Path(file).parts[-2:])
                bar.update(task, completed=done, total=total, description=speaker_file)

            with shared_scheduler(jobs, scheduler) as address:  # one cluster for all rounds
                report = enroll_corpus(
                    store,
                    scanned,
                    features=names,
                    utterances=utterances,
                    seconds=seconds,
                    local=local,
                    jobs=jobs,
                    scheduler=address,
                    cache=feature_cache,
                    progress=progress,
                    min_speech_seconds=min_speech,
                )
    out = {"markup": False, "highlight": False, "soft_wrap": True}
    for file, reason in report.skipped_files:
        err_console.print(f"voxmeter: skipped file {file}: {reason}", **out)
    for file, reason in report.partial_files:
        err_console.print(f"voxmeter: file {file}: {reason}", **out)
    for alias, reason in report.skipped_speakers:
        err_console.print(f"voxmeter: skipped speaker {alias}: {reason}", **out)
    _print_drops_per_speaker([file for file, _ in report.skipped_files])
    for speaker in report.enrolled:
        if speaker.short:
            asked = f"{utterances} utterances" if utterances else f"{seconds:g} s"
            err_console.print(
                f"voxmeter: speaker {speaker.alias}: only {len(speaker.files)} usable file(s), "
                f"{speaker.speech_seconds:.1f} s of speech (asked for {asked})",
                **out,
            )
    speech = sum(s.speech_seconds for s in report.enrolled)
    console.print(
        f"enrolled {len(report.enrolled)} speakers ({', '.join(report.features)}; "
        f"{speech:.0f} s of speech from {sum(len(s.files) for s in report.enrolled)} files) "
        f"into {path}; {report.files_extracted} files processed ({report.cache_hits} cached), "
        f"{len(report.skipped_files)} files and {len(report.skipped_speakers)} speakers skipped"
        + (f"; {len(report.local_profiles)} local profiles" if report.local_profiles else ""),
        **out,
    )


def _print_drops_per_speaker(files: Sequence[str]) -> None:
    """One line: how many files each speaker lost (speaker = the file's folder)."""
    counts = Counter(Path(file).parent.name for file in files)
    if counts:
        listed = ", ".join(f"{speaker} {n}" for speaker, n in sorted(counts.items()))
        err_console.print(
            f"voxmeter: files skipped per speaker: {listed}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@contextmanager
def _new_file_removed_on_error(path: Path) -> Iterator[None]:
    """If ``path`` does not exist yet and the block fails, remove what it created there (the
    database and its -wal/-shm): an error never leaves an empty database behind."""
    existed = path.exists()
    try:
        yield
    except BaseException:
        if not existed:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with suppress(OSError):
                    path.with_name(path.name + suffix).unlink()
        raise


def _cell(text: str) -> Any:
    """A table cell holding user text (an alias): control characters escaped, no markup."""
    from rich.text import Text

    return Text(printable(text))


def _identity_json(identity: Any) -> dict[str, Any]:
    return {
        "alias": identity.alias,
        "metadata": identity.metadata,
        "created": identity.created,
        "templates": {
            f: {
                "dimension": t.dimension,
                "seconds": t.seconds,
                "updated": t.updated,
                "model": t.model,
            }
            for f, t in identity.templates.items()
        },
        "local_profiles": list(identity.local_profiles),
    }


@db_app.command("list")
@user_errors
def db_list_command(
    db: Annotated[Path | None, typer.Option("--db", help=_DB_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List identities: alias, features with templates, speech seconds, local profile."""
    from rich.table import Table

    from monitor.store import open_store

    path = _db_path(db)
    with open_store(path, create=False) as store:
        identities = store.identities()
    if as_json:
        typer.echo(json.dumps([_identity_json(i) for i in identities]))
        return
    table = Table(title=f"{path}: {len(identities)} identities", title_justify="left")
    for column in ("alias", "features", "seconds", "local profile"):
        table.add_column(column, justify="right" if column == "seconds" else "left")
    for identity in identities:
        seconds = max((t.seconds for t in identity.templates.values()), default=0.0)
        table.add_row(
            _cell(identity.alias),
            " ".join(identity.templates) or "-",
            f"{seconds:.1f}",
            _cell(", ".join(identity.local_profiles) or "-"),
        )
    console.print(table)


@db_app.command("show")
@user_errors
def db_show_command(
    alias: Annotated[str, typer.Argument(help="Identity alias.")],
    db: Annotated[Path | None, typer.Option("--db", help=_DB_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show one identity: metadata, templates (dimension, seconds, updated), local profiles."""
    from monitor.store import open_store

    with open_store(_db_path(db), create=False) as store:
        identity = store.identity(_stored_alias(store, alias))
    document = _identity_json(identity)
    if as_json:
        typer.echo(json.dumps(document))
        return
    out = {"markup": False, "highlight": False, "soft_wrap": True}
    console.print(f"identity {printable(identity.alias)} (created {identity.created})", **out)
    for key, value in identity.metadata.items():
        console.print(f"  {printable(key)}: {printable(value)}", **out)
    for feature, info in identity.templates.items():
        console.print(
            f"  template {feature}: {info.dimension} values, {info.seconds:.1f} s of speech, "
            f"updated {info.updated}" + (f", model {info.model}" if info.model else ""),
            **out,
        )
    console.print(
        f"  local profiles: {printable(', '.join(identity.local_profiles) or '-')}", **out
    )


@db_app.command("remove")
@user_errors
def db_remove_command(
    alias: Annotated[str, typer.Argument(help="Identity alias.")],
    db: Annotated[Path | None, typer.Option("--db", help=_DB_HELP)] = None,
    cache: CacheOption = None,
) -> None:
    """Delete an identity with its templates and local profiles, and that speaker's feature
    cache entries (they hold the voice embedding of every utterance)."""
    from monitor.enroll import default_cache_dir
    from monitor.features.extract import FeatureCache
    from monitor.store import open_store

    path = _db_path(db)
    with open_store(path, create=False) as store:
        alias = _stored_alias(store, alias)
        identity = store.identity(alias)
        store.remove_identity(alias)
    cache_dir = cache or default_cache_dir()
    entries = 0
    if cache_dir.is_dir():
        corpus = identity.metadata.get("corpus")
        entries = FeatureCache(cache_dir).remove_speaker(
            alias, corpus if isinstance(corpus, str) else None
        )
    profiles = f", local profiles {printable(', '.join(identity.local_profiles))}"
    console.print(
        f"removed {printable(alias)} from {path} ({len(identity.templates)} templates"
        f"{profiles if identity.local_profiles else ''}) and {entries} feature cache entries "
        f"from {cache_dir}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


# ---- voxmeter cache ----------------------------------------------------------------------------


def _cache_folder(cache: Path | None) -> Path:
    """The cache folder asked for (or the default); a file there is a user error."""
    from monitor.enroll import default_cache_dir
    from monitor.errors import InputError

    directory = cache or default_cache_dir()
    if directory.exists() and not directory.is_dir():
        raise InputError(str(directory), "a file, not a feature cache folder")
    return directory


@cache_app.command("info")
@user_errors
def cache_info_command(cache: CacheOption = None) -> None:
    """Where the feature cache is and how big (entries hold paths and voice embeddings)."""
    from monitor.features.extract import FeatureCache

    directory = _cache_folder(cache)
    if not directory.is_dir():
        console.print(f"{directory}: no feature cache", markup=False, highlight=False)
        return
    info = FeatureCache(directory).info()
    console.print(
        f"{info.directory}: {info.entries} entries, {info.bytes / 1e6:.1f} MB "
        "(per audio file: its absolute path and observations, including the voice embedding)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@cache_app.command("clear")
@user_errors
def cache_clear_command(cache: CacheOption = None) -> None:
    """Delete every feature cache entry (the next corpus command extracts again)."""
    from monitor.features.extract import FeatureCache

    directory = _cache_folder(cache)
    removed = FeatureCache(directory).clear() if directory.is_dir() else 0
    console.print(
        f"removed {removed} feature cache entries from {directory}", markup=False, highlight=False
    )


# ---- voxmeter calibrate / evaluate (owner: calibration-evaluate) -----------------------------


def _seconds_list(text: str, option: str, *, allow_rest: bool = False) -> list[float | None]:
    """'3,6,12' -> [3.0, 6.0, 12.0]; 'rest' (templates only) means all remaining speech."""
    values: list[float | None] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if allow_rest and part == "rest":
            values.append(None)
            continue
        try:
            value = float(part)
        except ValueError:
            raise VoxmeterError(f"{option} {text!r}: {part!r} is not a number of seconds") from None
        if not 0 < value < float("inf"):
            raise VoxmeterError(f"{option} {text!r}: lengths must be positive numbers, got {part}")
        values.append(value)
    if not values:
        raise VoxmeterError(f"{option} {text!r}: give at least one length")
    return values


def _feature_list(text: str) -> tuple[str, ...]:
    from monitor.features.base import FEATURE_NAMES

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in FEATURE_NAMES]
    if unknown or not names:
        raise VoxmeterError(
            f"--features {text!r}: unknown {unknown or 'empty list'}; "
            f"known: {','.join(FEATURE_NAMES)}"
        )
    return names


def _check_loss(loss: str) -> str:
    from monitor.calibration.fit import LOSSES

    if loss not in LOSSES:
        raise VoxmeterError(f"--loss {loss!r}: expected one of {', '.join(LOSSES)}")
    return loss


class _LazyBar:
    """A rich progress bar on stderr that appears with the first file (so an error that comes
    before any extraction prints as one line), driven by the extract_many callback."""

    def __init__(self, label: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn(f"[bold]{label}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err_console,
        )
        self.task = self.bar.add_task("", total=None)
        self.started = False

    def __call__(self, done: int, total: int, file: str) -> None:
        if not self.started:
            self.bar.start()
            self.started = True
        where = "/".join(Path(file).parts[-2:])
        self.bar.update(self.task, completed=done, total=total, description=where)

    def __enter__(self) -> _LazyBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.bar.stop()


def _print_skipped(skipped: Any) -> None:
    for item, reason in skipped:
        err_console.print(
            f"voxmeter: skipped {item}: {reason}", markup=False, highlight=False, soft_wrap=True
        )
    _print_drops_per_speaker([item for item, _ in skipped if not item.startswith("speaker ")])


@app.command("calibrate")
@user_errors
@warning_lines
def calibrate_command(
    corpus: Annotated[Path, typer.Argument(help="Labelled dev corpus <root>/<speaker>/<utt>.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Calibration JSON to write (required: the shipped models/calibration.json is "
            "replaced only when named here).",
        ),
    ],
    split: SplitOption = None,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="Also store the calibration in this database ($VOXMETER_DB)."),
    ] = None,
    loss: Annotated[
        str, typer.Option("--loss", help="Beta-binomial loss: ll (default), ms, wms, rwms, cll.")
    ] = "ll",
    buckets: Annotated[
        str, typer.Option("--buckets", help="Test-speech seconds per bucket, as far as possible.")
    ] = "3,6,12,24,48,96",
    template_seconds: Annotated[
        str, typer.Option("--template-seconds", help="Template speech seconds, or 'rest'.")
    ] = "12",
    features: FeaturesOption = ALL_FEATURES,
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    min_speech: MinSpeechOption = 0.3,
    embedding: EmbeddingOption = None,
) -> None:
    """Fit the per-feature, per-length calibration (beta-binomial and LID) on a dev corpus."""
    import os

    _select_embedding(embedding)
    from monitor.calibration.fit import calibrate_corpus
    from monitor.enroll import default_cache_dir
    from monitor.outputs import check_output_file

    names = _feature_list(features)
    loss = _check_loss(loss)
    bucket_list = [b for b in _seconds_list(buckets, "--buckets") if b is not None]
    template = _seconds_list(template_seconds, "--template-seconds", allow_rest=True)
    if len(template) != 1:
        raise VoxmeterError(f"--template-seconds {template_seconds!r}: give one length")
    check_output_file(out, "--out")
    with _LazyBar("extracting") as extraction_progress:
        calibration, skipped = calibrate_corpus(
            corpus,
            split=split,
            features=names,
            buckets=bucket_list,
            template_seconds=template[0],
            loss=loss,
            cache_dir=None if no_cache else (cache or default_cache_dir()),
            jobs=jobs,
            scheduler=scheduler,
            extraction_progress=extraction_progress,
            progress=lambda text: err_console.print(f"fitting {text}", markup=False),
            min_speech_seconds=min_speech,
        )
    _print_skipped(skipped)
    calibration.save(out)
    db_path = (
        db
        if db is not None
        else (Path(os.environ["VOXMETER_DB"]) if os.environ.get("VOXMETER_DB") else None)
    )
    stored = ""
    if db_path is not None:
        from monitor.store import open_store

        with open_store(db_path) as store:
            store.save_calibration(calibration)
        stored = f" and {db_path}"
    first = next(iter(calibration.features.values()))
    console.print(
        f"calibrated {', '.join(calibration.features)} for test lengths "
        f"{', '.join(f'{b.seconds:g}' for b in first)} s on {calibration.metadata['speakers']} "
        f"speakers (N per bucket {', '.join(str(b.n_identities) for b in first)}); "
        f"{len(skipped)} items skipped; wrote {out}{stored}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command("evaluate")
@user_errors
@warning_lines
def evaluate_command(
    corpus: Annotated[Path, typer.Argument(help="Evaluation corpus <root>/<speaker>/<utt>.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json, PNGs.")],
    split: SplitOption = None,
    test_seconds: Annotated[
        str, typer.Option("--test-seconds", help="Test speech seconds (grid), e.g. 3,6,12.")
    ] = "3,6,12",
    template_seconds: Annotated[
        str, typer.Option("--template-seconds", help="Template speech seconds (grid) or 'rest'.")
    ] = "12",
    protected: Annotated[
        Path | None,
        typer.Option("--protected", help="Pseudonymised copy of the corpus (same file names)."),
    ] = None,
    loss: Annotated[
        str, typer.Option("--loss", help="Loss of the reported model: ll, ms, wms, rwms, cll.")
    ] = "ll",
    calibration: Annotated[
        Path | None,
        typer.Option("--calibration", help="Calibration JSON for LID (default: the shipped one)."),
    ] = None,
    lid_from: Annotated[
        str | None,
        typer.Option(
            "--lid-from",
            help="'calibration' or 'crossfit' (default: calibration if it covers every feature).",
        ),
    ] = None,
    features: FeaturesOption = ALL_FEATURES,
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    min_speech: MinSpeechOption = 0.3,
    embedding: EmbeddingOption = None,
) -> None:
    """Audit a labelled corpus: papers 000–003 figures per feature and length, report and plots."""
    from monitor.calibration.fit import CalibrationSet, default_path
    from monitor.cluster import shared_scheduler
    from monitor.enroll import default_cache_dir
    from monitor.errors import InputError
    from monitor.evaluate import evaluate_corpus
    from monitor.outputs import check_output_folder

    _select_embedding(embedding)
    shipped = default_path()
    names = _feature_list(features)
    loss = _check_loss(loss)
    tests = [t for t in _seconds_list(test_seconds, "--test-seconds") if t is not None]
    templates = _seconds_list(template_seconds, "--template-seconds", allow_rest=True)
    if lid_from not in (None, "calibration", "crossfit"):
        raise VoxmeterError(f"--lid-from {lid_from!r}: expected 'calibration' or 'crossfit'")
    calibration_path = calibration if calibration is not None else shipped
    loaded = None
    if calibration is not None or lid_from == "calibration" or shipped.is_file():
        loaded = CalibrationSet.load(calibration_path)
        if "embedding" in names:
            loaded.check_embedding_backend(str(calibration_path))
    check_output_folder(out, "--out")
    if protected is not None and not protected.is_dir():
        raise InputError(str(protected), "--protected: not a corpus folder")
    with (
        _LazyBar("extracting") as extraction_progress,
        shared_scheduler(jobs, scheduler) as address,  # one cluster for both corpora
    ):
        _, document = evaluate_corpus(
            corpus,
            out,
            split=split,
            test_seconds=tests,
            template_seconds=templates,
            features=names,
            loss=loss,
            calibration=loaded,
            calibration_source=str(calibration_path) if loaded is not None else None,
            lid_source=lid_from,
            protected=protected,
            cache_dir=None if no_cache else (cache or default_cache_dir()),
            jobs=jobs,
            scheduler=address,
            extraction_progress=extraction_progress,
            progress=lambda text: err_console.print(f"auditing {text}", markup=False),
            min_speech_seconds=min_speech,
        )
    _print_skipped([(s["item"], s["reason"]) for s in document["skipped"]])
    summary = ", ".join(
        f"{name} {f['histogram']['MeanD']:.2f}" for name, f in document["features"].items()
    )
    console.print(
        f"N = {document['N']}: MeanD (bits) {summary}; wrote {out}/report.md, report.json and "
        f"{len(document['plots'])} plots",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


# ---- voxmeter run / status (owner: daemon core) ----------------------------------------------


@app.command("run")
@user_errors
def run_command(
    config: Annotated[
        Path | None, typer.Option("--config", help="config.toml (default: built-in defaults).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override one key: section.key=value (repeatable)."),
    ] = None,
    db: Annotated[Path | None, typer.Option("--db", help="Database (daemon.db).")] = None,
    source: Annotated[
        str | None,
        typer.Option("--source", help="mic[:DEVICE], file:PATH or stdin (daemon.source)."),
    ] = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="Read a file source as fast as possible.")
    ] = False,
    duration: Annotated[
        float | None,
        typer.Option("--duration", min=0.0, help="Stop after this many seconds (0 = never)."),
    ] = None,
    exit_at_end: Annotated[
        bool | None,
        typer.Option("--exit-at-end/--keep-running", help="Stop when a file or stdin ends."),
    ] = None,
) -> None:
    """Run the live monitor: per-speaker disclosure, budgets, metrics and alerts."""
    from monitor.daemon.build import run_daemon
    from monitor.daemon.config import load_config

    overrides = list(set_ or [])
    if db is not None:
        overrides.append(f"daemon.db={json.dumps(str(db))}")
    if source is not None:
        overrides.append(f"daemon.source={json.dumps(source)}")
    if fast:
        overrides.append('audio.pace="fast"')
    if duration is not None:
        overrides.append(f"daemon.duration_seconds={duration}")
    if exit_at_end is not None:
        overrides.append(f"daemon.exit_at_end={'true' if exit_at_end else 'false'}")
    settings = load_config(config, overrides)
    summary = run_daemon(settings)
    out = {"markup": False, "highlight": False, "soft_wrap": True}
    for track, event in sorted(summary.last.items()):
        err_console.print(
            f"{printable(track)}: {event.windows} windows, "
            f"{event.pooled_speech_seconds:.0f} s of speech, "
            f"{event.budget_measure} {event.budget_figure_bits:.2f} bits of "
            f"{event.budget_bits:g} ({event.state}); ceiling {event.ceiling_bits:.2f} bits",
            **out,
        )
    if summary.windows == 0 and summary.audio_seconds > 0:
        err_console.print(
            f"no window was scored: {summary.audio_seconds:.0f} s of audio held less than one "
            f"{settings.audio.window_seconds:g} s window of speech",
            **out,
        )
    err_console.print(
        f"stopped ({summary.stop_reason}): {summary.windows} windows from "
        f"{summary.audio_seconds:.0f} s of audio, {summary.alerts} alerts, "
        f"{summary.frames_dropped} frames dropped, {summary.audio_device_errors} device errors",
        **out,
    )
    # Everything is committed and closed. Skip the interpreter's teardown of torch and
    # pocketsphinx (seconds on a small device) so that SIGTERM exits within 2 s.
    import logging
    import os

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _status_table(rows: list[Any]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title="voxmeter: disclosure per speaker this period (bits; LID/SRD of the pooled speech)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    headers = (
        "track", "state", "win", "sec", "LID", "SRD", "f0", "phone", "emb",
        "basic", "adv", "opt", "ceil", "budget", "unknown: top (IG)",
    )  # fmt: skip
    for header in headers:
        table.add_column(
            header,
            justify="left" if header[0].isalpha() and len(header) > 4 else "right",
            no_wrap=True,
        )
    style = {"ok": "green", "warning": "yellow", "exceeded": "bold red"}
    for row in rows:
        f = row.figures
        d = f.get("disclosures", {})
        b = f.get("bounds", {})

        def bits(key: str, d: dict[str, Any] = d) -> str:
            return f"{d[key][0]:.2f}" if key in d else "-"

        top = "-"
        if f.get("kind") == "unknown" and f.get("top_candidate"):
            top = f"{f['top_candidate']} ({f.get('information_gain_bits', 0):.2f})"
        table.add_row(
            _cell(row.track),
            f"[{style.get(row.state, '')}]{row.state}[/]",
            str(row.windows),
            f"{row.speech_seconds:.0f}",
            bits("combined.lid"),
            bits("combined.srd"),
            bits("f0.lid"),
            bits("phone.lid"),
            bits("embedding.lid"),
            f"{b.get('basic', 0):.1f}",
            f"{b.get('advanced', 0):.1f}",
            f"{b.get('optimal', 0):.1f}",
            f"{f.get('ceiling_bits', float('nan')):.2f}",
            f"{f.get('budget_bits', float('nan')):g}",
            _cell(top),
        )
    table.caption = (
        f"{len(rows)} tracks; LID/SRD = combined features; f0/phone/emb = LID per feature; "
        "basic/adv/opt = composition bounds"
    )
    return table


@app.command("status")
@user_errors
def status_command(
    db: Annotated[Path | None, typer.Option("--db", help="Database (daemon.db).")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="config.toml.")] = None,
    live: Annotated[bool, typer.Option("--live", help="Refresh until stopped.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between refreshes.")
    ] = 1.0,
    seconds: Annotated[
        float, typer.Option("--seconds", min=0.0, help="With --live: stop after this long.")
    ] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Per-speaker disclosure of the current period, as the daemon stored it."""
    import time

    from rich.live import Live

    from monitor.daemon.config import load_config
    from monitor.daemon.status import current_status
    from monitor.store import open_store

    settings = load_config(config, [f"daemon.db={json.dumps(str(db))}"] if db else [])
    period = settings.budget.period_seconds
    if not console.is_terminal:
        console.width = max(console.width, 140)
    with open_store(settings.daemon.db, create=False) as store:
        if as_json:
            rows = current_status(store, period)
            console.print_json(json.dumps([row.__dict__ for row in rows]))
            return
        if not live:
            console.print(_status_table(current_status(store, period)))
            return
        ends = time.monotonic() + seconds if seconds > 0 else float("inf")
        with Live(console=console, refresh_per_second=4) as screen:
            try:
                while True:
                    rows = current_status(store, period)
                    screen.update(_status_table(rows))
                    if time.monotonic() >= ends:
                        break
                    time.sleep(min(interval, max(0.0, ends - time.monotonic())))
            except KeyboardInterrupt:
                pass


def main() -> int:
    """Console-script entry point; usage errors (a missing or unknown option, a value of the wrong
    type) are one line on stderr and exit 2, like every other user error."""
    from typer.exceptions import TyperException

    try:
        code = app(prog_name="voxmeter", standalone_mode=False)
    except typer.Abort:
        err_console.print("voxmeter: aborted", markup=False, highlight=False)
        return 130
    except TyperException as error:  # click's UsageError family: exit_code 2
        ctx = getattr(error, "ctx", None)
        command = ctx.command_path if ctx is not None else "voxmeter"
        err_console.print(
            f"{command}: error: {error.format_message()} (see --help)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return int(getattr(error, "exit_code", 2))
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
