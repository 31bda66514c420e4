"""The SIGKILL drill: 20 speech-to-text commands of corpus audio through ``voxmeter
relay`` to a real pocketsphinx Wyoming upstream while ``voxmeter run`` (the measuring process) is
SIGKILLed twice and started again, as systemd does, and the relay itself is SIGKILLed once and
started again (tests/relay/relay_drill.py). Every transcript is the one the upstream gives
directly, every byte the upstream receives is the byte it receives directly, the measuring side
scores again after each restart, the ledger is intact (every window committed before a kill is
still there) and every alert the ledger queued reaches a real MQTT subscriber. The recovery
times are printed (``-s``) and recorded by ``python -m bench relay``, not asserted here."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import numpy as np
import pytest

from monitor.audio.file import read_audio
from tests.daemon_corpus import DaemonCorpus
from tests.relay.relay_drill import run_drill

pytestmark = [pytest.mark.slow, pytest.mark.corpus, pytest.mark.mosquitto]

COMMANDS = 20
COMMAND_SECONDS = 2.4


def commands(corpus: DaemonCorpus) -> list[np.ndarray]:
    """``COMMANDS`` commands of 2.4 s cut from the enrolled speaker's held-out speech."""
    audio, _ = read_audio(corpus.known_stream)
    pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16)
    step, size = round(2.7 * 16000), round(COMMAND_SECONDS * 16000)
    starts = [(i * step) % (pcm.shape[0] - size) for i in range(COMMANDS)]
    return [pcm[s : s + size] for s in starts]


def test_the_relay_survives_two_sigkills_of_the_measuring_process(
    daemon_corpus: DaemonCorpus, daemon_db: Path, tmp_path: Path
) -> None:
    for tool in ("mosquitto", "mosquitto_sub"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install mosquitto mosquitto-clients)")
    drill = asyncio.run(run_drill(tmp_path, daemon_db, commands(daemon_corpus)))
    print(
        f"drill: back (scoring) {[round(s, 1) for s in drill.back_seconds]} s after each kill, "
        f"subscribed {[round(s, 1) for s in drill.subscribed_seconds]} s, its CPU until "
        f"then {[round(s, 2) for s in drill.back_cpu_seconds]} s; relay listening "
        f"{drill.relay_listening_seconds:.2f} s after its kill; relay RSS "
        f"{drill.relay_rss_kib / 1024:.1f} MB; {drill.windows_final} windows, "
        f"{len(drill.alert_seqs)} alerts"
    )
    assert len(drill.proxied) == COMMANDS
    assert drill.proxied == drill.direct  # 20/20 transcripts, the upstream's own
    assert sum(bool(t.strip()) for t in drill.direct) >= COMMANDS // 2  # real words came back
    assert drill.proxied_bytes == drill.direct_bytes  # every event byte-identical
    assert len(drill.back_seconds) == len(drill.subscribed_seconds) == 2  # back each time
    assert drill.relay_resubscribed_seconds > 0  # the relay came back and was subscribed to
    # nothing committed was lost (a window may commit between the count and the kill)
    assert all(a >= b for a, b in zip(drill.windows_after_kill, drill.windows_at_kill, strict=True))
    assert drill.windows_final > drill.windows_after_kill[-1]
    assert drill.integrity == "ok"
    assert drill.alert_seqs, "the drill raises alerts (budget.bits = 1)"
    assert set(drill.alert_seqs) <= set(drill.alerts_received)  # no alert lost
    assert drill.outbox_left == 0
    assert drill.relay_rss_kib > 0
