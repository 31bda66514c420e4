"""Disclosure metrics: pure math on score matrices, no I/O.

The names below are loaded from their submodules on first use (PEP 562), so that importing one
submodule (``monitor.disclosure.blocks``) does not import them all: ``voxmeter score`` on pooled
trials needs neither scipy.optimize nor scipy.special. New code imports from the submodules
(``zebra()`` only from ``monitor.disclosure.zebra``: the name is the submodule's).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from monitor.disclosure.lid import (
        LidCalibration,
        LidSummary,
        calibrated_llr,
        lid_ccdf,
        lid_log_posteriors,
        lid_per_trial,
        lid_posteriors,
        lid_summary,
        znorm_rows,
    )
    from monitor.disclosure.ranks import (
        identity_ranks,
        rank_histogram,
        rank_of,
        true_rank_counts,
    )
    from monitor.disclosure.similarity_matrices import (
        deid,
        diagonal_dominance,
        gvd,
        oracle_pair_llr,
        speaker_similarity_matrix,
    )
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
    from monitor.disclosure.zebra import (
        ZebraResult,
        ece_curve,
        pav_llr,
    )

_SOURCES = {
    "lid": (
        "LidCalibration",
        "LidSummary",
        "calibrated_llr",
        "lid_ccdf",
        "lid_log_posteriors",
        "lid_per_trial",
        "lid_posteriors",
        "lid_summary",
        "znorm_rows",
    ),
    "ranks": (
        "identity_ranks",
        "rank_histogram",
        "rank_of",
        "true_rank_counts",
    ),
    "srd": (
        "RankFit",
        "SrdStats",
        "betabinom_pmf",
        "fit_rank_model",
        "identity_posterior",
        "joint_posterior",
        "rank_disclosure",
        "srd_stats",
    ),
    "baselines": (
        "cllr",
        "eer_rocch",
        "eer_sweep",
        "linkability",
        "min_cllr",
        "split_mated",
        "top1_linkage",
    ),
    "composition": (
        "basic",
        "dp_disclosure_cap_bits",
        "drv",
        "kairouz_advanced",
        "nats_to_bits",
        "optimal",
        "theorem33_points",
    ),
    "similarity_matrices": (
        "deid",
        "diagonal_dominance",
        "gvd",
        "oracle_pair_llr",
        "speaker_similarity_matrix",
    ),
    "zebra": (
        "ZebraResult",
        "ece_curve",
        "pav_llr",
    ),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


__all__ = [
    "LidCalibration",
    "LidSummary",
    "RankFit",
    "SrdStats",
    "ZebraResult",
    "basic",
    "betabinom_pmf",
    "calibrated_llr",
    "cllr",
    "deid",
    "diagonal_dominance",
    "dp_disclosure_cap_bits",
    "drv",
    "ece_curve",
    "eer_rocch",
    "eer_sweep",
    "fit_rank_model",
    "gvd",
    "identity_posterior",
    "identity_ranks",
    "joint_posterior",
    "kairouz_advanced",
    "lid_ccdf",
    "lid_log_posteriors",
    "lid_per_trial",
    "lid_posteriors",
    "lid_summary",
    "linkability",
    "min_cllr",
    "nats_to_bits",
    "optimal",
    "oracle_pair_llr",
    "pav_llr",
    "rank_disclosure",
    "rank_histogram",
    "rank_of",
    "speaker_similarity_matrix",
    "split_mated",
    "srd_stats",
    "theorem33_points",
    "top1_linkage",
    "true_rank_counts",
    "znorm_rows",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
