"""``voxmeter run`` (the live monitor) and ``voxmeter status`` (what it stored this period)."""

from __future__ import annotations

import json
import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from monitor.cli.common import (
    cell,
    console,
    err_console,
    user_errors,
)
from monitor.printable import printable

if TYPE_CHECKING:
    from monitor.daemon.pipeline import RunSummary
    from monitor.events.figures import Figures
    from monitor.ledger.status import TrackStatus
    from monitor.settings.sections import Config

# The options the daemon's commands share, declared once.
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override one key: section.key=value (repeatable)."),
]
DaemonDbOption = Annotated[Path | None, typer.Option("--db", help="Database (daemon.db).")]
SourceOption = Annotated[
    list[str] | None,
    typer.Option(
        "--source",
        help="mic[:DEVICE], file:PATH, stdin, wyoming…, NAME=SPEC; repeat it for several "
        "sources (daemon.source; audio.sources).",
    ),
]
FastOption = Annotated[bool, typer.Option("--fast", help="Read a file source as fast as possible.")]
DurationOption = Annotated[
    float | None,
    typer.Option("--duration", min=0.0, help="Stop after this many seconds (0 = never)."),
]
ExitAtEndOption = Annotated[
    bool | None,
    typer.Option(
        "--exit-at-end/--keep-running",
        help="Stop when a file or stdin ends, or keep running (daemon.exit_at_end, default true).",
    ),
]


def relay_command(
    config: Annotated[
        Path | None, typer.Option("--config", help="config.toml (the daemon's, relay.socket set).")
    ] = None,
    set_: SetOption = None,
) -> None:
    """Relay the Wyoming proxies in a small process of their own; voxmeter run measures.

    Listed here for ``voxmeter --help``; ``voxmeter relay`` itself runs
    :func:`monitor.relay.process.main` before typer (see :func:`monitor.cli.main`)."""
    from monitor.relay.process import main

    args = [f"--config={config}"] if config is not None else []
    raise typer.Exit(main([*args, *(f"--set={item}" for item in set_ or [])]))


@user_errors
def run_command(
    config: Annotated[
        Path | None, typer.Option("--config", help="config.toml (default: built-in defaults).")
    ] = None,
    set_: SetOption = None,
    db: DaemonDbOption = None,
    source: SourceOption = None,
    fast: FastOption = False,
    duration: DurationOption = None,
    exit_at_end: ExitAtEndOption = None,
) -> None:
    """Run the live monitor: per-speaker disclosure, budgets, metrics and alerts."""
    from monitor.daemon.build import run_daemon
    from monitor.settings.config import load_config

    overrides = _run_overrides(set_, db, source, fast, duration, exit_at_end)
    settings = load_config(config, overrides)
    summary = run_daemon(settings)  # a refused start is shown and held there (daemon.problem)
    _print_summary(summary, settings)
    # Everything is committed and closed. Skip the interpreter's teardown of torch and
    # pocketsphinx (seconds on a small device) so that SIGTERM exits within 2 s.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run_overrides(
    set_: list[str] | None,
    db: Path | None,
    source: list[str] | None,
    fast: bool,
    duration: float | None,
    exit_at_end: bool | None,
) -> list[str]:
    """The command line's options as ``--set`` overrides, after the user's own: one way into
    the settings, so a flag and its key can never disagree."""
    from monitor.errors import InputError
    from monitor.userfiles import not_utf8

    overrides = list(set_ or [])
    for option, value in [("--db", str(db or "")), *(("--source", s) for s in source or [])]:
        if (problem := not_utf8(value)) is not None:  # TOML and JSON could not carry it
            shown = value.encode(errors="replace").decode()
            raise InputError(option, f"{shown!r}: {problem}")
    if db is not None:
        overrides.append(f"daemon.db={json.dumps(str(db))}")
    if source:  # one: daemon.source, as always; several: audio.sources
        sources = source if len(source) > 1 else []
        overrides.append(f"audio.sources={json.dumps(sources)}")
        if len(source) == 1:
            overrides.append(f"daemon.source={json.dumps(source[0])}")
    if fast:
        overrides.append('audio.pace="fast"')
    if duration is not None:
        overrides.append(f"daemon.duration_seconds={duration}")
    if exit_at_end is not None:
        overrides.append(f"daemon.exit_at_end={'true' if exit_at_end else 'false'}")
    return overrides


