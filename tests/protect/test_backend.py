"""The semi-informed attacker's back-end: LDA learned on speech distorted alike recovers who
speaks where plain cosine does not; mapped vectors are unit rows; it survives its file; the
shipped one was trained on train speakers only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.errors import InputError
from monitor.evaluate.semi_informed import choose_dimension, pair_eer
from monitor.protect.backend import Backend, fit_lda, shipped_backend

CORPUS = Path(__file__).resolve().parents[3] / "shared/data/speechocean762"


def _distorted(rng: np.random.Generator, speakers: int, per: int) -> tuple[np.ndarray, list[str]]:
    """Unit embeddings whose speaker lives in the last 24 of 48 dimensions and a loud
    nuisance (what an anonymiser adds) in the first 24."""
    centres = rng.normal(size=(speakers, 24))
    rows, labels = [], []
    for i in range(speakers):
        nuisance = rng.normal(scale=3.0, size=(per, 24))
        voice = centres[i] + rng.normal(scale=0.5, size=(per, 24))
        rows.append(np.hstack([nuisance, voice]))
        labels += [f"s{i}"] * per
    x = np.concatenate(rows)
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels


def test_lda_learned_on_distorted_speech_recovers_the_speakers() -> None:
    rng = np.random.default_rng(7)
    train, train_labels = _distorted(rng, 40, 8)
    test, test_labels = _distorted(rng, 20, 8)  # other speakers, same distortion
    backend = fit_lda(train, train_labels, 16)
    plain = pair_eer(test, test_labels)
    learned = pair_eer(backend.apply(test), test_labels)
    assert plain > 0.2 and learned < 0.5 * plain
    mapped = backend.apply(test)
    np.testing.assert_allclose(np.linalg.norm(mapped, axis=1), 1.0, rtol=1e-12)
    assert not backend.apply(np.zeros((1, 48))).any()  # no evidence stays none
    dimension, figures = choose_dimension(train, train_labels)
    assert dimension == min(figures, key=figures.__getitem__) and max(figures) == 19
    with pytest.raises(ValueError, match="LDA dimension"):
        fit_lda(train, train_labels, 40)


def test_the_backend_survives_its_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x, labels = _distorted(rng, 10, 4)
    backend = fit_lda(x, labels, 5, facts={"alpha": "U[0.5, 0.9]"})
    backend.save(tmp_path / "b.npz")
    loaded = Backend.load(tmp_path / "b.npz")
    assert loaded.facts == {"alpha": "U[0.5, 0.9]", "dimension": 5}
    np.testing.assert_allclose(loaded.apply(x), backend.apply(x), rtol=1e-5, atol=1e-6)
    (tmp_path / "bad.npz").write_bytes(b"not numpy")
    with pytest.raises(InputError, match=r"bad\.npz"):
        Backend.load(tmp_path / "bad.npz")


@pytest.mark.parametrize("network", ["ecapa-int8", "campplus-int8"])
def test_the_shipped_backend_learned_from_train_speakers_only(network: str) -> None:
    backend = shipped_backend(network)
    assert backend is not None and backend.projection.shape[0] == 192
    assert backend.facts["embedding"] == network
    assert backend.facts["alpha"] == "U[0.5, 0.9]" and backend.facts["method"] == "mcadams"
    if not (CORPUS / "speakers.tsv").is_file():
        pytest.skip("corpus absent")
    rows = [r.split("\t") for r in (CORPUS / "speakers.tsv").read_text().splitlines()[1:]]
    train = {r[0] for r in rows if r[-1] == "train"}
    assert set(backend.facts["speakers"]) == train  # type: ignore[call-overload]
