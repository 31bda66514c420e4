"""The figure over a day: bits against seconds of speech as the daemon's ledger accumulates
them, spoken and protected, at N_pop = 10³, 10⁶ and 8·10⁹, per embedding backend.

Nothing here re-computes a figure: each corpus test speaker is a household member of a
database built as ``voxmeter enroll --local --protect mcadams`` builds it (clean templates
from the speaker's first utterances, and the lazy-informed ``embedding+mcadams`` template of
the same utterances anonymised), four members per household beside the shipped reference
population (the corpus's train speakers: never the test speakers). The daemon's own parts then
score the speaker's later utterances as a day's commands, one window each, in order:
``load_scorer`` (the household and the shipped population, figures against
``[population] size`` through the shipped population model), ``track_scorer_for`` with
protection on (the track's evidence pooled window by window, and the received view: every
window as a protected upstream received it, McAdams at the configured α drawn per utterance
as ``evaluate --protect`` draws it, scored by the ignorant, lazy- and semi-informed attackers)
and the ledger (``LedgerWriter`` with the budget machine). The spoken figure is the record's
``combined.lid``; the protected one is what the budget compares once a track is protected:
the strongest attacker's (``Figures.budget_figure_bits``).

The rule of docs/measures.md is checked on the default backend: a typical day's commands (the
median speaker's last window) exceed ``budget.bits`` without protection and stay within it
with protection, and the budget is one typical command's figure (the median first window)
rounded down.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.population_data import TEMPLATE_UTTERANCES, read_split
from monitor.corpus import scan_corpus
from monitor.daemon.build import load_scorer, select_phone_backend
from monitor.enrolment.lazy import lazy_name
from monitor.events.messages import FeatureWindow, TrackedWindow, WindowScored
from monitor.features.base import Feature, Observation, get_feature, set_embedding_backend
from monitor.features.extract import FeatureCache, FileFeatures, default_cache_dir, extract_many
from monitor.ledger.budget import BudgetMachine
from monitor.ledger.writer import LedgerWriter
from monitor.population.shipped import load_shipped
from monitor.protect.files import DEFAULT_SEED, anonymise_file, utterance_alphas
from monitor.protect.mcadams import parse_alpha
from monitor.scoring.received import track_scorer_for
from monitor.settings.config import load_config
from monitor.settings.sections import Config
from monitor.store.database import Store, open_store
from monitor.store.templates import Enrolment, current_model
from monitor.vocabulary import FigureKey

DAY_POPULATIONS = (1e3, 1e6, 8e9)
BACKENDS = ("campplus-int8", "ecapa-int8", "campplus", "ecapa", "ge2e")
"""Every shipped embedding backend, the default first (the rule is checked on it)."""
HOUSEHOLD = 4  # members per database (the household-only database)
DAY0_UNIX = 1_767_225_600.0  # a local midnight: every window falls in one budget period
COMMAND_GAP_SECONDS = 600.0  # wall clock between two commands (the period never rolls)
EMBEDDING = "embedding"


@dataclass(frozen=True)
class Member:
    """One test speaker: template utterances, the day's commands, and each command's
    embedding as a protected upstream received it (None: nothing left after anonymising)."""

    speaker: str
    templates: tuple[FileFeatures, ...]
    commands: tuple[FileFeatures, ...]
    received: tuple[Observation | None, ...]
    lazy_template: Observation | None


@dataclass(frozen=True)
class Anonymised:
    """The test speakers' utterances anonymised once (backend-independent): path → copy."""

    copies: dict[str, Path]
    alpha: str
    cpu_seconds: float


def test_paths(corpus: Path, limit: int | None) -> dict[str, list[Path]]:
    """Each test speaker's utterances in corpus order (the first ``limit`` speakers)."""
    split = read_split(corpus)
    scanned = scan_corpus(corpus)
    chosen = sorted(s for s in scanned.speakers if split.get(s) == "test")[:limit]
    return {s: [Path(u.path).absolute() for u in scanned.utterances_of(s)] for s in chosen}


