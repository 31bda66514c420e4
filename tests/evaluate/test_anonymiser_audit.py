"""``evaluate --protect``: the four attackers on the same trials, the α option, the WER's text
normalisation; and the command on a few real corpus speakers (anonymised, audited, decoded)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from monitor.calibration.protocol import SpeakerUtterances
from monitor.evaluate.anonymiser_audit import aligned, condition_audits, every_kth
from monitor.evaluate.asr import normalise
from monitor.evaluate.audit import audit_setting
from monitor.evaluate.results import CONDITIONS
from monitor.evaluate.semi_informed import labelled
from monitor.protect.backend import fit_lda
from monitor.protect.mcadams import Alpha, parse_alpha
from tests.calibration.synthetic import synthetic_speakers

CORPUS = Path(__file__).resolve().parents[3] / "shared/data/speechocean762"


def _scrambled(speakers: list[SpeakerUtterances], rng: np.random.Generator, keep: float):
    """A 'protected' version: each embedding pulled towards noise, one utterance lost."""
    out = []
    for s in speakers:
        e = keep * s.values["embedding"] + rng.normal(size=s.values["embedding"].shape)
        out.append(
            SpeakerUtterances(
                s.alias,
                s.utterances[1:],
                s.speech_seconds[1:] * 0.5,  # anonymised speech found shorter by the VAD
                {"embedding": e[1:]},
                {"embedding": s.weights["embedding"][1:]},
            )
        )
    return out


def test_three_attackers_score_the_same_trials(rng: np.random.Generator) -> None:
    original = synthetic_speakers(rng, n_speakers=6, n_utterances=8, overlap=0.3)
    protected = _scrambled(original, rng, keep=0.02)
    clean, anonymised = aligned(original, protected)
    assert [s.utterances for s in clean] == [s.utterances for s in anonymised]
    np.testing.assert_array_equal(clean[0].speech_seconds, anonymised[0].speech_seconds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        conditions = condition_audits(
            original,
            protected,
            test_seconds=3.0,
            template_seconds=6.0,
            features=("embedding",),
            audit=audit_setting,
            lid_source="crossfit",
        )
        direct = audit_setting(
            clean, test_seconds=3.0, template_seconds=6.0, features=("embedding",),
            lid_source="crossfit", per_speaker=False,
        )  # fmt: skip
    assert list(conditions) == ["original", "ignorant", "lazy-informed"]  # no back-end
    assert len({c.T for c in conditions.values()}) == 1
    o, i = (conditions[k].features["embedding"] for k in ("original", "ignorant"))
    assert o.EER == direct.features["embedding"].EER
    assert o.histogram_stats.MeanD == direct.features["embedding"].histogram_stats.MeanD
    # noise tests against clean templates: near chance
    assert i.EER > 0.3 > o.EER
    assert i.histogram_stats.MeanD < 0.5 * o.histogram_stats.MeanD


def _nuisance(speakers: list[SpeakerUtterances], rng: np.random.Generator):
    """A 'protected' version: a loud nuisance added in half the embedding's dimensions."""
    out = []
    for s in speakers:
        e = np.array(s.values["embedding"], dtype=float)
        e[:, :128] += rng.normal(scale=0.4, size=(e.shape[0], 128))
        out.append(dataclasses.replace(s, values={"embedding": e}))
    return out


