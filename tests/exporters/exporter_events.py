"""Daemon events as the scorer would send them, for the exporter tests (plain data, no fakes)."""

from __future__ import annotations

import math

from monitor.events.messages import (
    FEATURES,
    MEASURES,
    CompositionBounds,
    DaemonStarted,
    Disclosure,
    Figures,
    PipelineStats,
    StateChanged,
    WindowScored,
)

N_TEMPLATES = 250
CEILING_BITS = math.log2(N_TEMPLATES)


def started(states: dict[str, str] | None = None, *, budget_bits: float = 5.0) -> DaemonStarted:
    return DaemonStarted(
        device_id="testdev",
        version="0.1.0",
        started_unix=1_800_000_000.0,
        templates=dict.fromkeys(("f0", "phone", "embedding"), N_TEMPLATES),
        ceiling_bits=CEILING_BITS,
        period_start_unix=1_800_000_000.0,
        states=dict(states or {}),  # type: ignore[arg-type]
        budget_bits=budget_bits,
    )


def scored(
    track: str,
    *,
    index: int = 0,
    combined_bits: float = 1.0,
    state: str = "ok",
    budget_bits: float = 5.0,
    unknown: bool = False,
    top_candidate: str | None = "spk-0042",
    closed_monotonic: float = 100.0,
    speech_seconds: float = 3.0,
) -> WindowScored:
    """A window of ``track``: feature f gets a figure derived from ``combined_bits``."""
    disclosures = tuple(
        Disclosure(
            feature=feature,
            measure=measure,
            cumulative_bits=combined_bits * (1.0 if feature == "combined" else 0.5)
            + (0.1 if measure == "srd" else 0.0),
            window_bits=combined_bits / (index + 1),
        )
        for feature in FEATURES
        for measure in MEASURES
    )
    windows = index + 1
    epsilon = max(combined_bits, 0.01) * math.log(2)
    return WindowScored(
        figures=Figures(
            track=track,
            kind="unknown" if unknown else "local",
            identity=None if unknown else f"id-{track}",
            subject=(top_candidate or "spk-0000") if unknown else f"id-{track}",
            window_index=index,
            windows=windows,
            pooled_speech_seconds=speech_seconds * windows,
            disclosures=disclosures,
            bounds=CompositionBounds(
                windows=windows,
                epsilon_nats=epsilon,
                delta=1e-5,
                basic_bits=windows * epsilon / math.log(2),
                advanced_bits=0.8 * windows * epsilon / math.log(2),
                optimal_bits=0.6 * windows * epsilon / math.log(2),
            ),
            ceiling_bits=CEILING_BITS,
            templates=N_TEMPLATES,
            budget_bits=budget_bits,
            budget_measure="combined.lid",
            state=state,  # type: ignore[arg-type]
            information_gain_bits=combined_bits * 0.9 if unknown else None,
            top_candidate=top_candidate if unknown else None,
            top_candidate_bits=combined_bits if unknown else None,
            extrapolated={"f0": False, "phone": False, "embedding": index > 3, "combined": False},
            period_start_unix=1_800_000_000.0,
            window_end_unix=1_800_000_000.0 + 3.0 * index,
        ),
        window_start_seconds=3.0 * index,
        window_end_seconds=3.0 * index + speech_seconds,
        window_speech_seconds=speech_seconds,
        window_closed_monotonic=closed_monotonic,
        scored_unix=1_800_000_000.5 + 3.0 * index,
        latency_seconds=0.2,
        stage_seconds={"features": 0.05, "scorer": 0.01},
    )


def changed(
    track: str, from_state: str, to_state: str, *, seq: int, bits: float = 4.2
) -> StateChanged:
    return StateChanged(
        track=track,
        from_state=from_state,  # type: ignore[arg-type]
        to_state=to_state,  # type: ignore[arg-type]
        bits=bits,
        budget_bits=5.0,
        seq=seq,
        reason="window",
        window_end_unix=1_800_000_003.0,
        changed_unix=1_800_000_003.5,
    )


def stats(
    total: int, speech: int, dropped_seconds: float, *, errors: int = 0, rtf: float = 0.1
) -> PipelineStats:
    return PipelineStats(
        frames_total=total,
        frames_speech=speech,
        dropped_seconds=dropped_seconds,
        audio_device_errors=errors,
        audio_seconds=total * 0.03,
        windows=speech // 100,
        queue_depths={"frames": 3, "windows": 1},
        stage_seconds={"features": 1.5},
        realtime_factor=rtf,
        tracks=2,
        at_unix=1_800_000_010.0,
    )
