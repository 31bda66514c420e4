"""Disclosure against a declared population, validated on speakers the model has not seen.

The population model (:mod:`monitor.disclosure.population`) is fitted on the corpus's train
speakers: their held-out windows scored against their own templates. For each test speaker's
window it then predicts, from the window's scores against the train speakers' templates plus
its own, the figures measured when the window is scored against N test speakers' templates
(its own and N − 1 others, DRAWS random sets; N = 125 is every test speaker): the budget's
per-window figure (``combined.lid``), the share of windows at the ceiling, the rank-1 rate
and SRD. N = 250 (every corpus speaker) and a model fitted on half the train speakers (62)
predicting N = 125 and 250 check the step beyond the reference population. The measured
per-window figure is the median over the draws: one draw's figure moves with which strangers
happen to be in the set (``draw_noise_bits``, the median difference of two draws).

Then the figure over a day (:mod:`bench.population_day`): each test speaker's later utterances
as a day's commands through the daemon's scorer, received view and ledger, spoken and
protected, at N_pop = 10³, 10⁶ and 8·10⁹, per embedding backend (``--backends``), checked
against the rule of docs/measures.md that gives the defaults of ``[population] size`` and
``budget.bits``.

Run alone: ``python -m bench population`` → bench/results/population.json and
population-day.json (``--day-only``: the latter alone); ``--speakers K`` (K per split) and
``--out DIR`` for a trial run.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import betaln
from scipy.stats import spearmanr

from bench.common import CORPUS, RESULTS_DIR, Run
from bench.population_data import CorpusScores, Scored, bucket_parameters, corpus_scores, fused_rows
from bench.population_day import BACKENDS, DAY_POPULATIONS, day
from monitor.calibration.buckets import CalibrationSet, load_default
from monitor.disclosure.population import (
    PopulationModel,
    PopulationSet,
    fit_population_set,
    population_figures,
)
from monitor.settings.population import PopulationSettings
from monitor.settings.sections import BudgetSettings

COMMAND = "nice -n 10 env PYTHONPATH=. .venv/bin/python -m bench population"
SIZES = (8, 16, 32, 64, 125)
DRAWS = 9  # measured sets per window and size below 125
MARGIN_BITS = 0.05  # within this of log2 N counts as "at the ceiling" (reference-set.json's)
DEFAULT_POPULATION = 8e9
"""The rule of docs/measures.md: the smallest of DAY_POPULATIONS at which at most 5 % of 3 s
windows reach the ceiling (``population.json`` checks it)."""
SEED = 49


def fit(scored: Scored, reference: np.ndarray, calibration: CalibrationSet) -> PopulationSet:
    """A model per calibration bucket from windows of ``reference`` speakers (column order)."""
    part = scored.take(np.isin(scored.speaker, reference))
    columns = np.broadcast_to(reference, (part.speaker.size, reference.size))
    edges = [b.seconds for b in calibration.buckets("combined")]
    return fit_population_set(
        {"combined": fused_rows(part, columns, calibration)},
        np.searchsorted(reference, part.speaker),  # reference is sorted
        part.seconds,
        buckets={"combined": edges},
    )


def both(a: Scored, b: Scored) -> Scored:
    """Two sets of scored evidence as one."""
    return Scored(
        {k: np.concatenate([a.raw[k], b.raw[k]]) for k in a.raw},
        np.concatenate([a.speaker, b.speaker]),
        np.concatenate([a.seconds, b.seconds]),
        np.concatenate([a.order, b.order]),
    )


def predict(
    scored: Scored,
    reference: np.ndarray,
    model: PopulationSet,
    calibration: CalibrationSet,
    N: float,
    *,
    present: bool,
) -> dict[str, np.ndarray]:
    """Figures of each row (subject: its own speaker, first) against a population of N:
    ``present`` — the templates scored (its own and ``reference``, the speaker's own left
    out of it) are members of the population (the daemon's case); otherwise N − 1 unseen
    impostors are all modelled (the check on held-out speakers)."""
    others = np.array([reference[reference != s] for s in scored.speaker])
    columns = np.concatenate([scored.speaker[:, None], others], axis=1)
    fused = fused_rows(scored, columns, calibration)
    edges, w, alpha, beta = bucket_parameters(scored.seconds, calibration)
    keys = (
        "lid_bits",
        "lid_at_least_bits",
        "srd_bits",
        "rank1_probability",
        "ceiling_probability",
        "beyond_reference",
    )
    out = {k: np.zeros(scored.speaker.size) for k in keys}
    for edge in np.unique(edges):
        rows = np.flatnonzero(edges == edge)
        i = rows[0]
        bucket = calibration.lookup("combined", float(edge))[0]
        figures = population_figures(
            fused[rows], 0, model=model.lookup("combined", float(edge)), population=N,
            lid_weight=float(w[i]), alpha=float(alpha[i]), beta=float(beta[i]),
            margin_bits=MARGIN_BITS, templates_in_population=present,
            lid_bias=bucket.lid_bias, log_prior_odds=bucket.log_prior_odds,
            sample=np.ones(fused.shape[1], dtype=bool) if present else None,
        )  # fmt: skip
        for k in keys:
            out[k][rows] = getattr(figures, k)
    return out


def measured(
    scored: Scored, columns: np.ndarray, calibration: CalibrationSet
) -> dict[str, np.ndarray]:
    """The scorer's figures with the subject in column 0 of ``columns`` (W, n)."""
    fused = fused_rows(scored, columns, calibration)
    _, w, alpha, beta = bucket_parameters(scored.seconds, calibration)
    n = columns.shape[1]
    centred = fused - fused.mean(axis=1, keepdims=True)
    z = centred / np.maximum(np.sqrt((centred**2).mean(axis=1, keepdims=True)), 1e-300)
    a = w[:, None] * z
    log_p = a[:, 0] - np.logaddexp.reduce(a, axis=1)
    above = (fused[:, 1:] > fused[:, :1]).sum(axis=1).astype(float)
    srd = (
        betaln(above + alpha, n - 1 - above + beta)
        - betaln(above + 1, n - above)
        - betaln(alpha, beta)
    ) / math.log(2)
    return {
        "lid_bits": (math.log(n) + log_p) / math.log(2),
        "srd_bits": srd,
        "rank1": (above == 0).astype(float),
    }


def measured_sets(
    scored: Scored, pool: np.ndarray, n: int, draws: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Column sets (W, n): own speaker first, then n − 1 others from ``pool``."""
    sets = []
    for _ in range(draws if n - 1 < pool.size - 1 else 1):
        others = np.array([rng.permutation(pool[pool != s])[: n - 1] for s in scored.speaker])
        sets.append(np.concatenate([scored.speaker[:, None], others], axis=1))
    return sets


def compare(
    pred: dict[str, np.ndarray], meas: list[dict[str, np.ndarray]], N: int
) -> dict[str, Any]:
    """Predicted against measured at one N: errors, ceiling shares, rank-1 rates."""
    lid = np.array([m["lid_bits"] for m in meas])
    srd = np.array([m["srd_bits"] for m in meas])
    typical = np.median(lid, axis=0)
    ceiling = math.log2(N) - MARGIN_BITS
    row: dict[str, Any] = {
        "N": N,
        "draws": len(meas),
        "lid_median_abs_error_bits": float(np.median(np.abs(pred["lid_bits"] - typical))),
        "lid_at_least_median_abs_error_bits": float(
            np.median(np.abs(pred["lid_at_least_bits"] - typical))
        ),
        "lid_mean_signed_error_bits": float(np.mean(pred["lid_bits"] - typical)),
        "srd_median_abs_error_bits": float(
            np.median(np.abs(pred["srd_bits"] - np.median(srd, axis=0)))
        ),
        "ceiling_share_measured": float(np.mean(lid >= ceiling)),
        "ceiling_share_predicted": float(np.mean(pred["ceiling_probability"])),
        "rank1_measured": float(np.mean([m["rank1"] for m in meas])),
        "rank1_predicted": float(np.mean(pred["rank1_probability"])),
        "beyond_reference_share": float(np.mean(pred["beyond_reference"])),
    }
    if len(meas) > 1:
        row["draw_noise_bits"] = float(np.median(np.abs(lid[0] - lid[1])))
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}


def validation(data: CorpusScores, calibration: CalibrationSet, run: Run) -> dict[str, Any]:
    rng = np.random.default_rng(SEED)
    split = np.array([data.split[s] for s in data.speakers])
    train, test = np.flatnonzero(split == "train"), np.flatnonzero(split == "test")
    windows = data.windows.take(np.isin(data.windows.speaker, test))
    evidence = both(data.windows, data.days.take(data.days.order >= 2))  # every length
    model = fit(evidence, train, calibration)
    half = np.sort(rng.permutation(train)[: train.size // 2])
    half_model = fit(evidence, half, calibration)
    rows, extrapolation = [], []
    every = np.arange(len(data.speakers))
    sizes = [n for n in SIZES if n <= test.size]
    for n in [*sizes, every.size]:
        pool = test if n <= test.size else every
        meas = [
            measured(windows, c, calibration) for c in measured_sets(windows, pool, n, DRAWS, rng)
        ]
        rows.append(compare(predict(windows, train, model, calibration, n, present=False), meas, n))
        print(rows[-1], flush=True)
        if n >= sizes[-1]:
            extrapolation.append(
                compare(predict(windows, half, half_model, calibration, n, present=False), meas, n)
            )
        if n == every.size:
            at_250 = meas[0]["lid_bits"]
    run.figures["validation"] = rows
    run.figures["extrapolation_from_half"] = {
        "reference_speakers": int(half.size),
        "sizes": extrapolation,
    }
    run.figures["model"] = [
        {"seconds": m.seconds, "windows": m.windows, "impostor_scores": m.scores,
         "tail_rate": round(m.tail_rate, 3), "validated_z": round(m.validated_z, 3),
         "validated_population": round(m.validated_population)}
        for m in model.features["combined"]
    ]  # fmt: skip
    return {"measured_250": at_250, "seconds": windows.seconds, "model": model, "train": train}


def defaults(
    data: CorpusScores, calibration: CalibrationSet, found: dict[str, Any], run: Run
) -> None:
    """The default N_pop's targets: windows at the ceiling, ranking against N = 250."""
    test = np.array([data.split[s] == "test" for s in data.speakers])
    windows = data.windows.take(test[data.windows.speaker])
    shipped = predict(
        windows, found["train"], found["model"], calibration, DEFAULT_POPULATION, present=True
    )
    every = np.arange(len(data.speakers))
    same = predict(windows, every, found["model"], calibration, DEFAULT_POPULATION, present=True)
    share = float(np.mean(shipped["ceiling_probability"]))
    below = found["measured_250"] < math.log2(len(data.speakers)) - MARGIN_BITS

    def rho(values: np.ndarray) -> float:
        if below.sum() <= 2:
            return math.nan
        return round(float(spearmanr(values[below], found["measured_250"][below]).statistic), 4)

    run.figures["default_population"] = {
        "population": DEFAULT_POPULATION,
        "ceiling_share_by_population": {
            f"{N:g}": round(
                float(
                    np.mean(
                        predict(
                            windows, found["train"], found["model"], calibration, N, present=True
                        )["ceiling_probability"]
                    )
                ),
                4,
            )
            for N in DAY_POPULATIONS
        },
        "windows": int(windows.speaker.size),
        "median_window_seconds": round(float(np.median(windows.seconds)), 2),
        "ceiling_share": round(share, 4),
        "ceiling_share_250_present": round(float(np.mean(same["ceiling_probability"])), 4),
        "beyond_reference_share": round(float(np.mean(shipped["beyond_reference"])), 4),
        "median_bits": round(float(np.median(shipped["lid_bits"])), 3),
        "windows_below_ceiling_at_250": int(below.sum()),
        "spearman_against_250": rho(same["lid_bits"]),
        "spearman_against_250_at_least": rho(same["lid_at_least_bits"]),
        "spearman_against_250_all_windows": round(
            float(spearmanr(same["lid_bits"], found["measured_250"]).statistic), 4
        ),
        "spearman_against_250_shipped_reference_only": rho(shipped["lid_bits"]),
        "release_080_ceiling_share_at_250": round(float(np.mean(~below)), 4),
    }
    rho_same = run.figures["default_population"]["spearman_against_250"]
    run.target("ceiling_share_at_default_population", round(share, 4), "<=", 0.05)
    run.target("spearman_against_measured_250", rho_same, ">=", 0.8)
    for row in run.figures["validation"]:
        if row["N"] <= 125:
            n = row["N"]
            run.target(f"lid_median_abs_error_N{n}", row["lid_median_abs_error_bits"], "<=", 0.25)
            run.target(
                f"ceiling_share_gap_N{n}",
                round(abs(row["ceiling_share_predicted"] - row["ceiling_share_measured"]), 4),
                "<=",
                0.05,
            )
            run.target(
                f"rank1_gap_N{n}",
                round(abs(row["rank1_predicted"] - row["rank1_measured"]), 4),
                "<=",
                0.05,
            )


def cpu_per_window(model: PopulationModel, calibration: CalibrationSet, references: int) -> float:
    """CPU seconds of the model for one window: every feature, pooled and alone (8 rows)."""
    rng = np.random.default_rng(SEED)
    row = rng.standard_normal(references + 1)
    bucket = calibration.lookup("combined", 3.0)[0]
    start, repeats = time.process_time(), 400
    for _ in range(repeats):
        population_figures(
            row,
            0,
            model=model,
            population=DEFAULT_POPULATION,
            lid_weight=bucket.lid_weight,
            alpha=bucket.alpha,
            beta=bucket.beta,
            lid_bias=bucket.lid_bias,
            log_prior_odds=bucket.log_prior_odds,
        )
    return 8 * (time.process_time() - start) / repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--speakers", type=int, default=None, help="K per split (a trial)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="embedding backends of the day figure, comma-separated (default: every shipped "
        "one; the first is checked against the rule of the defaults)",
    )
    parser.add_argument(
        "--day-only", action="store_true", help="the day figure alone (population-day.json)"
    )
    args = parser.parse_args(argv or [])
    command = " ".join([COMMAND, *(argv or [])])  # as run, options included
    if not args.day_only:
        validated(args, command)
    started = time.process_time()
    day_run = Run("population-day", command=command)
    day(
        args.corpus,
        day_run,
        backends=[b.strip() for b in args.backends.split(",") if b.strip()],
        limit=args.speakers,
        jobs=args.jobs,
        budget=BudgetSettings().bits,  # the shipped defaults, checked against the rule
        default=PopulationSettings().size,
    )
    day_run.figures["benchmark_cpu_seconds"] = round(time.process_time() - started, 1)
    print(f"wrote {day_run.write(path=args.out / 'population-day.json')}")
    return 0


def validated(args: argparse.Namespace, command: str) -> None:
    """The model against what is measured on held-out speakers → population.json."""
    started = time.process_time()
    calibration = load_default()
    run = Run("population", command=command)
    data = corpus_scores(args.corpus, limit=args.speakers, jobs=args.jobs)
    found = validation(data, calibration, run)
    defaults(data, calibration, found, run)
    model = found["model"].lookup("combined", 3.0)
    cpu = cpu_per_window(model, calibration, found["train"].size)
    run.figures["cpu_seconds_per_speech_second"] = round(cpu / 3.0, 6)
    run.target("cpu_core_per_speech_second", round(cpu / 3.0, 6), "<=", 0.002)
    run.figures["benchmark_cpu_seconds"] = round(time.process_time() - started, 1)
    print(f"wrote {run.write(path=args.out / 'population.json')}")


if __name__ == "__main__":
    raise SystemExit(main())
