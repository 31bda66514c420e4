"""``voxmeter db`` (the template database) and ``voxmeter cache`` (the feature cache)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from monitor.cli.common import (
    DB_HELP,
    CacheOption,
    cell,
    console,
    db_path,
    user_errors,
)
from monitor.printable import printable

db_app = typer.Typer(help="Inspect and edit the template database.", no_args_is_help=True)
cache_app = typer.Typer(
    help="See or clear the feature cache (per-file observations, voice embeddings included).",
    no_args_is_help=True,
)


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
    db: Annotated[Path | None, typer.Option("--db", help=DB_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List identities: alias, features with templates, speech seconds, local profile."""
    from rich.table import Table

    from monitor.store import open_store

    path = db_path(db)
    with open_store(path, read_only=True) as store:
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
            cell(identity.alias),
            " ".join(identity.templates) or "-",
            f"{seconds:.1f}",
            cell(", ".join(identity.local_profiles) or "-"),
        )
    console.print(table)


@db_app.command("show")
@user_errors
def db_show_command(
    alias: Annotated[str, typer.Argument(help="Identity alias.")],
    db: Annotated[Path | None, typer.Option("--db", help=DB_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show one identity: metadata, templates (dimension, seconds, updated), local profiles."""
    from monitor.store import open_store

    with open_store(db_path(db), read_only=True) as store:
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
    db: Annotated[Path | None, typer.Option("--db", help=DB_HELP)] = None,
    cache: CacheOption = None,
) -> None:
    """Delete an identity with its templates and local profiles, and that speaker's feature
    cache entries (they hold the voice embedding of every utterance)."""
    from monitor.features.extract import FeatureCache, default_cache_dir
    from monitor.store import open_store

    path = db_path(db)
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


@db_app.command("check")
@user_errors
def db_check_command(
    db: Annotated[Path | None, typer.Option("--db", help=DB_HELP)] = None,
) -> None:
    """Check the database for damage (SQLite's full integrity_check); it is only read."""
    from monitor.errors import StoreError
    from monitor.store.repair import check

    path = db_path(db)
    result = check(path)
    if result.problems:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise StoreError(
            f"{path}: damaged: {result.problems[0]}{more}; copy what is readable into a new "
            f"file with `voxmeter db recover --db {path} NEW.db`, or restore a backup"
        )
    console.print(
        f"{path}: ok (integrity_check passed; schema version {result.schema_version}, "
        f"{result.identities} identities)",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@db_app.command("recover")
@user_errors
def db_recover_command(
    out: Annotated[Path, typer.Argument(help="The new database to write (must not exist).")],
    db: Annotated[Path | None, typer.Option("--db", help=DB_HELP)] = None,
) -> None:
    """Copy every readable row of a damaged database into a new file; the original is only
    read. Check the result with `voxmeter db list --db OUT` before using it."""
    from monitor.store import open_store
    from monitor.store.repair import recover

    path = db_path(db)
    recovery = recover(path, out)
    with open_store(out, create=False) as store:  # migrates it and checks it again
        version = store.schema_version
    rows = ", ".join(f"{table} {count}" for table, count in recovery.rows.items())
    lost = (
        f"; rows lost in unreadable pages of {', '.join(recovery.damaged_tables)}"
        if recovery.damaged_tables
        else "; no unreadable rows"
    )
    orphans = f"; {recovery.orphans_dropped} rows of lost parents dropped"
    console.print(
        f"recovered {path} into {out} (schema version {version}): {rows}{lost}"
        f"{orphans if recovery.orphans_dropped else ''}; {path} is unchanged",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


# ---- voxmeter cache ----------------------------------------------------------------------------


def _cache_folder(cache: Path | None) -> Path:
    """The cache folder asked for (or the default); a file there is a user error."""
    from monitor.errors import InputError
    from monitor.features.extract import default_cache_dir

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
