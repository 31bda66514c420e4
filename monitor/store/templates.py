"""Identities, their templates and the device's local profiles.

An identity is an *alias* the user chose (a speaker id), never a real name, plus free JSON
metadata. Each identity holds at most one template per feature: a pooled
:class:`~monitor.features.base.Observation` stored as float64 bytes. Re-enrolling replaces all
of an identity's templates in one transaction, so a scorer never sees half an enrolment.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.errors import StoreError
from monitor.features.base import (
    FEATURE_NAMES,
    Observation,
    TemplateBatch,
    backend_of_version,
    get_feature,
)
from monitor.store.base import Database, blob_vector, dumps, utc_now, vector_blob

__all__ = [
    "LOCAL_PROFILE_FEATURE",
    "Enrolment",
    "Identity",
    "LocalProfile",
    "TemplateInfo",
    "TemplatesMixin",
]


LOCAL_PROFILE_FEATURE = "embedding"
"""The feature the daemon's tracker follows voices with: what a local profile stores."""


@dataclass(frozen=True)
class TemplateInfo:
    """What one stored template holds, without its values."""

    feature: str
    dimension: int
    seconds: float  # speech seconds pooled into the template
    updated: str  # ISO 8601 UTC
    model: str = ""  # the feature version that made it ('' = not recorded, before schema 3)


@dataclass(frozen=True)
class Identity:
    """One enrolled identity: alias, metadata, and a summary of its templates."""

    alias: str
    metadata: dict[str, Any]
    created: str
    templates: dict[str, TemplateInfo] = field(default_factory=dict)
    local_profiles: tuple[str, ...] = ()  # aliases of the device users linked to it


@dataclass(frozen=True)
class Enrolment:
    """One identity's new templates (feature → pooled observation), for bulk replacement."""

    alias: str
    observations: Mapping[str, Observation]
    metadata: Mapping[str, Any] | None = None  # None keeps an existing identity's metadata
    local_profile: str | None = None  # also register this device user, with the embedding
    models: Mapping[str, str] | None = None  # feature → version that made it (None: current)


@dataclass(frozen=True)
class LocalProfile:
    """A device user: their profile alias, the identity they are, their tracker embedding."""

    alias: str
    identity_alias: str
    embedding: Observation
    updated: str


def _feature_order(infos: Mapping[str, TemplateInfo]) -> dict[str, TemplateInfo]:
    """Templates in FEATURE_NAMES order (f0, phone, embedding), other features after, by name."""
    rank = {name: index for index, name in enumerate(FEATURE_NAMES)}
    return dict(sorted(infos.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))


def current_model(feature: str) -> str:
    """The version of ``feature`` this process extracts (for ``embedding``, its backend's)."""
    try:
        return get_feature(feature).version
    except ValueError:
        return ""


def model_name(model: str) -> str:
    """How a message names a stored model: the embedding backend, else the version itself."""
    return backend_of_version(model) if model else "an unrecorded model"


def _check_alias(alias: str, what: str = "alias") -> str:
    if not isinstance(alias, str) or not alias.strip() or alias != alias.strip():
        raise ValueError(f"{what} {alias!r}: must be a non-empty string without outer spaces")
    return alias


