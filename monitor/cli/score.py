"""``voxmeter features``, ``score`` and ``compose``: one file's observations, score files and
matrices, and the composition of releases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from monitor.cli.common import (
    EmbeddingOption,
    JobsOption,
    SchedulerOption,
    console,
    err_console,
    select_embedding,
    user_errors,
    warning_lines,
)
from monitor.errors import VoxmeterError


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
        select_embedding(embedding)
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


class _PassBar:
    """A rich bar on stderr over the row blocks of each pass the Dask workers make over a
    matrix; it appears with the first finished block, so an input error stays one line (and
    rich's progress module is loaded only then: score files never need it)."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None
        self.passes = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.bar = Progress(
                TextColumn("[bold]scoring[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=err_console,
                transient=True,
            )
            self.task = self.bar.add_task("", total=None)
            self.bar.start()
        if done == 1:
            self.passes += 1
        self.bar.update(self.task, completed=done, total=total, description=f"pass {self.passes}")

    def __enter__(self) -> _PassBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


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
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
) -> None:
    """Disclosure and baseline metrics of a score file (ZEBRA format) or a 1-to-N score matrix.

    With --jobs N or --scheduler, Dask workers read row blocks of a .npy matrix from the file
    (it must be at the same path on every worker) and the figures are those of one process.
    """
    from monitor.scorefiles.command import score_report_from_files
    from monitor.scorefiles.report import render_report, report_json, to_json_text

    with _PassBar() as progress:
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
            jobs=jobs,
            scheduler=scheduler,
            progress=progress,
        )
    if as_json:
        typer.echo(to_json_text(report_json(report)))
    else:
        render_report(report, console)


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
    from monitor.scorefiles.compose import (
        compose_json,
        compose_rows,
        parse_steps,
        render_composition,
    )
    from monitor.scorefiles.report import to_json_text

    # click options take one value each; the further step counts arrive as extra arguments.
    rows = compose_rows(epsilon, delta, parse_steps([steps, *ctx.args]))
    if as_json:
        typer.echo(to_json_text(compose_json(rows)))
    else:
        render_composition(rows, epsilon, delta, console)
