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
        )
    stages = ", ".join(f"{stage} {seconds:.3f}" for stage, seconds in timing.items())
    console.print(f"  {'timing':<10} {stages} (seconds)", markup=False, highlight=False)


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
    """
    from monitor.features.extract import describe, extract_file

    reports: list[dict[str, Any]] = []
    status = 0
    for path in files:
        try:
            report = describe(extract_file(path))
        except VoxmeterError as error:
            err_console.print(f"voxmeter: error: {error}", markup=False, highlight=False)
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


def main() -> None:
    """Console-script entry point."""
    app(prog_name="voxmeter")


if __name__ == "__main__":
    sys.exit(main())
