"""``[protect]`` with the relay process (``relay.socket``): the measuring process tells ``voxmeter
relay`` each source's verdict over the channel, the relay anonymises what it sends upstream and
decides each utterance itself, keeping the last verdict while the measuring process is gone.

Fast: the relay's policy (fail-safe) and the measuring side's feed. Real parts: ``voxmeter
relay`` as a process, a real pocketsphinx Wyoming upstream, the measuring side in this process
(its real channel source and protection hooks) or as ``voxmeter run`` (SIGKILLed)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from wyoming.asr import Transcribe

from monitor.daemon.policy_feed import ProtectionObserver, RelayFeed, protection_for
from monitor.events.messages import DaemonStarted, StateChanged
from monitor.protect.mcadams import Alpha, McAdamsStream
from monitor.protect.policy import ProtectionPolicy
from monitor.protect.relay_process import RelayedPolicy
from monitor.settings.config import load_config
from monitor.vocabulary import PROTECT_KEY
from monitor.wyoming.channel import Uplink
from monitor.wyoming.proxy import WyomingProxySource
from monitor.wyoming.relay import parse_proxy
from tests.daemon_corpus import DaemonCorpus
from tests.realparts import stop_process
from tests.realparts.mosquitto import free_port, wait_for_port
from tests.realparts.wyoming_upstreams import upstream_audio
from tests.wyoming.wyoming_peers import conversation, talk

REPO = Path(__file__).resolve().parents[2]
COMMAND = "turn on the kitchen light"
KITCHEN = "wyoming-proxy://127.0.0.1:10301?upstream=tcp://127.0.0.1:10300"


def _state(track: str, before: str, after: str, reason: str = "window") -> StateChanged:
    return StateChanged(track, before, after, 6.0, 5.0, 1, reason, 0.0, 0.0)  # type: ignore[arg-type]


def _started(states: dict[str, str] | None = None) -> DaemonStarted:
    return DaemonStarted("dev", "0", 0.0, {}, 3.0, 0.0, states or {}, 5.0)


# ---- fast: the relay's policy and the measuring side's feed ---------------------------------


def test_the_relay_keeps_the_last_verdict_and_protects_a_source_it_was_never_told_of() -> None:
    policy = RelayedPolicy("exceeded", Alpha(0.5, 0.9), random.Random(1))
    other = KITCHEN.replace("10301", "10401")
    first = policy.decide(KITCHEN)  # never told since the relay started: fail safe
    assert first.alpha is not None and 0.5 <= first.alpha <= 0.9
    policy.told(KITCHEN, {"kind": "protect", "protect": False, "speaker": None, "alpha": "0.8"})
    assert policy.decide(KITCHEN).alpha is None
    assert policy.decide(other).alpha is not None  # still never told of this one
    policy.told(KITCHEN, {"kind": "protect", "protect": True, "speaker": "s1", "alpha": "0.7"})
    for _ in range(3):  # nothing more heard (the measuring process is gone): it stands
        decision = policy.decide(KITCHEN)
        assert (decision.alpha, decision.speaker) == (0.7, "s1")  # the measuring side's α
    with pytest.raises(ValueError, match="protect must be"):
        policy.told(KITCHEN, {"kind": "protect", "protect": "yes"})
    assert policy.decide(KITCHEN).alpha == 0.7  # a malformed message changes nothing


def test_the_feed_tells_each_source_once_budgets_are_restored_and_on_every_change() -> None:
    """Mirrors the in-process exceeded test (tests/protect/test_policy_relay.py) at the feed:
    nothing before ``DaemonStarted``; a source's verdict on when its last speaker crosses the
    budget, off at the period's reset and with the switch; each change told once."""
    policy = ProtectionPolicy("exceeded", Alpha(0.5, 0.9), random.Random(3))
    changes: list[tuple[bool, str | None]] = []
    policy.on_change = lambda on, who: changes.append((on, who))
    told: list[tuple[str, bool]] = []

    class Told(Uplink):  # no relay connected: what would be sent is noted
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def publish(self, header: dict[str, object]) -> None:
            told.append((self.name, bool(header["protect"])))
            super().publish(header)

    kitchen, hall = Told("kitchen"), Told("hall")
    feed = RelayFeed(policy, "0.5,0.9", {"kitchen": kitchen, "hall": hall})
    policy.on_update = feed.push
    observer = ProtectionObserver(policy, feed)

    async def feed_events(*events: object) -> None:
        for event in events:
            await observer.handle(event)  # type: ignore[arg-type]

    policy.heard("alice", "kitchen")  # before the start: budgets not restored yet
    assert told == []
    asyncio.run(feed_events(_started({"bob": "exceeded"})))
    assert told == [("kitchen", False), ("hall", True)]  # hall: nobody heard there, bob is over
    assert hall.latest["protect"]["speaker"] == "bob"
    asyncio.run(feed_events(_state("alice", "warning", "exceeded")))
    assert told[2:] == [("kitchen", True), ("hall", True)]  # hall: now alice's, the first over
    assert hall.latest["protect"]["speaker"] == "alice"
    policy.heard("alice", "kitchen")  # nothing changed: nothing told
    assert len(told) == 4
    policy.switch(False)  # the Home Assistant switch
    assert told[4:] == [("kitchen", False), ("hall", False)]
    assert kitchen.latest["protect"]["enabled"] is False
    policy.switch(True)
    assert told[6:] == [("kitchen", True), ("hall", True)]
    asyncio.run(feed_events(_state("alice", "exceeded", "ok", "period")))
    assert told[8:] == [("kitchen", False), ("hall", True)]  # hall: bob's again
    asyncio.run(feed_events(_state("bob", "exceeded", "ok", "period")))
    assert told[10:] == [("hall", False)]
    assert changes == [(True, "bob"), (False, None), (True, "alice"), (False, None)]


