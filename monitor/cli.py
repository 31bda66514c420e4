"""The ``voxmeter`` command line: one function per command, no logic.

Each command parses its options, calls the library, and prints. User errors
(:class:`monitor.errors.VoxmeterError`) become one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

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


def main() -> None:
    """Console-script entry point."""
    app(prog_name="voxmeter")


if __name__ == "__main__":
    sys.exit(main())
