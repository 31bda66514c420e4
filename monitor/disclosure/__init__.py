"""Disclosure metrics: pure math on score matrices, no I/O (DESIGN Part A)."""

# ranks, srd, lid
from monitor.disclosure.lid import (
    LidCalibration,
    LidSummary,
    calibrated_llr,
    fit_lid_calibration,
    lid_ccdf,
    lid_log_posteriors,
    lid_per_trial,
    lid_posteriors,
    lid_summary,
    znorm_rows,
)
from monitor.disclosure.ranks import identity_ranks, rank_histogram, rank_of, true_rank_counts
from monitor.disclosure.srd import (
    RankFit,
    SrdStats,
    betabinom_pmf,
    fit_rank_model,
    identity_posterior,
    joint_posterior,
    rank_disclosure,
    srd_stats,
)

__all__ = [
    "LidCalibration",
    "LidSummary",
    "RankFit",
    "SrdStats",
    "betabinom_pmf",
    "calibrated_llr",
    "fit_lid_calibration",
    "fit_rank_model",
    "identity_posterior",
    "identity_ranks",
    "joint_posterior",
    "lid_ccdf",
    "lid_log_posteriors",
    "lid_per_trial",
    "lid_posteriors",
    "lid_summary",
    "rank_disclosure",
    "rank_histogram",
    "rank_of",
    "srd_stats",
    "true_rank_counts",
    "znorm_rows",
]