def anonymise(paths: dict[str, list[Path]], scratch: Path, alpha: str) -> Anonymised:
    """Every utterance anonymised as ``evaluate --protect`` does (α per utterance from one
    seeded draw in corpus order; 16-bit FLAC), into ``scratch``."""
    started = time.process_time()
    ordered = [p for speaker in paths.values() for p in speaker]
    copies: dict[str, Path] = {}
    for path, value in zip(ordered, utterance_alphas(ordered, parse_alpha(alpha), DEFAULT_SEED),
                           strict=True):  # fmt: skip
        copy = scratch / path.parent.name / f"{path.stem}.flac"
        anonymise_file(path, copy, value)
        copies[str(path)] = copy
    return Anonymised(copies, alpha, time.process_time() - started)


def members(
    paths: dict[str, list[Path]], anonymised: Anonymised, jobs: int
) -> tuple[list[Member], dict[str, float]]:
    """The speakers with the current backend's features (clean from the feature cache, the
    received embeddings extracted from the anonymised copies); the CPU of each step."""
    started = time.process_time()
    every = [p for speaker in paths.values() for p in speaker]
    clean = extract_many(every, FeatureCache(default_cache_dir()), jobs=jobs).files
    middle = time.process_time()
    copies = [anonymised.copies[str(p)] for p in every]
    received = extract_many(copies, None, features=(EMBEDDING,), jobs=jobs).files
    cost = {"clean_features": middle - started, "received_embeddings": time.process_time() - middle}
    embedding = get_feature(EMBEDDING)
    out = []
    for speaker, own in paths.items():
        kept = [p for p in own if (f := clean.get(str(p))) is not None and f.speech_seconds > 0]
        if len(kept) <= TEMPLATE_UTTERANCES:
            continue
        heard = [_received(received.get(str(anonymised.copies[str(p)]))) for p in kept]
        lazy = [h for h in heard[:TEMPLATE_UTTERANCES] if h is not None]
        out.append(
            Member(
                speaker,
                tuple(clean[str(p)] for p in kept[:TEMPLATE_UTTERANCES]),
                tuple(clean[str(p)] for p in kept[TEMPLATE_UTTERANCES:]),
                tuple(heard[TEMPLATE_UTTERANCES:]),
                embedding.pool(lazy) if lazy else None,
            )
        )
    return out, cost


def _received(features: FileFeatures | None) -> Observation | None:
    if features is None or features.speech_seconds <= 0:
        return None
    observation = features.observations[EMBEDDING]
    return observation if np.any(observation.values != 0) else None


def config_for(backend: str, population: float) -> Config:
    """The default configuration with this backend and N_pop (as ``--set`` would give it)."""
    return load_config(None, [f"population.size={population!r}", f'features.embedding="{backend}"'])


def enrol(
    store: Store, household: Sequence[Member], features: dict[str, Feature], alpha: str
) -> None:
    """The household's templates as ``voxmeter enroll --local --protect mcadams`` stores them."""
    model = f"{current_model(EMBEDDING)}+mcadams({parse_alpha(alpha)})"
    enrolments = []
    for member in household:
        observations = {
            name: f.pool([t.observations[name] for t in member.templates])
            for name, f in features.items()
        }
        extra = {}
        if member.lazy_template is not None:
            lazy = dataclasses.replace(member.lazy_template, feature=lazy_name())
            observations[lazy_name()] = lazy
            extra = {lazy_name(): model}
        enrolments.append(Enrolment(member.speaker, observations, models=extra or None))
    store.bulk_replace_templates(enrolments)


def household_day(
    household: Sequence[Member], config: Config, scratch: Path
) -> list[dict[str, Any]]:
    """Every member's commands through the daemon's scorer, received view and ledger: one row
    per window (speaker, place in the day, pooled seconds, spoken and protected bits)."""
    features = {name: get_feature(name) for name in config.features.enabled}
    store = open_store(scratch / "household.db")
    try:
        enrol(store, household, features, config.protect.alpha)
        select_phone_backend(config, store)
        scorer = load_scorer(config, store, features, load_shipped(config.features.embedding))
        measure = FigureKey.parse(config.budget.measure)
        stage = track_scorer_for(True, store, scorer, features, measure)
        ledger = LedgerWriter(
            store, BudgetMachine(config.budget), budget_bits=config.budget.bits, measure=measure,
            templates=scorer.n, alert_topic="bench/alerts", device_id="bench",
            ceiling_bits=scorer.ceiling_bits, population=scorer.population_size,
        )  # fmt: skip
        return [row for m in household for row in _member_day(m, stage, ledger, measure)]
    finally:
        store.close()