def test_the_semi_informed_attacker_learns_the_protection_back(rng: np.random.Generator) -> None:
    """A back-end fitted on other speakers distorted alike scores the lazy-informed trials
    better than plain cosine does."""
    original = synthetic_speakers(rng, n_speakers=8, n_utterances=8, overlap=0.3)
    protected = _nuisance(original, rng)
    train = _nuisance(synthetic_speakers(rng, n_speakers=40, n_utterances=8, overlap=0.3), rng)
    backend = fit_lda(*labelled(train), 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        conditions = condition_audits(
            original, protected, test_seconds=3.0, template_seconds=6.0,
            features=("embedding",), audit=audit_setting, backend=backend, lid_source="crossfit",
        )  # fmt: skip
    assert list(conditions) == list(CONDITIONS)
    lazy, semi = (conditions[k].features["embedding"] for k in ("lazy-informed", "semi-informed"))
    assert conditions["semi-informed"].T == conditions["lazy-informed"].T
    assert semi.EER < lazy.EER


def test_alpha_as_users_write_it() -> None:
    assert parse_alpha("0.8") == Alpha.fixed(0.8)
    assert parse_alpha("0.5, 0.9") == Alpha(0.5, 0.9)
    assert parse_alpha([0.5, 0.9]) == Alpha(0.5, 0.9)
    assert parse_alpha(1) == Alpha.fixed(1.0)
    for bad in ("0", "1.5", "0.9,0.5", "a", "0.1,0.2,0.3", True, None, []):
        with pytest.raises(ValueError, match="expected a number in"):
            parse_alpha(bad)


def test_wer_text_and_spread() -> None:
    assert normalise("WE CALL IT BEAR.") == "we call it bear"
    assert normalise("  it's   5-3 ") == "it's"
    picks = every_kth([Path(str(i)) for i in range(10)], 3)
    assert [p.name for p in picks] == ["0", "4", "9"]
    assert every_kth([], 3) == [] and every_kth([Path("a")], 0) == []


@pytest.mark.corpus
@pytest.mark.slow
def test_evaluate_protect_on_real_speakers(tmp_path: Path) -> None:
    """Four test-split speakers, six utterances each: anonymised, audited, two decoded."""
    if not (CORPUS / "utterances.tsv").is_file():
        pytest.skip("corpus absent")
    from typer.testing import CliRunner

    from monitor.cli import app

    root = tmp_path / "corpus"
    root.mkdir()
    rows = (CORPUS / "speakers.tsv").read_text().splitlines()
    chosen = [r for r in rows[1:] if r.endswith("\ttest")][:4]
    (root / "speakers.tsv").write_text("\n".join([rows[0], *chosen]) + "\n")
    shutil.copyfile(CORPUS / "utterances.tsv", root / "utterances.tsv")
    for row in chosen:
        speaker = row.split("\t")[0]
        (root / speaker).mkdir()
        for path in sorted((CORPUS / speaker).glob("*.flac"))[:6]:
            (root / speaker / path.name).symlink_to(path)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "evaluate", str(root), "--out", str(out), "--split", "test", "--features",
            "embedding", "--test-seconds", "3", "--template-seconds", "6", "--no-cache",
            "--protect", "mcadams", "--protect-alpha", "0.5,0.9", "--wer-utterances", "2",
            "--embedding", "ecapa-int8",  # the network of the shipped back-end the test reads
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "protection (mcadams, α U[0.5, 0.9]): original EER" in result.output
    report = json.loads((out / "report.json").read_text())
    protection = report["protection"]
    assert list(protection["conditions"]) == list(CONDITIONS)  # the shipped back-end's α
    assert protection["attacker"]["alpha"] == "U[0.5, 0.9]"
    assert protection["wer"]["utterances"] == 2 and protection["wer"]["words"] > 0
    commands = protection["commands"]
    assert commands["utterances"] == 2 and commands["prompts"] > 2000
    assert 0 <= commands["after"] <= 1 and 0 <= commands["before"] <= 1
    assert report["protected"]["feature"] == "embedding"
    assert "## Protection (`--protect`)" in (out / "report.md").read_text()


def test_bad_protect_options_are_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from monitor.cli import app

    base = ["evaluate", str(tmp_path), "--out", str(tmp_path / "out"), "--protect"]
    for extra, words in (
        (["rot13"], "--protect: unknown protection method 'rot13'"),
        (["mcadams", "--protect-alpha", "1.2"], "--protect-alpha '1.2': expected"),
    ):
        result = CliRunner().invoke(app, base + extra)
        assert result.exit_code == 2
        assert words in result.output