# ---- real parts ---------------------------------------------------------------------------


def anonymised(audio: np.ndarray, alpha: float) -> bytes:
    """What the relay sends for ``audio`` at ``alpha`` (McAdams is deterministic given α)."""
    stream = McAdamsStream(16000, alpha)
    x = audio.astype(np.float64)
    out = np.concatenate([stream.process(x), stream.flush()])
    return np.clip(np.rint(out), -32768, 32767).astype("<i2").tobytes()


@dataclass
class RelayRun:
    port: int
    socket: Path
    log: Path
    process: subprocess.Popen[bytes]

    def said(self, text: str) -> int:
        return self.log.read_text(errors="replace").count(text)


@contextlib.asynccontextmanager
async def relay_process(upstream_port: int, *settings: str) -> AsyncIterator[RelayRun]:
    """``voxmeter relay`` serving a proxy to ``upstream_port`` (``settings``: more ``--set``)."""
    folder = Path(tempfile.mkdtemp(prefix="vxprot-"))  # a Unix socket's path is short
    port = free_port()
    base = [
        f"daemon.source=wyoming-proxy://127.0.0.1:{port}?upstream=tcp://127.0.0.1:{upstream_port}",
        f"relay.socket={folder / 'relay.sock'}",
        "wyoming.zeroconf=false",
        *settings,
    ]
    log = folder / "relay.log"
    arguments = [a for setting in base for a in ("--set", setting)]
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "monitor.cli", "relay", *arguments],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    try:
        await asyncio.to_thread(wait_for_port, port, timeout_seconds=60)
        yield RelayRun(port, folder / "relay.sock", log, process)
    finally:
        stop_process(process)
        shutil.rmtree(folder, ignore_errors=True)


async def until(condition: object, what: str, seconds: float = 60.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.05)