def _member_day(
    member: Member, stage: Any, ledger: LedgerWriter, measure: FigureKey
) -> list[dict[str, Any]]:
    rows = []
    start = 0.0
    commands = [(c, r) for c, r in zip(member.commands, member.received, strict=True) if r]
    for k, (command, received) in enumerate(commands, start=1):
        closed = DAY0_UNIX + COMMAND_GAP_SECONDS * k
        window = FeatureWindow(
            index=k - 1, start_seconds=start, end_seconds=start + command.speech_seconds,
            speech_seconds=command.speech_seconds, observations=command.observations,
            closed_monotonic=0.0, closed_unix=closed, feature_seconds=0.0,
            received_embedding=received,
        )  # fmt: skip
        start += command.speech_seconds + 1.0
        tracked = TrackedWindow(window, member.speaker, "local", member.speaker, 1.0, k == 1)
        scored = stage.process(tracked, DAY0_UNIX)
        (record,) = [e for e in ledger.process(scored) if isinstance(e, WindowScored)]
        figures = record.figures
        rows.append(
            {
                "speaker": member.speaker,
                "window": k,
                "seconds": figures.pooled_speech_seconds,
                "spoken": figures.bits(measure.feature, measure.measure),
                "protected": figures.budget_figure_bits,
                "beyond": str(measure) in figures.at_least,
                "attacker": scored.received.strongest(measure) if scored.received else None,
            }
        )
    return rows


def backend_day(
    backend: str,
    paths: dict[str, list[Path]],
    anonymised: Anonymised,
    scratch: Path,
    jobs: int,
) -> dict[str, Any]:
    """One backend's day at every N_pop: the rows of every window, and the CPU it took."""
    set_embedding_backend(backend)
    store = open_store(scratch / f"{backend}-calibration.db")  # empty: the shipped calibration
    select_phone_backend(config_for(backend, DAY_POPULATIONS[-1]), store)  # as the daemon
    store.close()
    people, cost = members(paths, anonymised, jobs)
    started = time.process_time()
    rows: dict[float, list[dict[str, Any]]] = {}
    for population in DAY_POPULATIONS:
        config = config_for(backend, population)
        rows[population] = []
        for first in range(0, len(people), HOUSEHOLD):
            folder = Path(tempfile.mkdtemp(dir=scratch))
            rows[population] += household_day(people[first : first + HOUSEHOLD], config, folder)
    cost["scoring"] = time.process_time() - started
    return {"rows": rows, "cost": cost, "speakers": len(people)}


def _median(values: Sequence[float]) -> float:
    return round(float(np.median(values)), 3) if len(values) else math.nan


def _label(population: float) -> str:
    return f"{population:g}"


def summary(
    rows: dict[float, list[dict[str, Any]]], budget: float, default: float
) -> dict[str, Any]:
    """Per place in the day (k-th command): medians over speakers at each N_pop, spoken and
    protected; then the typical command (first window) and the typical day (each speaker's
    last window) against the budget."""
    out: dict[str, Any] = {}
    table = rows[default]
    last = max((r["window"] for r in table), default=0)
    windows = []
    for k in range(1, last + 1):
        entry: dict[str, Any] = {"window": k}
        for population, values in rows.items():
            at = [r for r in values if r["window"] == k]
            if population == default:
                entry["speakers"] = len(at)
                entry["median_seconds"] = _median([r["seconds"] for r in at])
            name = _label(population)
            entry[f"spoken_{name}"] = _median([r["spoken"] for r in at])
            entry[f"protected_{name}"] = _median([r["protected"] for r in at])
        at = [r for r in table if r["window"] == k]
        entry["beyond_share"] = round(float(np.mean([r["beyond"] for r in at])), 3)
        windows.append(entry)
    out["windows"] = windows
    for population, values in rows.items():
        name = _label(population)
        ends = _day_ends(values)
        first = [r for r in values if r["window"] == 1]
        out[f"N_pop {name}"] = {
            "command_spoken_median_bits": _median([r["spoken"] for r in first]),
            "command_protected_median_bits": _median([r["protected"] for r in first]),
            "day_speech_seconds_median": _median([r["seconds"] for r in ends]),
            "day_spoken_median_bits": _median([r["spoken"] for r in ends]),
            "day_protected_median_bits": _median([r["protected"] for r in ends]),
            "day_spoken_over_budget_share": _share([r["spoken"] >= budget for r in ends]),
            "day_protected_over_budget_share": _share([r["protected"] >= budget for r in ends]),
            "protected_above_spoken_share": _share([r["protected"] > r["spoken"] for r in values]),
        }
    strongest = [r["attacker"] for r in table if r["attacker"]]
    out["strongest_attacker_share"] = {
        name: _share([a == name for a in strongest]) for name in sorted(set(strongest))
    }
    return out


