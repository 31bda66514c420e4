"""What sources learnt of their rooms, kept across restarts: read back for the model that made
them, replaced as a whole, refused when not finite; a version-4 database gains the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.store import SourceRoom, Store, open_store
from monitor.store.database import connect, migrate


def test_rooms_survive_a_reopen_for_their_model(db_path: Path) -> None:
    kitchen = SourceRoom("kitchen", np.array([0.5, -0.25, 0.125]), 42.0)
    only = SourceRoom("", np.array([1.0, 0.0, 0.0]), 3.0)  # the daemon's only source
    with open_store(db_path) as store:
        store.save_rooms([kitchen, only], "campplus-int8-1")
    with open_store(db_path) as store:
        back = store.rooms("campplus-int8-1")
        assert [r.source for r in back] == ["kitchen", ""]
        np.testing.assert_array_equal(back[0].residuals, kitchen.residuals)
        assert back[0].seconds == 42.0
        assert store.rooms("ecapa-1") == []  # another model's rooms are not this one's


def test_saving_replaces_every_room(store: Store) -> None:
    store.save_rooms([SourceRoom("kitchen", np.ones(2), 3.0)], "m")
    store.save_rooms([SourceRoom("hall", np.ones(2), 6.0)], "m")
    assert [r.source for r in store.rooms("m")] == ["hall"]


def test_rooms_that_are_not_finite_are_refused_whole(store: Store) -> None:
    store.save_rooms([SourceRoom("kitchen", np.ones(2), 3.0)], "m")
    with pytest.raises(ValueError, match=r"'hall'.*NaN"):
        store.save_rooms(
            [SourceRoom("kitchen", np.ones(2), 6.0), SourceRoom("hall", np.array([np.nan]), 1.0)],
            "m",
        )
    with pytest.raises(ValueError, match=r"'hall'.*seconds"):
        store.save_rooms([SourceRoom("hall", np.ones(2), -1.0)], "m")
    (kept,) = store.rooms("m")
    assert (kept.source, kept.seconds) == ("kitchen", 3.0)


def test_a_version_four_database_gains_the_rooms(db_path: Path) -> None:
    path, conn = connect(db_path)
    assert migrate(conn, path, target=4) == 4
    conn.close()
    with open_store(db_path) as store:
        assert store.rooms("m") == []
        store.save_rooms([SourceRoom("kitchen", np.ones(2), 3.0)], "m")
        assert len(store.rooms("m")) == 1