@pytest.mark.slow
def test_exceeded_mode_over_the_relay_process_switches_on_and_off_with_the_budget() -> None:
    """REQUIRED (with ``relay.socket``): the in-process exceeded test through the real
    relay process, its channel and a real pocketsphinx upstream. Clear before the crossing (the
    upstream gets the original bytes); after it the upstream gets the anonymised audio, exactly
    the McAdams output at the α the measuring side read from the tapped ``audio-start``
    (``voxmeter_protect``), and a transcript still comes back; clear again after the period's
    reset."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (scripts/install-system.sh installs it)")
    from tests.realparts.wyoming_upstreams import serve, speech

    audio = speech(COMMAND)
    original = audio.astype("<i2").tobytes()
    events = conversation(audio, Transcribe(language="en").event())

    async def scenario() -> None:
        records: list[bytearray] = []
        server, upstream_port = await serve("asr", records=records)
        try:
            async with relay_process(upstream_port, "protect.mode=exceeded") as relay:
                spec = f"wyoming-proxy://127.0.0.1:{relay.port}?upstream=tcp://127.0.0.1:{upstream_port}"
                config = load_config(
                    None,
                    [f"daemon.source={spec}", f"relay.socket={relay.socket}",
                     "protect.mode=exceeded", "protect.alpha=0.5,0.9"],
                )  # fmt: skip
                source = WyomingProxySource(parse_proxy(spec), channel=relay.socket)
                (observer,) = protection_for(config, source, [], "dev")
                assert isinstance(observer, ProtectionObserver)
                async with source.subscribed(relay.socket):
                    await until(lambda: source.relay_connected, "subscribed")
                    await observer.handle(_started())
                    await until(lambda: relay.said("passing it clear"), "told: clear")

                    async def command() -> tuple[str, bytes, dict[str, object] | None]:
                        (reply,) = await talk(relay.port, events)
                        start = None
                        await until(lambda: not source.tap.queue.empty(), "tapped")
                        while True:
                            item = await asyncio.wait_for(source.tap.queue.get(), 30)
                            assert item is not None
                            if item.event is None:
                                break  # the connection's end: everything before it is here
                            if item.event.type == "audio-start":
                                start = item.event.data.get(PROTECT_KEY)
                        got = await upstream_audio([r for r in records if r][-1])
                        return str(reply.data.get("text")), got, start

                    text, got, key = await command()
                    assert (got, key) == (original, None)  # clear, and the tap says so
                    assert text.strip()
                    observer.policy.heard("alice")
                    await observer.handle(_state("alice", "warning", "exceeded"))
                    await until(lambda: relay.said("anonymising its utterances"), "told: protect")
                    for _ in range(2):
                        text, got, key = await command()
                        assert key is not None and key["method"] == "mcadams"
                        alpha = float(key["alpha"])  # type: ignore[arg-type]
                        assert 0.5 <= alpha <= 0.9
                        assert got == anonymised(audio, alpha) != original
                        print(f"protected (α {alpha:.3f}) transcript: {text!r}")
                    assert observer.policy.protecting  # the switch's binary sensor: on
                    await observer.handle(_state("alice", "exceeded", "ok", "period"))
                    await until(lambda: relay.said("passing it clear") == 2, "told: clear again")
                    text, got, key = await command()
                    assert (got, key) == (original, None)
                    assert not observer.policy.protecting
        finally:
            await server.stop()

    asyncio.run(scenario())


@pytest.mark.slow
@pytest.mark.corpus
def test_the_relay_keeps_protecting_when_the_measuring_process_is_sigkilled(
    daemon_corpus: DaemonCorpus, daemon_db: Path, tmp_path: Path
) -> None:
    """``voxmeter relay`` and ``voxmeter run`` as their units start them, ``exceeded`` mode, a
    budget of 1 bit: commands of the enrolled speaker pass clear until the budget is crossed,
    then anonymised; the measuring process is SIGKILLed and the relay keeps protecting every
    command (the last verdict stands: module docstring of monitor/protect/relay_process.py),
    each still transcribed by the real upstream; started again, the measuring process restores
    the exceeded budget from the ledger and the relay goes on protecting."""
    from tests.realparts.wyoming_upstreams import serve
    from tests.relay.relay_drill import SUBSCRIBED, _Processes
    from tests.relay.test_relay_drill import commands

    pcm = commands(daemon_corpus)
    protected = [anonymised(c, 0.8) for c in pcm]

    async def scenario() -> list[str]:
        records: list[bytearray] = []
        server, upstream_port = await serve("asr", records=records)
        short = Path(tempfile.mkdtemp(prefix="vxprot-"))
        port = free_port()
        config = tmp_path / "config.toml"
        config.write_text(
            f'[daemon]\nsource = "wyoming-proxy://127.0.0.1:{port}?upstream=tcp://127.0.0.1:'
            f'{upstream_port}"\ndb = "{daemon_db}"\ndevice_id = "protect"\n'
            f'[relay]\nsocket = "{short / "relay.sock"}"\n'
            "[wyoming]\nzeroconf = false\n[prometheus]\nenabled = false\n"
            "[mqtt]\nenabled = false\n[budget]\nbits = 1.0\nwarn_fraction = 0.5\n"
            '[protect]\nmode = "exceeded"\nalpha = "0.8"\n'
        )
        processes = _Processes(tmp_path, config)
        log = processes.relay_log
        sent: list[str] = []  # per command: "clear", "protected" (or "other": a failure)
        texts: list[str] = []

        async def command(number: int) -> None:
            events = conversation(pcm[number], Transcribe(language="en").event())
            (reply,) = await talk(port, events)
            assert reply.type == "transcript", reply  # the assistant's answer, every time
            texts.append(str(reply.data.get("text")))
            got = await upstream_audio([r for r in records if r][-1])
            original = pcm[number].astype("<i2").tobytes()
            sent.append(
                "clear" if got == original else "protected" if got == protected[number] else "other"
            )
            await asyncio.sleep(pcm[number].shape[0] / 16000)  # paced as spoken

        try:
            processes.start_relay()
            await asyncio.to_thread(wait_for_port, port, timeout_seconds=60)
            processes.start_measuring()
            await until(lambda: processes.subscriptions() >= 1, "subscribed", 240)
            await until(lambda: "passing it clear" in log.read_text(), "told: clear", 240)
            number = 0
            while "anonymising its utterances" not in log.read_text():
                assert number < len(pcm) - 6, "the budget of 1 bit was never crossed"
                await command(number)
                number += 1
            crossed = len(sent)
            await command(number)  # the verdict arrived: protected
            assert processes.measuring is not None
            processes.measuring.kill()  # SIGKILL
            processes.measuring.wait()
            await until(lambda: "measuring process left" in log.read_text(), "left")
            for k in range(1, 4):  # nobody measures now: the relay keeps protecting
                await command(number + k)
            processes.start_measuring()
            await until(lambda: processes.subscriptions() >= 2, "subscribed again", 240)
            told = log.read_text().count("protection of")
            await command(number + 4)  # before or after the new process spoke: protected
            await until(lambda: log.read_text().count(SUBSCRIBED) >= 2, "subscribed")
            print(f"commands: {sent}; crossed after {crossed}; transcripts {texts}; {told}")
        finally:
            processes.stop()
            await server.stop()
            shutil.rmtree(short, ignore_errors=True)
        assert sent[:crossed] == ["clear"] * crossed  # within budget: the original bytes
        assert sent[crossed:] == ["protected"] * 5, sent  # before, during and after the kill
        assert "protection of" in processes.relay_log.read_text()
        return texts

    texts = asyncio.run(scenario())
    assert sum(bool(t.strip()) for t in texts) >= len(texts) // 2  # real words came back
