"""The semi-informed attacker's back-end: what an attacker who anonymised a speaker-labelled
training corpus exactly as the protection does (same method, α drawn the same way) learns on
top of an unchanged embedding network.

The VoicePrivacy Challenge ranks anonymisers by this attacker: McAdams hides speakers from
one who does not know of it (*ignorant*) or who only anonymises his enrolment audio
(*lazy-informed*), but a back-end trained on anonymised speech recovers much of who speaks.
Here the back-end is linear discriminant analysis with within-class whitening (LDA + WCCN),
fitted on anonymised embeddings of the training speakers, then length normalisation and
cosine scoring: x ↦ (x − μ)·P / ‖(x − μ)·P‖. It is one (D, k) matrix and a mean, shipped as
package data (``protect/shipped/semi-informed-<embedding backend>.npz``, made by
``scripts/train_semi_informed.py``), so both the offline audit and the live received view
apply the same attacker.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.errors import InputError

SHIPPED_DIR = Path(__file__).parent / "shipped"

FloatArray = npt.NDArray[np.float64]


@dataclasses.dataclass(frozen=True)
class Backend:
    """x ↦ unit((x − mean)·projection): the attacker's learned map of an embedding."""

    mean: FloatArray  # (D,)
    projection: FloatArray  # (D, k)
    facts: dict[str, object]  # how it was trained: embedding, α, speakers, utterances, seed

    def apply(self, vectors: npt.ArrayLike) -> FloatArray:
        """(n, k) unit rows of (n, D) embeddings (a zero row stays zero: no evidence)."""
        x = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
        live = np.linalg.norm(x, axis=1) > 0
        y = (x - self.mean) @ self.projection
        norms = np.linalg.norm(y, axis=1)
        y /= np.where(norms > 0, norms, 1.0)[:, None]
        y[~live] = 0.0
        return y

    def save(self, path: Path) -> None:
        """float32 matrices and the facts as JSON text, in one .npz (~50 kB)."""
        np.savez_compressed(
            path,
            mean=self.mean.astype(np.float32),
            projection=self.projection.astype(np.float32),
            facts=np.array(json.dumps(self.facts, sort_keys=True)),
        )

    @classmethod
    def load(cls, path: Path) -> Backend:
        try:
            with np.load(path, allow_pickle=False) as data:
                mean = data["mean"].astype(np.float64)
                projection = data["projection"].astype(np.float64)
                facts = json.loads(str(data["facts"]))
        except (OSError, KeyError, ValueError) as error:
            raise InputError(str(path), f"not a semi-informed back-end: {error}") from None
        if mean.shape != (projection.shape[0],):
            raise InputError(str(path), f"mean {mean.shape} does not fit {projection.shape}")
        return cls(mean, projection, facts)


def shipped_path(embedding_backend: str) -> Path:
    return SHIPPED_DIR / f"semi-informed-{embedding_backend}.npz"


def shipped_backend(embedding_backend: str) -> Backend | None:
    """The release's back-end for this embedding network; None when none is shipped."""
    path = shipped_path(embedding_backend)
    return Backend.load(path) if path.is_file() else None


def fit_lda(
    vectors: FloatArray,
    labels: Sequence[str],
    dimension: int,
    *,
    facts: dict[str, object] | None = None,
    ridge: float = 1e-3,
) -> Backend:
    """LDA + within-class whitening on ``vectors`` (n, D) labelled by speaker: the ``dimension``
    directions that best separate the speakers relative to their own variation, scaled so that
    the within-class covariance is the identity there. ``ridge`` (× the mean within-class
    variance) keeps the within-class covariance invertible with few utterances per speaker."""
    from scipy.linalg import eigh

    x = np.asarray(vectors, dtype=np.float64)
    names, index = np.unique(np.asarray(labels), return_inverse=True)
    if dimension < 1 or dimension > names.size - 1:
        raise ValueError(f"LDA dimension must lie in 1..{names.size - 1}, got {dimension}")
    mean = x.mean(axis=0)
    counts = np.bincount(index)
    centroids = np.zeros((names.size, x.shape[1]))
    np.add.at(centroids, index, x)
    centroids /= counts[:, None]
    within = x - centroids[index]
    between = (centroids - mean) * np.sqrt(counts)[:, None]
    s_w = within.T @ within / x.shape[0]
    s_b = between.T @ between / x.shape[0]
    s_w += ridge * np.trace(s_w) / s_w.shape[0] * np.eye(s_w.shape[0])
    values, vectors_ = eigh(s_b, s_w)  # ascending; vᵀ S_w v = 1
    projection = vectors_[:, np.argsort(values)[::-1][:dimension]]
    return Backend(mean, projection, dict(facts or {}, dimension=dimension))
