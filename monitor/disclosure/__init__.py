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

# zebra, baselines, similarity matrices, composition
from monitor.disclosure.baselines import (
    cllr,
    eer_rocch,
    eer_sweep,
    linkability,
    min_cllr,
    split_mated,
    top1_linkage,
)
from monitor.disclosure.composition import (
    basic,
    dp_disclosure_cap_bits,
    drv,
    kairouz_advanced,
    nats_to_bits,
    optimal,
    theorem33_points,
)
from monitor.disclosure.similarity_matrices import (
    deid,
    diagonal_dominance,
    gvd,
    oracle_pair_llr,
    speaker_similarity_matrix,
)
from monitor.disclosure.zebra import ZebraResult, ece_curve, pav_llr, zebra

__all__ += [
    "ZebraResult",
    "basic",
    "cllr",
    "deid",
    "diagonal_dominance",
    "dp_disclosure_cap_bits",
    "drv",
    "ece_curve",
    "eer_rocch",
    "eer_sweep",
    "gvd",
    "kairouz_advanced",
    "linkability",
    "min_cllr",
    "nats_to_bits",
    "optimal",
    "oracle_pair_llr",
    "pav_llr",
    "speaker_similarity_matrix",
    "split_mated",
    "theorem33_points",
    "top1_linkage",
    "zebra",
]
