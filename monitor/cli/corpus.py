"""The corpus commands ``voxmeter enroll``, ``calibrate`` and ``evaluate``: a labelled corpus in,
templates, a calibration or an audit out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from monitor.cli.audit_options import (
    AttackerOption,
    AuditLossOption,
    BucketsOption,
    CalibrationDbOption,
    CalibrationLossOption,
    CalibrationOption,
    CalibrationOutOption,
    CalibrationTemplateOption,
    EnrolProtectOption,
    LidFromOption,
    LocalOption,
    NarrowOption,
    ProtectAlphaOption,
    ProtectedOption,
    ProtectOption,
    RoomOption,
    SecondsOption,
    TemplateGridOption,
    TestSecondsOption,
    UtterancesOption,
    WerUtterancesOption,
)
from monitor.cli.common import (
    ALL_FEATURES,
    DB_HELP,
    CacheOption,
    EmbeddingOption,
    FeaturesOption,
    JobsOption,
    MinSpeechOption,
    NoCacheOption,
    SchedulerOption,
    SplitOption,
    calibration_db_path,
    console,
    corpus_job,
    db_path,
    err_console,
    follow_shipped_phone,
    new_file_removed_on_error,
    select_embedding,
    user_errors,
    warning_lines,
)
from monitor.errors import VoxmeterError
from monitor.numerals import ascii_float

if TYPE_CHECKING:
    from monitor.calibration.buckets import CalibrationSet
    from monitor.enrolment.enroll import EnrolmentReport


@user_errors
@warning_lines
def enroll_command(
    corpus: Annotated[Path, typer.Argument(help="Corpus root: <root>/<speaker>/<utt>.wav|flac.")],
    db: Annotated[Path | None, typer.Option("--db", help=DB_HELP)] = None,
    utterances: UtterancesOption = None,
    seconds: SecondsOption = None,
    local: LocalOption = False,
    split: SplitOption = None,
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
    features: FeaturesOption = ALL_FEATURES,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    min_speech: MinSpeechOption = 0.3,
    embedding: EmbeddingOption = None,
    protect: EnrolProtectOption = None,
    protect_alpha: ProtectAlphaOption = None,
    narrow: NarrowOption = True,
    room: RoomOption = True,
) -> None:
    """Build one template per speaker and feature from a corpus (replacing old templates)."""
    from monitor.cli.audit_options import lazy_template_alpha
    from monitor.corpus import check_speaker_names, scan_corpus
    from monitor.enrolment.enroll import enroll_corpus
    from monitor.store import open_store

    select_embedding(embedding)
    names = _enrolment_features(features, utterances, seconds, local)
    lazy_alpha = lazy_template_alpha(protect, protect_alpha)
    scanned = scan_corpus(corpus, split=split)
    check_speaker_names(scanned)  # before the database is touched or any audio processed
    with new_file_removed_on_error(path := db_path(db)), open_store(path) as store:
        store.check_writable()  # fail now, not after minutes of extraction
        follow_shipped_phone(names, store)  # the phone templates the daemon's calibration reads
        job = corpus_job(jobs, scheduler, cache, no_cache, min_speech)
        with (
            _enrolment_bar() as progress,
            replace(job, progress=progress).on_one_cluster() as job,  # one for all rounds
        ):
            report = enroll_corpus(
                store,
                scanned,
                features=names,
                utterances=utterances,
                seconds=seconds,
                local=local,
                job=job,
                protect=lazy_alpha,
                narrow=narrow,
                room=room and local,
            )
        references = max(store.template_counts().values(), default=0)
    _print_enrolment(report, path, utterances, seconds, references)


@contextmanager
def _enrolment_bar() -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar on stderr for the enrolment's files, and the callback that drives it
    (speaker/file of the last one done)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

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

        yield progress


def _enrolment_features(
    features: str, utterances: int | None, seconds: float | None, local: bool
) -> tuple[str, ...]:
    """The features asked for, after checking the options together (VoxmeterError, exit 2)."""
    from monitor.features.base import FEATURE_NAMES

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
    return names


def _print_enrolment(
    report: EnrolmentReport, path: Path, utterances: int | None, seconds: float | None, n: int
) -> None:
    """What was left out (stderr), the summary and the N references' line (stdout)."""
    from monitor.features.base import embedding_backend
    from monitor.population.shipped import shipped_count
    from monitor.references import summary

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
    console.print(summary(n, shipped_count(embedding_backend())), **out)


def _print_drops_per_speaker(files: Sequence[str]) -> None:
    """One line: how many files each speaker lost (speaker = the file's folder; entries about a
    whole speaker, "speaker NAME", are not files)."""
    counts = Counter(Path(file).parent.name for file in files if Path(file).is_absolute())
    if counts:
        listed = ", ".join(f"{speaker} {n}" for speaker, n in sorted(counts.items()))
        err_console.print(
            f"voxmeter: files skipped per speaker: {listed}",
            markup=False,
            highlight=False,
            soft_wrap=True,
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
            value = ascii_float(part)
        except ValueError:
            raise VoxmeterError(
                f"{option} {text!r}: {part!r} is not a number of seconds (digits 0-9)"
            ) from None
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
    from monitor.calibration.buckets import LOSSES

    if loss not in LOSSES:
        raise VoxmeterError(f"--loss {loss!r}: expected one of {', '.join(LOSSES)}")
    return loss


class _LazyBar:
    """A rich progress bar on stderr that appears with the first file (so an error that comes
    before any extraction prints as one line), driven by the extract_many callback; with Dask
    workers the same bar then follows the audit's row blocks (:meth:`blocks`)."""

    def __init__(self, label: str) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]{task.fields[label]}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=err_console,
        )
        self.task = self.bar.add_task("", total=None, label=label)
        self.started = False

    def __call__(self, done: int, total: int, file: str) -> None:
        where = "/".join(Path(file).parts[-2:])
        self._show(done, total, where)

    def blocks(self, done: int, total: int, what: str) -> None:
        """Row blocks of the score matrices finished by the workers (``what``: which pass)."""
        self._show(done, total, f"score rows, {what}", label="auditing")

    def _show(self, done: int, total: int, description: str, **fields: str) -> None:
        if not self.started:
            self.bar.start()
            self.started = True
        self.bar.update(self.task, completed=done, total=total, description=description, **fields)

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


