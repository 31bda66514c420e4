"""The figure record: everything measured about one track after one window, and its one JSON form.

:class:`Figures` is built once, by the ledger stage, and is the single source of every figure the
daemon shows: the ledger row (``to_json()``), the alert's ``figures``, the MQTT speaker state's
``figures``, ``voxmeter status`` (which parses ledger rows back with :meth:`Figures.from_json`)
and Prometheus (which reads the record). The flat keys the MQTT speaker state and the alert carried
before the record (``bits``, ``features``, ``bounds``, ...) stay for dashboards and Home
Assistant templates; they are renamings of ``to_json()``, so every consumer shows the same numbers.

``to_json()`` writes figures through :func:`~monitor.jsonsafe.finite_bits` (±inf → ±1e9 bits, a
number stays a number); NaN is not a figure the daemon produces. ``from_json`` reads every row the
ledger ever stored: rows written before the record lack ``track``, ``period_start_unix``,
``window_end_unix``, ``budget_measure`` and ``bounds.delta``, which the reader passes as
``fallback`` (from the row's columns and the configuration).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from monitor.jsonsafe import finite_bits
from monitor.vocabulary import (
    BOUNDS,
    BUDGET_STATES,
    FEATURES,
    MEASURES,
    Bound,
    BudgetState,
    FigureKey,
)

TrackKind = Literal["local", "unknown", "media"]
TRACK_KINDS: Final[tuple[TrackKind, ...]] = get_args(TrackKind)


@dataclass(frozen=True)
class Disclosure:
    """One (feature, measure) figure for one track: the pooled evidence and the last window alone.

    For a local profile the figures are about its identity; for an ``unknown-N`` track they are
    about the top candidate (the identity with the largest posterior).
    """

    feature: str  # one of FEATURES
    measure: str  # one of MEASURES
    cumulative_bits: float  # disclosure of all the track's windows in the period, pooled
    window_bits: float  # disclosure of the last window alone

    @property
    def key(self) -> str:
        """``feature.measure``, as the ledger, alerts and the budget setting spell it."""
        return f"{self.feature}.{self.measure}"


@dataclass(frozen=True)
class CompositionBounds:
    """What DP composition would allow after ``windows`` windows.

    ε = max over the period's windows of (window disclosure · ln 2) nats; bounds converted to bits.
    """

    windows: int  # T: windows of this track in the period
    epsilon_nats: float  # largest per-window ε so far
    delta: float  # target δ of the advanced and optimal bounds
    basic_bits: float  # T·ε
    advanced_bits: float  # min(T·ε, Kairouz Thm 3.4)
    optimal_bits: float  # Kairouz Thm 3.3, exact ε* for δ

    def bits(self) -> dict[Bound, float]:
        """The bounds in bits keyed by :data:`BOUNDS` (the one place that builds this dict)."""
        values = (self.basic_bits, self.advanced_bits, self.optimal_bits)
        return dict(zip(BOUNDS, values, strict=True))


ATTACKERS: Final = ("ignorant", "lazy")
"""Who scores what a protected upstream received (monitor.scoring.received): an attacker with
the clean templates, and one whose templates went through the same anonymiser."""


@dataclass(frozen=True)
class ReceivedFigures:
    """What the upstream received from one track this period (``view="received"``): its pooled
    evidence with every protected window as the upstream got it (anonymised embedding) and
    every clear one as it was, scored by each attacker present (``lazy`` needs the
    ``embedding+mcadams`` templates). The budget compares the strongest attacker's figure."""

    attackers: Mapping[str, tuple[Disclosure, ...]]  # attacker → every (feature, measure)
    protected_windows: int  # the track's windows this period that the upstream got anonymised
    protected_seconds: float  # their speech
    window_protected: bool  # the last window was one of them

    def bits(self, key: FigureKey, *, cumulative: bool = True) -> float:
        """The strongest attacker's figure for ``key`` (−inf when no attacker has it)."""
        values = [
            d.cumulative_bits if cumulative else d.window_bits
            for items in self.attackers.values()
            for d in items
            if d.feature == key.feature and d.measure == key.measure
        ]
        return max(values, default=float("-inf"))

    def strongest(self, key: FigureKey) -> str | None:
        """The attacker whose cumulative ``key`` figure :meth:`bits` gives (None: none has
        it): the one the live figure and the budget name."""
        figures = {
            name: d.cumulative_bits
            for name, items in self.attackers.items()
            for d in items
            if d.feature == key.feature and d.measure == key.measure
        }
        return max(figures, key=figures.__getitem__) if figures else None

    def to_json(self) -> dict[str, Any]:
        return {
            "attackers": {
                name: {
                    d.key: [finite_bits(d.cumulative_bits), finite_bits(d.window_bits)]
                    for d in items
                }
                for name, items in self.attackers.items()
            },
            "protected_windows": self.protected_windows,
            "protected_seconds": self.protected_seconds,
            "window_protected": self.window_protected,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReceivedFigures:
        return cls(
            attackers={
                str(name): tuple(
                    sorted(
                        (_disclosure(FigureKey.parse(k), v) for k, v in items.items()),
                        key=_disclosure_order,
                    )
                )
                for name, items in data["attackers"].items()
            },
            protected_windows=int(data["protected_windows"]),
            protected_seconds=float(data["protected_seconds"]),
            window_protected=bool(data["window_protected"]),
        )


@dataclass(frozen=True)
class Figures:
    """One track's figures after one window; see the module docstring."""

    track: str  # local profile alias or "unknown-N" (aliases only, never real names)
    kind: TrackKind
    identity: str | None  # template alias disclosed about (local profiles); None for unknown-N
    subject: str  # alias the figures are about: the identity, or the top candidate
    window_index: int  # 0-based window number since the daemon that scored it started
    windows: int  # T: the track's windows in the period, this one included
    pooled_speech_seconds: float  # L: speech of all the track's windows in the period
    disclosures: tuple[Disclosure, ...]  # every (feature, measure), in FEATURES × MEASURES order
    bounds: CompositionBounds
    ceiling_bits: float  # log2 N_pop (log2 N without a population model)
    templates: int  # N, the templates present
    budget_bits: float
    budget_measure: str  # "feature.measure" the budget uses, e.g. "combined.lid"
    state: BudgetState  # budget state after this window
    information_gain_bits: float | None  # unknown-N: log2 N − H(P) of the combined posterior
    top_candidate: str | None  # unknown-N: alias of the identity with the largest posterior
    top_candidate_bits: float | None  # unknown-N: log2(N · max_i P(i|s))
    extrapolated: Mapping[str, bool]  # feature → calibration bucket extrapolated beyond the last
    period_start_unix: float  # start of the budget period the window belongs to
    window_end_unix: float  # when the window closed, wall clock
    received: ReceivedFigures | None = None  # the track's audio was protected this period
    population: float = 0.0  # N_pop the figures are stated against (0: the N templates)
    at_least: Mapping[str, float] = field(default_factory=dict)
    """"feature.measure" → the lower bound the reference population vouches for, where the
    figure (the model's estimate) lies beyond what it can validate: "at least X bits"."""

    def __post_init__(self) -> None:
        # One order (FEATURES × MEASURES), whatever order the scorer or a JSON object gave:
        # records of the same figures are equal, and every consumer lists them alike.
        ordered = tuple(sorted(self.disclosures, key=_disclosure_order))
        object.__setattr__(self, "disclosures", ordered)

    def bits(self, feature: str, measure: str, *, cumulative: bool = True) -> float:
        """The figure for one (feature, measure); KeyError names a pair that is not present."""
        for item in self.disclosures:
            if item.feature == feature and item.measure == measure:
                return item.cumulative_bits if cumulative else item.window_bits
        raise KeyError(f"{feature}.{measure}")

    @property
    def population_size(self) -> float:
        """N_pop the figures are stated against (N, the templates, in records without one)."""
        return self.population or float(self.templates)

    @property
    def budget_at_least_bits(self) -> float | None:
        """What the reference population vouches for of the budget's figure where the figure
        lies beyond it ("at least X bits"); None where it vouches for the figure itself."""
        return None if self.received is not None else self.at_least.get(self.budget_measure)

    @property
    def budget_figure_bits(self) -> float:
        """The cumulative figure of ``budget_measure`` the budget is compared with: of what
        the upstream received (the strongest attacker) once the track was protected this
        period, else of the original audio."""
        key = FigureKey.parse(self.budget_measure)
        if self.received is not None:
            return self.received.bits(key)
        return self.bits(key.feature, key.measure)

    def to_json(self) -> dict[str, Any]:
        """The record as JSON (the ledger row's ``figures``); :meth:`from_json` inverts it."""
        b = self.bounds
        return {
            "track": self.track,
            "kind": self.kind,
            "identity": self.identity,
            "subject": self.subject,
            "window_index": self.window_index,
            "windows": self.windows,
            "pooled_speech_seconds": self.pooled_speech_seconds,
            "disclosures": {
                d.key: [finite_bits(d.cumulative_bits), finite_bits(d.window_bits)]
                for d in self.disclosures
            },
            "bounds": {
                **{k: finite_bits(v) for k, v in b.bits().items()},
                "epsilon_nats": finite_bits(b.epsilon_nats),
                "delta": b.delta,
            },
            "ceiling_bits": self.ceiling_bits,
            "templates": self.templates,
            "budget_bits": self.budget_bits,
            "budget_measure": self.budget_measure,
            "budget_figure_bits": finite_bits(self.budget_figure_bits),
            "budget_attacker": (
                None
                if self.received is None
                else self.received.strongest(FigureKey.parse(self.budget_measure))
            ),
            "state": self.state,
            "information_gain_bits": _finite_or_none(self.information_gain_bits),
            "top_candidate": self.top_candidate,
            "top_candidate_bits": _finite_or_none(self.top_candidate_bits),
            "extrapolated": dict(self.extrapolated),
            "period_start_unix": self.period_start_unix,
            "window_end_unix": self.window_end_unix,
            **({} if self.received is None else {"received": self.received.to_json()}),
            "population": self.population,
            "at_least": {k: finite_bits(v) for k, v in self.at_least.items()},
        }

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], *, fallback: Mapping[str, Any] | None = None
    ) -> Figures:
        """The record of :meth:`to_json`'s output; ``fallback`` fills keys old rows lack (top
        level, and ``bounds`` inside). ValueError names a key that is missing or malformed."""
        d = {**(fallback or {}), **data}
        try:
            bounds = {**(fallback or {}).get("bounds", {}), **d["bounds"]}
            windows = int(d["windows"])
            return cls(
                track=str(d["track"]),
                kind=_one_of("kind", d["kind"], TRACK_KINDS),
                identity=d.get("identity"),
                subject=str(d["subject"]),
                window_index=int(d["window_index"]),
                windows=windows,
                pooled_speech_seconds=float(d["pooled_speech_seconds"]),
                disclosures=tuple(
                    _disclosure(FigureKey.parse(key), values)
                    for key, values in d["disclosures"].items()
                ),
                bounds=CompositionBounds(
                    windows=windows,
                    epsilon_nats=float(bounds["epsilon_nats"]),
                    delta=float(bounds["delta"]),
                    basic_bits=float(bounds["basic"]),
                    advanced_bits=float(bounds["advanced"]),
                    optimal_bits=float(bounds["optimal"]),
                ),
                ceiling_bits=float(d["ceiling_bits"]),
                templates=int(d["templates"]),
                budget_bits=float(d["budget_bits"]),
                budget_measure=_figure_key(d["budget_measure"]),
                state=_one_of("state", d["state"], BUDGET_STATES),
                information_gain_bits=_float_or_none(d.get("information_gain_bits")),
                top_candidate=d.get("top_candidate"),
                top_candidate_bits=_float_or_none(d.get("top_candidate_bits")),
                period_start_unix=float(d["period_start_unix"]),
                window_end_unix=float(d["window_end_unix"]),
                extrapolated={str(k): bool(v) for k, v in d.get("extrapolated", {}).items()},
                received=(
                    None if d.get("received") is None else ReceivedFigures.from_json(d["received"])
                ),
                population=float(d.get("population", 0.0)),
                at_least={str(k): float(v) for k, v in d.get("at_least", {}).items()},
            )
        except KeyError as exc:
            raise ValueError(f"figures: missing key {exc}") from exc
        except (TypeError, AttributeError, IndexError) as exc:
            raise ValueError(f"figures: malformed ({exc})") from exc


def _disclosure_order(item: Disclosure) -> tuple[int, int, str]:
    """FEATURES × MEASURES order; a name outside the vocabulary goes last."""
    feature = FEATURES.index(item.feature) if item.feature in FEATURES else len(FEATURES)
    measure = MEASURES.index(item.measure) if item.measure in MEASURES else len(MEASURES)
    return feature, measure, item.key


def _disclosure(key: FigureKey, values: Any) -> Disclosure:
    """A ``disclosures`` entry (``[cumulative, window]`` bits) as a Disclosure."""
    return Disclosure(key.feature, key.measure, float(values[0]), float(values[1]))


def _one_of(key: str, value: Any, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise ValueError(f"figures: {key} {value!r} is not one of {', '.join(allowed)}")
    return value


def _figure_key(value: Any) -> str:
    try:
        return str(FigureKey.parse(str(value)))
    except ValueError as exc:
        raise ValueError(f"figures: budget_measure {value!r} {exc}") from exc


def _finite_or_none(bits: float | None) -> float | None:
    return None if bits is None else finite_bits(bits)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)