def _day_ends(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each speaker's last window: the day's commands pooled."""
    ends: dict[str, dict[str, Any]] = {}
    for row in values:
        ends[row["speaker"]] = row  # rows are in day order per speaker
    return list(ends.values())


def _share(flags: Sequence[bool]) -> float:
    return round(float(np.mean(flags)), 3) if len(flags) else math.nan


def rule(figures: dict[str, Any], default: float) -> dict[str, Any]:
    """The budget by the rule of docs/measures.md from the default backend's day: the whole
    bits that a typical day exceeds unprotected (at most its figure) and stays within
    protected (above its figure), and of those the closest to one typical command's figure
    rounded down; None when no whole bit lies in that range."""
    at = figures[f"N_pop {_label(default)}"]
    spoken, protected = at["day_spoken_median_bits"], at["day_protected_median_bits"]
    lowest, highest = math.floor(protected) + 1, math.floor(spoken)
    command = math.floor(at["command_spoken_median_bits"])
    empty = lowest > highest
    return {
        "budget_bits_by_the_rule": None if empty else min(max(command, lowest), highest),
        "typical_command_bits_rounded_down": command,
        "typical_day_spoken_bits": spoken,
        "typical_day_protected_bits": protected,
        "budgets_meeting_the_rule": "none" if empty else f"{lowest} to {highest} bits",
    }


def day(
    corpus: Path,
    run: Any,
    *,
    backends: Sequence[str],
    limit: int | None,
    jobs: int,
    budget: float,
    default: float,
) -> None:
    """The figure over a day into ``run``'s figures and targets (see the module docstring)."""
    # the shipped reference speakers have no anonymised template (nor in the daemon): the
    # lazy-informed attacker scores them by their clean one, which the daemon logs per start
    logging.getLogger("monitor.scoring.received").setLevel(logging.ERROR)
    paths = test_paths(corpus, limit)
    alpha = config_for(backends[0], default).protect.alpha
    with tempfile.TemporaryDirectory(prefix="voxmeter-day-") as folder:
        scratch = Path(folder)
        anonymised = anonymise(paths, scratch / "anonymised", alpha)
        run.figures["anonymiser"] = {
            "alpha": alpha,
            "utterances": len(anonymised.copies),
            "cpu_seconds": round(anonymised.cpu_seconds, 1),
        }
        run.figures["default_population"] = default
        run.figures["default_budget_bits"] = budget
        for backend in backends:
            found = backend_day(backend, paths, anonymised, scratch, jobs)
            figures = summary(found["rows"], budget, default)
            figures["speakers"] = found["speakers"]
            figures["cpu_seconds"] = {k: round(v, 1) for k, v in found["cost"].items()}
            run.figures[backend] = figures
            print(backend, figures[f"N_pop {_label(default)}"], flush=True)
    first = backends[0]
    at = run.figures[first][f"N_pop {_label(default)}"]
    run.figures["rule"] = {"backend": first, **rule(run.figures[first], default)}
    run.target("typical_day_unprotected_exceeds_budget", at["day_spoken_median_bits"], ">=", budget)
    run.target("typical_day_protected_within_budget", at["day_protected_median_bits"], "<", budget)
    by_rule = run.figures["rule"]["budget_bits_by_the_rule"]
    if by_rule is not None:  # else the two targets above say why there is none
        run.target("default_budget_off_the_rule_bits", abs(by_rule - budget), "<=", 0.0)
