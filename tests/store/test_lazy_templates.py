"""``enroll --protect mcadams``: beside each embedding template, the template of the same files
anonymised (lazy-informed), recorded with its model; the clean templates unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from monitor.store.database import open_store

CORPUS = Path(__file__).resolve().parents[3] / "shared/data/speechocean762"

pytestmark = [pytest.mark.corpus, pytest.mark.slow]


def _mini_corpus(root: Path) -> None:
    root.mkdir()
    for speaker in ("0003", "0024", "0044"):
        (root / speaker).mkdir()
        for path in sorted((CORPUS / speaker).glob("*.flac"))[:3]:
            (root / speaker / path.name).symlink_to(path)


def test_enroll_protect_stores_lazy_templates(tmp_path: Path) -> None:
    if not CORPUS.is_dir():
        pytest.skip("corpus absent")
    root = tmp_path / "corpus"
    _mini_corpus(root)
    clean_db, lazy_db = tmp_path / "clean.db", tmp_path / "lazy.db"
    base = ["enroll", str(root), "--features", "embedding", "--no-cache"]
    for db, extra in (
        (clean_db, ["--no-narrow"]),
        (lazy_db, ["--protect", "mcadams", "--protect-alpha", "0.7"]),  # and narrow (default)
    ):
        result = CliRunner().invoke(app, [*base, "--db", str(db), *extra])
        assert result.exit_code == 0, result.output
    with open_store(clean_db) as clean, open_store(lazy_db) as lazy:
        assert set(clean.template_counts()) == {"embedding"}
        assert lazy.template_counts() == {
            "embedding": 3, "embedding+mcadams": 3, "embedding+narrow": 3
        }  # fmt: skip
        assert "+mcadams(0.7)" in lazy.template_model("embedding+mcadams")
        assert lazy.template_model("embedding+narrow").endswith("+narrow")
        aliases, batch = lazy.template_batch("embedding")
        clean_aliases, clean_batch = clean.template_batch("embedding")
        assert aliases == clean_aliases
        np.testing.assert_array_equal(batch.matrix, clean_batch.matrix)
        lazy_aliases, lazy_batch = lazy.template_batch("embedding+mcadams")
        assert lazy_aliases == aliases
        cosines = np.sum(lazy_batch.matrix * batch.matrix, axis=1)
        assert np.all(cosines < 0.99)  # the anonymised audio's voice is another
        assert np.all(np.abs(np.linalg.norm(lazy_batch.matrix, axis=1) - 1) < 1e-6)


def test_enroll_protect_bad_options_are_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["enroll", str(tmp_path), "--db", str(tmp_path / "x.db"), "--protect", "rot13"]
    )
    assert result.exit_code == 2 and "--protect: unknown protection method 'rot13'" in result.output
    assert not (tmp_path / "x.db").exists()


def test_re_enrolling_without_narrow_copies_drops_them(tmp_path: Path) -> None:
    """The narrow-band copies are an identity's templates like the others: a re-enrolment
    replaces all of them (``--no-narrow``: none left), so a copy never outlives its template;
    and the clean templates do not depend on whether copies are made."""
    if not CORPUS.is_dir():
        pytest.skip("corpus absent")
    root = tmp_path / "corpus"
    _mini_corpus(root)
    db = tmp_path / "v.db"
    base = ["enroll", str(root), "--features", "embedding", "--no-cache", "--db", str(db)]
    assert CliRunner().invoke(app, base).exit_code == 0
    with open_store(db) as store:
        assert store.template_counts() == {"embedding": 3, "embedding+narrow": 3}
        _, before = store.template_batch("embedding")
        narrow = store.template("0003", "embedding+narrow")
        assert narrow.seconds > 0 and narrow.feature == "embedding+narrow"
    assert CliRunner().invoke(app, [*base, "--no-narrow"]).exit_code == 0
    with open_store(db) as store:
        assert store.template_counts() == {"embedding": 3}
        _, after = store.template_batch("embedding")
    np.testing.assert_array_equal(before.matrix, after.matrix)