def _print_summary(summary: RunSummary, settings: Config) -> None:
    """What the run measured, per track and in all, on stderr (stdout stays for data)."""
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
        f"{summary.dropped_seconds:.1f} s of audio dropped, "
        f"{summary.audio_device_errors} device errors",
        **out,
    )


def _status_table(rows: list[TrackStatus]) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title="voxmeter: disclosure per speaker this period (bits; LID/SRD of the pooled speech "
        "against the population N)",
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
        bits = partial(_bits_cell, f)
        top = "-"
        if f.kind == "unknown" and f.top_candidate:
            top = f"{f.top_candidate} ({f.information_gain_bits or 0.0:.2f})"
        b = f.bounds
        table.add_row(
            cell(row.track),
            f"[{style.get(row.state, '')}]{row.state}[/]",
            str(row.windows),
            f"{row.speech_seconds:.0f}",
            bits("combined", "lid"),
            bits("combined", "srd"),
            bits("f0", "lid"),
            bits("phone", "lid"),
            bits("embedding", "lid"),
            _bound_cell(b.basic_bits, f.ceiling_bits),
            _bound_cell(b.advanced_bits, f.ceiling_bits),
            _bound_cell(b.optimal_bits, f.ceiling_bits),
            f"{f.ceiling_bits:.2f}",
            f"{f.budget_bits:g}",
            cell(top),
        )
    population = max((row.figures.population_size for row in rows), default=0.0)
    table.caption = (
        f"{len(rows)} tracks; figures against a population of N = {population:,.0f} "
        "(ceil = log2 N); LID/SRD = combined features; f0/phone/emb = LID per feature; "
        "(≥X) = beyond what the reference voices validate, which vouch for at least X bits; "
        "basic/adv/opt = composition bounds (* = above log2 N, shown at the ceiling: vacuous)"
    )
    return table


def _bits_cell(f: Figures, feature: str, measure: str) -> str:
    """One figure of the table; (≥X) where it lies beyond what the reference voices validate
    and they vouch for at least X bits."""
    try:
        shown = f"{f.bits(feature, measure):.2f}"
    except KeyError:
        return "-"
    bound = f.at_least.get(f"{feature}.{measure}")
    return f"{shown} (≥{bound:.1f})" if bound is not None else shown


def _bound_cell(bound_bits: float, ceiling_bits: float) -> str:
    """A DP composition bound as the table shows it: no disclosure can exceed log2 N, so a
    bound above the ceiling says nothing more than the ceiling and is shown there, marked.
    (The ledger, MQTT and Prometheus keep the bound itself.)"""
    if bound_bits > ceiling_bits:
        return f"{ceiling_bits:.2f}*"
    return f"{bound_bits:.1f}"


@user_errors
def status_command(
    db: DaemonDbOption = None,
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
    import shutil
    import time

    from rich.console import Console
    from rich.live import Live

    from monitor.ledger.status import current_status
    from monitor.settings.config import load_config
    from monitor.store import open_store

    settings = load_config(config, [f"daemon.db={json.dumps(str(db))}"] if db else [])
    status = partial(
        current_status,
        period_seconds=settings.budget.period_seconds,
        zone=settings.budget.zone,
        budget_measure=settings.budget.measure,
        delta=settings.scorer.delta,
    )
    # piped or captured: wide enough that a row stays one line, on a console of its own whose
    # width is read now (COLUMNS, else 140): the shared console's width is fixed when it is made
    columns = shutil.get_terminal_size((140, 25)).columns
    out = console if console.is_terminal else Console(width=max(columns, 140))
    with open_store(settings.daemon.db, read_only=True) as store:
        if as_json:
            console.print_json(json.dumps([row.to_json() for row in status(store)]))
            return
        if not live:
            out.print(_status_table(status(store)))
            return
        ends = time.monotonic() + seconds if seconds > 0 else float("inf")
        with Live(console=out, refresh_per_second=4) as screen:
            try:
                while True:
                    screen.update(_status_table(status(store)))
                    if time.monotonic() >= ends:
                        break
                    time.sleep(min(interval, max(0.0, ends - time.monotonic())))
            except KeyboardInterrupt:
                pass
