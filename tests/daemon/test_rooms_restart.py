"""What a source learnt of its room survives a restart: the daemon keeps it in the store when
the input ends, and the next daemon on the same database starts from it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.daemon.build import build_pipeline
from monitor.settings.config import load_config
from monitor.store.database import open_store
from tests.daemon.test_pipeline import run_file
from tests.daemon_corpus import DaemonCorpus

pytestmark = pytest.mark.corpus
ON = "tracker.domain_weight=0.5"  # off by default


def test_a_restart_starts_from_the_room_the_source_learnt(
    daemon_corpus: DaemonCorpus, daemon_db: Path
) -> None:
    run_file(daemon_db, daemon_corpus.known_stream, ON)
    config = load_config(None, [f"daemon.db={daemon_db}", "prometheus.enabled=false", ON])
    with open_store(daemon_db) as store:
        pipeline = build_pipeline(config, store=store, exporters=[])
        model = pipeline.features["embedding"].version
        (room,) = store.rooms(model)  # the daemon's only source, the file
        assert room.seconds > 0.0
        assert store.rooms("another-model") == []
        assert pipeline.tracker.domains.offset(room.source) is None  # not before the restore
        pipeline.restore()
        offset = pipeline.tracker.domains.offset(room.source)
        assert offset is not None and float(np.linalg.norm(offset)) > 0.0
        # the offset is the learnt mean residual at its share: what the last run subtracted
        settings = config.tracker
        share = settings.domain_weight * room.seconds / (room.seconds + settings.domain_seconds)
        np.testing.assert_allclose(offset, share * room.residuals / room.seconds, rtol=1e-9)
    off = load_config(
        None, [f"daemon.db={daemon_db}", "prometheus.enabled=false", "tracker.domain_weight=0"]
    )
    with open_store(daemon_db) as store:
        pipeline = build_pipeline(off, store=store, exporters=[])
        pipeline.restore()
        heard = np.eye(offset.shape[0])[0]
        np.testing.assert_array_equal(pipeline.tracker.domains.correct(room.source, heard), heard)
