"""``[protect]``: the config's checks, the policy of each mode (``exceeded`` on after the budget
is crossed, off at the next period), and the relay transform on real Wyoming events."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from monitor.daemon.policy_feed import ProtectionObserver
from monitor.errors import ConfigError
from monitor.events.messages import DaemonStarted, StateChanged
from monitor.protect.mcadams import Alpha, McAdamsStream
from monitor.protect.policy import ProtectionPolicy
from monitor.protect.relay import UpstreamAnonymiser
from monitor.settings.config import load_config
from monitor.wyoming.wire import encode_event, read_event
from tests.protect.test_mcadams import voiced

PROXY = "wyoming-proxy://127.0.0.1:0?upstream=tcp://127.0.0.1:10300"


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("protect.alpha='1.2'", "protect.alpha", "expected a number in (0, 1]"),
        ("protect.alpha='0'", "protect.alpha", "expected a number in (0, 1]"),
        ("protect.method='voicemod'", "protect.method", "must be one of mcadams"),
        ("protect.mode='sometimes'", "protect.mode", "must be one of off, exceeded, always"),
    ],
)
def test_bad_protect_values_name_the_key(override: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"daemon.source='{PROXY}'", "protect.mode='always'", override])
    assert caught.value.key == key and words in str(caught.value)


def test_protection_needs_a_relaying_source() -> None:
    for source in ("mic", "file:/tmp/x.wav", "wyoming-listen://127.0.0.1:10700"):
        with pytest.raises(ConfigError) as caught:
            load_config(None, [f"daemon.source='{source}'", "protect.mode='exceeded'"])
        assert caught.value.key == "protect.mode" and "relays" in str(caught.value)
    config = load_config(None, [f"daemon.source='{PROXY}'", "protect.mode='exceeded'"])
    assert config.protect.mode == "exceeded" and config.protect.alpha == "0.5,0.9"
    assert load_config(None, ["daemon.source='mic'"]).protect.mode == "off"  # the default


def _state(track: str, before: str, after: str, reason: str = "window") -> StateChanged:
    return StateChanged(track, before, after, 6.0, 5.0, 1, reason, 0.0, 0.0)  # type: ignore[arg-type]


def test_exceeded_mode_switches_on_after_the_budget_and_off_at_the_next_period() -> None:
    """REQUIRED: the utterance after the crossing is anonymised; after the period
    resets the budget, utterances pass clear again."""
    changes: list[tuple[bool, str | None]] = []
    policy = ProtectionPolicy("exceeded", Alpha(0.5, 0.9), random.Random(3))
    policy.on_change = lambda on, who: changes.append((on, who))
    observer = ProtectionObserver(policy)

    async def feed(*events: object) -> None:
        for event in events:
            await observer.handle(event)  # type: ignore[arg-type]

    asyncio.run(feed(DaemonStarted("dev", "0", 0.0, {}, 3.0, 0.0, {}, 5.0)))
    assert policy.decide().alpha is None
    policy.heard("alice")
    asyncio.run(feed(_state("alice", "ok", "warning")))
    assert policy.decide().alpha is None
    asyncio.run(feed(_state("alice", "warning", "exceeded")))
    decision = policy.decide()
    assert decision.speaker == "alice" and 0.5 <= decision.alpha <= 0.9  # type: ignore[operator]
    policy.heard("bob")  # the next utterance follows bob, who is within budget
    assert policy.decide().alpha is None
    policy.heard("alice")
    assert policy.decide().alpha is not None
    asyncio.run(feed(_state("alice", "exceeded", "ok", reason="period")))
    assert policy.decide().alpha is None
    assert changes == [(True, "alice"), (False, None), (True, "alice"), (False, None)]


def test_exceeded_with_no_speaker_known_follows_any_member() -> None:
    policy = ProtectionPolicy("exceeded", Alpha.fixed(0.8))
    asyncio.run(
        ProtectionObserver(policy).handle(
            DaemonStarted("dev", "0", 0.0, {}, 3.0, 0.0, {"carol": "exceeded"}, 5.0)
        )
    )
    assert policy.decide().alpha == 0.8 and policy.decide().speaker == "carol"
    policy.enabled = False  # the Home Assistant switch
    assert policy.decide().alpha is None
    assert ProtectionPolicy("always", Alpha.fixed(0.7)).decide().alpha == 0.7
    assert ProtectionPolicy("off", Alpha.fixed(0.7)).decide().alpha is None


def _decode(data: bytes) -> list[Event]:
    async def read() -> list[Event]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        events = []
        while (event := await read_event(reader)) is not None:
            events.append(event)
        return events

    return asyncio.run(read())


def test_relay_transform_anonymises_an_utterance_as_it_streams() -> None:
    """Chunks in, chunks out: the concatenated audio the upstream gets is the stream's output,
    every sample of the utterance arrives before its stop, other events pass byte for byte."""
    x = np.rint(voiced(1.0)).astype("<i2")
    transform = UpstreamAnonymiser(ProtectionPolicy("always", Alpha.fixed(0.75)))
    sent = b""
    events = [AudioStart(16000, 2, 1).event()]
    events += [
        AudioChunk(16000, 2, 1, x[i : i + 1024].tobytes(), timestamp=i // 16).event()
        for i in range(0, x.size, 1024)
    ]
    events += [AudioStop().event(), Event("transcribe", {"language": "en"})]
    for event in events:
        raw = encode_event(event)
        out = transform(event, raw)
        if not (AudioChunk.is_type(event.type) or AudioStop.is_type(event.type)):
            assert out == raw
        sent += out
    received = _decode(sent)
    kinds = [e.type for e in received]
    assert kinds[0] == "audio-start" and kinds[-2:] == ["audio-stop", "transcribe"]
    audio = np.frombuffer(
        b"".join(AudioChunk.from_event(e).audio for e in received if e.type == "audio-chunk"),
        dtype="<i2",
    )
    assert audio.size == x.size
    stream = McAdamsStream(16000, 0.75)
    expected = np.concatenate([stream.process(x.astype(float)), stream.flush()])
    np.testing.assert_array_equal(audio, np.clip(np.rint(expected), -32768, 32767))
    assert np.abs(audio.astype(float) - x).mean() > 0.1 * np.abs(x).mean()  # it did change


def test_an_unprotected_utterance_passes_byte_for_byte() -> None:
    transform = UpstreamAnonymiser(ProtectionPolicy("exceeded", Alpha.fixed(0.8)))
    for event in (
        AudioStart(16000, 2, 1).event(),
        AudioChunk(16000, 2, 1, b"\x01\x02" * 512).event(),
        AudioStop().event(),
    ):
        raw = encode_event(event)
        assert transform(event, raw) == raw


def test_several_sources_protection_needs_one_that_relays() -> None:
    relay = f"kitchen={PROXY}"
    config = load_config(None, [f"audio.sources=['{relay}', 'hall=mic']", "protect.mode='always'"])
    assert config.protect.mode == "always"
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["audio.sources=['a=mic', 'b=mic:1']", "protect.mode='always'"])
    assert caught.value.key == "protect.mode" and "not 'mic', 'mic:1'" in str(caught.value)


def test_each_relaying_source_follows_its_own_last_speaker() -> None:
    policy = ProtectionPolicy("exceeded", Alpha.fixed(0.8))
    policy.budget("alice", "exceeded")
    policy.heard("alice", "kitchen")
    policy.heard("bob", "hall")
    assert policy.decide("kitchen").speaker == "alice"
    assert policy.decide("hall").alpha is None
    assert policy.decide("garage").speaker == "alice"  # none heard there yet: any member