class TemplatesMixin(Database):
    """Identities, templates and local profiles (see module docstring)."""

    # ---- identities --------------------------------------------------------------------------
    def _identity_id(self, conn: sqlite3.Connection, alias: str) -> int:
        row = conn.execute("SELECT id FROM identities WHERE alias = ?", (alias,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no identity with alias {alias!r}")
        return int(row[0])

    def _ensure_identity(
        self, conn: sqlite3.Connection, alias: str, metadata: Mapping[str, Any] | None
    ) -> int:
        """Id of ``alias``, created if absent; its metadata replaced when one is given."""
        _check_alias(alias)
        row = conn.execute("SELECT id FROM identities WHERE alias = ?", (alias,)).fetchone()
        if row is None:
            cursor = conn.execute(
                "INSERT INTO identities (alias, metadata, created) VALUES (?, ?, ?)",
                (alias, dumps(dict(metadata or {})), utc_now()),
            )
            return int(cursor.lastrowid or 0)
        if metadata is not None:
            conn.execute(
                "UPDATE identities SET metadata = ? WHERE id = ?", (dumps(dict(metadata)), row[0])
            )
        return int(row[0])

    def add_identity(self, alias: str, metadata: Mapping[str, Any] | None = None) -> Identity:
        """Register a new identity (no templates yet); an existing alias is a StoreError."""
        _check_alias(alias)
        with self._transaction() as conn:
            exists = conn.execute("SELECT 1 FROM identities WHERE alias = ?", (alias,)).fetchone()
            if exists:
                raise StoreError(f"{self.path}: identity {alias!r} already exists")
            self._ensure_identity(conn, alias, metadata or {})
        return self.identity(alias)

    def identities(self) -> list[Identity]:
        """Every identity in alias order, with its template summaries and local profiles."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, alias, metadata, created FROM identities ORDER BY alias"
            ).fetchall()
            templates: dict[int, dict[str, TemplateInfo]] = {}
            for identity_id, feature, dimension, seconds, updated, model in conn.execute(
                "SELECT identity_id, feature, dimension, seconds, updated, model FROM templates"
            ):
                templates.setdefault(identity_id, {})[feature] = TemplateInfo(
                    feature, int(dimension), float(seconds), updated, model
                )
            profiles: dict[int, list[str]] = {}
            for identity_id, alias in conn.execute(
                "SELECT identity_id, alias FROM local_profiles ORDER BY alias"
            ):
                profiles.setdefault(identity_id, []).append(alias)
        return [
            Identity(
                alias=alias,
                metadata=json.loads(metadata),
                created=created,
                templates=_feature_order(templates.get(identity_id, {})),
                local_profiles=tuple(profiles.get(identity_id, ())),
            )
            for identity_id, alias, metadata, created in rows
        ]

    def identity(self, alias: str) -> Identity:
        """One identity by alias; an unknown alias is a StoreError naming it."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT id, metadata, created FROM identities WHERE alias = ?", (alias,)
            ).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no identity with alias {alias!r}")
            identity_id, metadata, created = row
            infos = _feature_order(
                {
                    feature: TemplateInfo(feature, int(dimension), float(seconds), updated, model)
                    for feature, dimension, seconds, updated, model in conn.execute(
                        "SELECT feature, dimension, seconds, updated, model FROM templates "
                        "WHERE identity_id = ?",
                        (identity_id,),
                    )
                }
            )
            profiles = tuple(
                r[0]
                for r in conn.execute(
                    "SELECT alias FROM local_profiles WHERE identity_id = ? ORDER BY alias",
                    (identity_id,),
                )
            )
        return Identity(alias, json.loads(metadata), created, infos, profiles)

    def remove_identity(self, alias: str) -> None:
        """Delete an identity with its templates and local profiles; unknown → StoreError."""
        with self._transaction() as conn:
            identity_id = self._identity_id(conn, alias)
            conn.execute("DELETE FROM identities WHERE id = ?", (identity_id,))

    # ---- templates ---------------------------------------------------------------------------
    def _replace(
        self,
        conn: sqlite3.Connection,
        enrolment: Enrolment,
        dimensions: dict[str, int],
        now: str,
        models: dict[str, str] | None = None,
    ) -> None:
        """Delete then insert one identity's templates inside the caller's transaction.

        ``dimensions`` and ``models`` remember, per feature, what this transaction already
        checked, so a bulk enrolment of N identities checks each feature once, not N times.
        """
        models = {} if models is None else models
        if not enrolment.observations:
            raise ValueError(f"identity {enrolment.alias!r}: no templates to store")
        identity_id = self._ensure_identity(conn, enrolment.alias, enrolment.metadata)
        conn.execute("DELETE FROM templates WHERE identity_id = ?", (identity_id,))
        for feature, observation in enrolment.observations.items():
            what = f"identity {enrolment.alias!r}, feature {feature!r}"
            if observation.feature != feature:
                raise ValueError(f"{what}: observation is for feature {observation.feature!r}")
            if not (np.isfinite(observation.seconds) and observation.seconds >= 0):
                raise ValueError(
                    f"{what}: seconds must be finite and ≥ 0, got {observation.seconds}"
                )
            blob, dimension = vector_blob(observation.values, what)
            model = (enrolment.models or {}).get(feature) or current_model(feature)
            if models.get(feature) != model:
                self._check_model(conn, feature, model, enrolment.alias)
                models[feature] = model
            if feature not in dimensions:
                row = conn.execute(
                    "SELECT dimension FROM templates WHERE feature = ? LIMIT 1", (feature,)
                ).fetchone()
                dimensions[feature] = int(row[0]) if row else dimension
            if dimensions[feature] != dimension:
                raise ValueError(
                    f"{what}: dimension {dimension} differs from the stored templates' "
                    f"{dimensions[feature]}"
                )
            conn.execute(
                "INSERT INTO templates "
                "(identity_id, feature, dimension, seconds, vector, updated, model)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (identity_id, feature, dimension, float(observation.seconds), blob, now, model),
            )
        if enrolment.local_profile is not None:
            embedding = enrolment.observations.get(LOCAL_PROFILE_FEATURE)
            if embedding is None:
                raise ValueError(
                    f"identity {enrolment.alias!r}: a local profile needs an "
                    f"{LOCAL_PROFILE_FEATURE!r} template"
                )
            self._upsert_local_profile(conn, enrolment.local_profile, identity_id, embedding, now)

    def _check_model(self, conn: sqlite3.Connection, feature: str, model: str, alias: str) -> None:
        """Refuse a template whose model differs from the stored ones of the same feature: an
        ECAPA vector scored against GE2E templates would be meaningless."""
        row = conn.execute(
            "SELECT model FROM templates WHERE feature = ? AND model != ? AND model != '' LIMIT 1",
            (feature, model),
        ).fetchone()
        if row is not None and model:
            raise StoreError(
                f"{self.path}: its {feature!r} templates were made by {model_name(row[0])}, "
                f"not {model_name(model)}: enrol {alias!r} with that backend "
                f"(--embedding {model_name(row[0])}) or into a new database"
            )

    def template_model(self, feature: str) -> str:
        """The model that made every stored ``feature`` template ('' when not recorded);
        templates of several models → StoreError (only an old database can hold them)."""
        with self._read() as conn:
            models = [
                r[0]
                for r in conn.execute(
                    "SELECT DISTINCT model FROM templates WHERE feature = ? AND model != ''",
                    (feature,),
                )
            ]
        if len(models) > 1:
            names = ", ".join(model_name(m) for m in models)
            raise StoreError(f"{self.path}: {feature!r} templates of several models ({names})")
        return models[0] if models else ""

    def replace_templates(
        self,
        alias: str,
        observations: Mapping[str, Observation],
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Make ``observations`` (feature → pooled observation) the identity's only templates.

        Creates the identity if needed. Atomic: on any failure the old templates stay.
        """
        with self._transaction() as conn:
            self._replace(conn, Enrolment(alias, observations, metadata), {}, utc_now())

    def bulk_replace_templates(self, enrolments: Iterable[Enrolment]) -> int:
        """Replace the templates of many identities in one transaction; returns how many."""
        count = 0
        dimensions: dict[str, int] = {}
        models: dict[str, str] = {}
        with self._transaction() as conn:
            now = utc_now()
            for enrolment in enrolments:
                self._replace(conn, enrolment, dimensions, now, models)
                count += 1
        return count

    def template(self, alias: str, feature: str) -> Observation:
        """One identity's template for one feature; missing → StoreError."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT t.vector, t.seconds FROM templates t JOIN identities i "
                "ON i.id = t.identity_id WHERE i.alias = ? AND t.feature = ?",
                (alias, feature),
            ).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: no {feature!r} template for identity {alias!r}")
        return Observation(feature, blob_vector(row[0]), float(row[1]))

    def template_batch(self, feature: str) -> tuple[tuple[str, ...], TemplateBatch]:
        """All templates of ``feature`` as one (N, D) float64 matrix, rows in identity order.

        Identity order is enrolment order (identity ids never change, re-enrolment keeps them),
        read straight from an index: sorting 10⁵ rows of blobs by alias would triple the time.

        One query and one ``np.frombuffer`` over the concatenated blobs: 10⁵ rows load in a
        fraction of a second. No template of this feature → StoreError.
        """
        with self._read() as conn:
            rows = conn.execute(
                "SELECT i.alias, t.vector, t.dimension FROM templates t "
                "JOIN identities i ON i.id = t.identity_id WHERE t.feature = ? "
                "ORDER BY t.identity_id",
                (feature,),
            ).fetchall()
        if not rows:
            raise StoreError(
                f"{self.path}: no {feature!r} templates (enrol speakers with `voxmeter enroll`)"
            )
        aliases, blobs, dimensions = zip(*rows, strict=True)
        dimension = int(dimensions[0])
        matrix = np.frombuffer(b"".join(blobs), dtype="<f8")
        if matrix.size != len(rows) * dimension:
            raise StoreError(f"{self.path}: {feature!r} templates have mixed dimensions")
        # Native float64 on little-endian machines: no copy. Read-only, shared by scorers.
        matrix = matrix.reshape(len(rows), dimension).astype(np.float64, copy=False)
        return tuple(aliases), TemplateBatch(feature=feature, matrix=matrix)

    def template_counts(self) -> dict[str, int]:
        """Number of templates per feature (the ``voxmeter_templates`` gauge)."""
        with self._read() as conn:
            return dict(
                conn.execute(
                    "SELECT feature, count(*) FROM templates GROUP BY feature ORDER BY feature"
                ).fetchall()
            )

    # ---- local profiles ----------------------------------------------------------------------
    def _upsert_local_profile(
        self,
        conn: sqlite3.Connection,
        profile_alias: str,
        identity_id: int,
        embedding: Observation,
        now: str,
    ) -> None:
        _check_alias(profile_alias, "profile alias")
        blob, dimension = vector_blob(embedding.values, f"local profile {profile_alias!r}")
        conn.execute(
            "INSERT INTO local_profiles "
            "(alias, identity_id, feature, dimension, seconds, vector, updated, model) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (alias) DO UPDATE SET "
            "identity_id = excluded.identity_id, feature = excluded.feature, "
            "dimension = excluded.dimension, seconds = excluded.seconds, "
            "vector = excluded.vector, updated = excluded.updated, model = excluded.model",
            (
                profile_alias,
                identity_id,
                embedding.feature,
                dimension,
                embedding.seconds,
                blob,
                now,
                current_model(embedding.feature),
            ),
        )

    def add_local_profile(
        self, profile_alias: str, identity_alias: str, embedding: Observation
    ) -> None:
        """Register (or update) a device user linked to an enrolled identity."""
        _check_alias(profile_alias, "profile alias")
        with self._transaction() as conn:
            identity_id = self._identity_id(conn, identity_alias)
            self._upsert_local_profile(conn, profile_alias, identity_id, embedding, utc_now())

    def local_profiles(self) -> list[LocalProfile]:
        """Every device user, in profile-alias order."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT p.alias, i.alias, p.feature, p.vector, p.seconds, p.updated "
                "FROM local_profiles p JOIN identities i ON i.id = p.identity_id ORDER BY p.alias"
            ).fetchall()
        return [
            LocalProfile(alias, identity, Observation(feature, blob_vector(blob), seconds), upd)
            for alias, identity, feature, blob, seconds, upd in rows
        ]

    def remove_local_profile(self, profile_alias: str) -> None:
        """Forget a device user (the identity and its templates stay); unknown → StoreError."""
        with self._transaction() as conn:
            cursor = conn.execute("DELETE FROM local_profiles WHERE alias = ?", (profile_alias,))
            if cursor.rowcount == 0:
                raise StoreError(f"{self.path}: no local profile {profile_alias!r}")
