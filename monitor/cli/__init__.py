"""The ``voxmeter`` command line: one function per command, no logic.

Each command parses its options, calls the library, and prints. User errors
(:class:`monitor.errors.VoxmeterError`) become one line on stderr and a non-zero exit.
The commands live by family (:mod:`.score`, :mod:`.corpus`, :mod:`.db`, :mod:`.daemon`, sharing
:mod:`.common`); this module builds the ``app`` and registers them in the order ``--help``
lists them.
"""

from __future__ import annotations

import sys

import typer

from monitor import __version__
from monitor.cli.common import console, err_console
from monitor.cli.corpus import calibrate_command, enroll_command, evaluate_command
from monitor.cli.daemon import relay_command, run_command, status_command
from monitor.cli.db import cache_app, db_app
from monitor.cli.models import models_app
from monitor.cli.score import compose_command, features_command, score_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="voxmeter",
    help="Measure how much speech discloses about who is speaking, in bits.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

app.add_typer(db_app, name="db")
app.add_typer(cache_app, name="cache")
app.add_typer(models_app, name="models")
app.command("features")(features_command)
app.command("score")(score_command)
app.command("compose", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
    compose_command
)
app.command("enroll")(enroll_command)
app.command("calibrate")(calibrate_command)
app.command("evaluate")(evaluate_command)
app.command("run")(run_command)
app.command("relay")(relay_command)
app.command("status")(status_command)


@app.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        console.print(f"voxmeter {__version__}")
        raise typer.Exit(0)


def main() -> int:
    """Console-script entry point; usage errors (a missing or unknown option, a value of the wrong
    type) are one line on stderr and exit 2, like every other user error. ``voxmeter relay``
    goes to its own parser at once (:func:`monitor.relay.process.main`): the relay process must
    stay small, and running typer's app loads pydantic (10 MB)."""
    from typer.exceptions import TyperException

    if sys.argv[1:2] == ["relay"]:
        from monitor.relay.process import main as relay_main

        return relay_main(sys.argv[2:])

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
