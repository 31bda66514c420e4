"""The ``voxmeter`` command line: one function per command, no logic.

Each command parses its options, calls the library, and prints. User errors
(:class:`monitor.errors.VoxmeterError`) become one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from monitor import __version__
from monitor.errors import VoxmeterError

app = typer.Typer(
    name="voxmeter",
    help="Measure how much speech discloses about who is speaking, in bits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Inspect and edit the template database.", no_args_is_help=True)
app.add_typer(db_app, name="db")

console = Console()
err_console = Console(stderr=True)


def user_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a VoxmeterError into one line on stderr and its exit code: no traceback."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except VoxmeterError as error:
            err_console.print(f"voxmeter: error: {error}", markup=False, highlight=False)
            raise typer.Exit(error.exit_code) from None

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
def features_command(
    files: Annotated[list[Path], typer.Argument(help="Audio files (wav, flac, ...) to analyse.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON (a list for several files).")
    ] = False,
) -> None:
    """Print each file's observations under every feature and the time each stage took.

    All files are processed in one process (models load once). A file that cannot be read gets
    one error line on stderr; the others are still printed, and the exit status is 2 at the end.
    The first file's times include loading the models.
    """
    from monitor.features.extract import describe, extract_file

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
    from monitor.report_text import (
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
    from monitor.report_text import (
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


@app.command("enroll")
@user_errors
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
    split: Annotated[
        str | None,
        typer.Option("--split", help="Only speakers of this original_split (train|test)."),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Worker processes.")] = 1,
    features: Annotated[
        str, typer.Option("--features", help="Comma-separated features to enrol.")
    ] = "f0,phone,embedding",
    cache: Annotated[
        Path | None,
        typer.Option("--cache", help="Feature cache (default $VOXMETER_CACHE, ~/.cache/voxmeter)."),
    ] = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Do not read or write the feature cache.")
    ] = False,
) -> None:
    """Build one template per speaker and feature from a corpus (replacing old templates)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from monitor.corpus import scan_corpus
    from monitor.enroll import default_cache_dir, enroll_corpus
    from monitor.features.base import FEATURE_NAMES
    from monitor.features.extract import FeatureCache
    from monitor.store import open_store

    if utterances is not None and seconds is not None:
        raise VoxmeterError("--utterances and --seconds exclude each other: give one")
    if seconds is not None and seconds <= 0:
        raise VoxmeterError(f"--seconds must be positive, got {seconds:g}")
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
    path = _db_path(db)
    feature_cache = None if no_cache else FeatureCache(cache or default_cache_dir())
    with open_store(path) as store:
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

            report = enroll_corpus(
                store,
                scanned,
                features=names,
                utterances=utterances,
                seconds=seconds,
                local=local,
                jobs=jobs,
                cache=feature_cache,
                progress=progress,
            )
    out = {"markup": False, "highlight": False, "soft_wrap": True}
    for file, reason in report.skipped_files:
        err_console.print(f"voxmeter: skipped file {file}: {reason}", **out)
    for alias, reason in report.skipped_speakers:
        err_console.print(f"voxmeter: skipped speaker {alias}: {reason}", **out)
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


def _identity_json(identity: Any) -> dict[str, Any]:
    return {
        "alias": identity.alias,
        "metadata": identity.metadata,
        "created": identity.created,
        "templates": {
            f: {"dimension": t.dimension, "seconds": t.seconds, "updated": t.updated}
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
            identity.alias,
            " ".join(identity.templates) or "-",
            f"{seconds:.1f}",
            ", ".join(identity.local_profiles) or "-",
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
        identity = store.identity(alias)
    document = _identity_json(identity)
    if as_json:
        typer.echo(json.dumps(document))
        return
    out = {"markup": False, "highlight": False, "soft_wrap": True}
    console.print(f"identity {identity.alias} (created {identity.created})", **out)
    for key, value in identity.metadata.items():
        console.print(f"  {key}: {value}", **out)
    for feature, info in identity.templates.items():
        console.print(
            f"  template {feature}: {info.dimension} values, {info.seconds:.1f} s of speech, "
            f"updated {info.updated}",
            **out,
        )
    console.print(f"  local profiles: {', '.join(identity.local_profiles) or '-'}", **out)


@db_app.command("remove")
@user_errors
def db_remove_command(
    alias: Annotated[str, typer.Argument(help="Identity alias.")],
    db: Annotated[Path | None, typer.Option("--db", help=_DB_HELP)] = None,
) -> None:
    """Delete an identity with its templates and local profiles."""
    from monitor.store import open_store

    path = _db_path(db)
    with open_store(path, create=False) as store:
        identity = store.identity(alias)
        store.remove_identity(alias)
    profiles = f", local profiles {', '.join(identity.local_profiles)}"
    console.print(
        f"removed {alias} from {path} ({len(identity.templates)} templates"
        f"{profiles if identity.local_profiles else ''})",
        markup=False,
        highlight=False,
    )


def main() -> None:
    """Console-script entry point."""
    app(prog_name="voxmeter")


if __name__ == "__main__":
    sys.exit(main())
