"""Budget state and the alert outbox: one transaction per transition, delivery in order."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from monitor.errors import StoreError
from monitor.store import Store, open_store


def test_transition_writes_state_and_alert(store: Store) -> None:
    assert store.budget_state("spk1") is None
    store.update_budget("spk1", "ok", 1.0)
    seq = store.transition("spk1", "warning", 8.5, {"from": "ok", "to": "warning"}, "vm/alerts")
    state = store.budget_state("spk1")
    assert state is not None and (state.state, state.bits) == ("warning", 8.5)
    (message,) = store.pending()
    assert (message.seq, message.topic) == (seq, "vm/alerts")
    assert message.payload == {"from": "ok", "to": "warning"}
    assert store.pending_count() == 1
    store.update_budget("spk1", "warning", 9.0)  # no transition: no alert
    assert store.pending_count() == 1 and store.budget_states()["spk1"].bits == 9.0


def test_transition_is_atomic(store: Store) -> None:
    store.update_budget("spk1", "ok", 1.0)
    with pytest.raises(ValueError, match="not storable as JSON"):
        store.transition("spk1", "exceeded", 20.0, {"bits": float("nan")}, "vm/alerts")
    with pytest.raises(ValueError, match="budget state 'panic'"):
        store.transition("spk1", "panic", 20.0, {}, "vm/alerts")
    # A failure after the state row is written (the outbox insert aborts, as a full disk
    # would): the state change is rolled back with it.
    store._conn.execute(
        "CREATE TEMP TRIGGER outbox_full BEFORE INSERT ON outbox "
        "BEGIN SELECT RAISE(ABORT, 'outbox full'); END"
    )
    with pytest.raises(ValueError, match="outbox full"):
        store.transition("spk1", "exceeded", 20.0, {"to": "exceeded"}, "vm/alerts")
    store._conn.execute("DROP TRIGGER outbox_full")
    state = store.budget_state("spk1")
    assert state is not None and state.state == "ok" and store.pending_count() == 0


def test_outbox_order_ack_and_survival(db_path: Path) -> None:
    with open_store(db_path) as store:
        seqs = [
            store.transition(f"spk{i % 3}", ("ok", "warning", "exceeded")[i % 3], i, {"n": i}, "t")
            for i in range(10)
        ]
        assert seqs == sorted(seqs) and len(set(seqs)) == 10
        assert [m.payload["n"] for m in store.pending(limit=4)] == [0, 1, 2, 3]
        assert store.ack(seqs[0]) is True and store.ack(seqs[0]) is False  # duplicate ack
        assert store.ack(seqs[2]) is True
    with open_store(db_path) as store:  # unacknowledged alerts survive a restart, in order
        assert [m.payload["n"] for m in store.pending()] == [1, 3, 4, 5, 6, 7, 8, 9]
        assert store.pending_count() == 8
        for message in store.pending():
            store.ack(message.seq)
        new = store.transition("spk0", "ok", 0.0, {"n": 10}, "t")
        assert new > seqs[-1]  # AUTOINCREMENT: a seq is never reused after deletes
    with pytest.raises(ValueError, match="limit"):
        open_store(db_path).pending(0)


def test_threads_share_one_store(store: Store) -> None:
    """The daemon calls the store from executor threads: writes serialise, none is lost."""
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(25):
                store.transition(f"spk{k}", "warning", float(i), {"k": k, "i": i}, "t")
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert store.pending_count() == 100
    for k in range(4):
        assert [m.payload["i"] for m in store.pending(200) if m.payload["k"] == k] == list(
            range(25)
        )


def test_ack_on_closed_store_is_a_store_error(db_path: Path) -> None:
    store = open_store(db_path)
    store.close()
    with pytest.raises(StoreError, match=r"voxmeter\.db: database error"):
        store.pending_count()