@user_errors
@warning_lines
def calibrate_command(
    corpus: Annotated[Path, typer.Argument(help="Labelled dev corpus <root>/<speaker>/<utt>.")],
    out: CalibrationOutOption,
    split: SplitOption = None,
    db: CalibrationDbOption = None,
    loss: CalibrationLossOption = "ll",
    buckets: BucketsOption = "1,2,3,6,12,24,48,96",
    template_seconds: CalibrationTemplateOption = "12",
    features: FeaturesOption = ALL_FEATURES,
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    min_speech: MinSpeechOption = 0.3,
    embedding: EmbeddingOption = None,
) -> None:
    """Fit the per-feature, per-length calibration (beta-binomial and LID) on a dev corpus."""

    select_embedding(embedding)
    from monitor.calibration.fit import calibrate_corpus
    from monitor.outputs import check_output_file

    names = _feature_list(features)
    loss = _check_loss(loss)
    bucket_list = [b for b in _seconds_list(buckets, "--buckets") if b is not None]
    template = _seconds_list(template_seconds, "--template-seconds", allow_rest=True)
    if len(template) != 1:
        raise VoxmeterError(f"--template-seconds {template_seconds!r}: give one length")
    check_output_file(out, "--out")
    store_path = calibration_db_path(db)  # a dangling link or a folder: said now, not after the fit
    job = corpus_job(jobs, scheduler, cache, no_cache, min_speech)
    with _LazyBar("extracting") as extraction_progress:
        calibration, skipped = calibrate_corpus(
            corpus,
            split=split,
            features=names,
            buckets=bucket_list,
            template_seconds=template[0],
            loss=loss,
            job=replace(job, progress=extraction_progress, steps=_steps("fitting")),
        )
    _save_calibration(calibration, skipped, out, store_path)


def _save_calibration(
    calibration: CalibrationSet, skipped: Sequence[tuple[str, str]], out: Path, db_path: Path | None
) -> None:
    """Write the calibration (and store it in the database if one is named), then say so."""
    _print_skipped(skipped)
    calibration.save(out)
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


@user_errors
@warning_lines
def evaluate_command(
    corpus: Annotated[Path, typer.Argument(help="Evaluation corpus <root>/<speaker>/<utt>.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json, PNGs.")],
    split: SplitOption = None,
    test_seconds: TestSecondsOption = "3,6,12",
    template_seconds: TemplateGridOption = "12",
    protected: ProtectedOption = None,
    protect: ProtectOption = None,
    protect_alpha: ProtectAlphaOption = None,
    wer_utterances: WerUtterancesOption = None,
    attacker: AttackerOption = None,
    loss: AuditLossOption = "ll",
    calibration: CalibrationOption = None,
    lid_from: LidFromOption = None,
    features: FeaturesOption = ALL_FEATURES,
    jobs: JobsOption = 1,
    scheduler: SchedulerOption = None,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    min_speech: MinSpeechOption = 0.3,
    embedding: EmbeddingOption = None,
) -> None:
    """Audit a labelled corpus: papers 000–003 figures per feature and length, report and plots."""
    from monitor.cli.audit_options import audit_calibration, protect_request
    from monitor.evaluate import evaluate_corpus
    from monitor.outputs import check_output_folder

    select_embedding(embedding)
    names, loss, tests, templates = _audit_grid(features, loss, test_seconds, template_seconds)
    loaded, calibration_path = audit_calibration(calibration, lid_from, names)
    check_output_folder(out, "--out")
    _check_protected(protected)
    job = corpus_job(jobs, scheduler, cache, no_cache, min_speech, steps=_steps("auditing"))
    with (
        _LazyBar("extracting") as extraction_progress,
        replace(job, progress=extraction_progress).on_one_cluster() as job,  # for both corpora
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
            calibration_source=None if loaded is None else str(calibration_path),
            lid_source=lid_from,
            protected=protected,
            protect=protect_request(protect, protect_alpha, wer_utterances, attacker),
            job=job,
            block_progress=extraction_progress.blocks,
        )
    _print_audit(document, out)


def _steps(verb: str) -> Callable[[str], None]:
    """Each longer step of a corpus command as one stderr line, ``verb`` first."""
    return lambda text: err_console.print(f"{verb} {text}", markup=False)


def _audit_grid(
    features: str, loss: str, test_seconds: str, template_seconds: str
) -> tuple[tuple[str, ...], str, list[float], list[float | None]]:
    """The features, loss and length grid of an audit, each checked (a bad one is named)."""
    names = _feature_list(features)
    loss = _check_loss(loss)
    tests = [t for t in _seconds_list(test_seconds, "--test-seconds") if t is not None]
    templates = _seconds_list(template_seconds, "--template-seconds", allow_rest=True)
    return names, loss, tests, templates


def _check_protected(protected: Path | None) -> None:
    """--protected names a corpus folder: said before any extraction starts."""
    from monitor.errors import InputError

    if protected is not None and not protected.is_dir():
        raise InputError(str(protected), "--protected: not a corpus folder")


def _print_audit(document: dict[str, Any], out: Path) -> None:
    """What the audit skipped, its headline figures and where the report went."""
    from monitor.cli.audit_options import print_protection

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
    print_protection(document)
