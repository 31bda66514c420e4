"""The received view's reproduction: the relay's transform marks a protected
utterance's audio-start for the tap only, and the measuring side rebuilds from the original
audio exactly the samples the upstream received, chunk by chunk, as the VAD cuts speech."""

from __future__ import annotations

import numpy as np
import pytest
from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk
from wyoming.event import Event

from monitor.audio.file import read_audio
from monitor.audio.frames import AudioFrame, SourceStats
from monitor.audio.vad import SpeechChunk, WebRtcVad
from monitor.audio.windows import Windower
from monitor.protect.mcadams import Alpha
from monitor.protect.policy import ProtectionPolicy
from monitor.protect.received_audio import ReceivedAudio
from monitor.protect.relay import UpstreamAnonymiser
from monitor.vocabulary import PROTECT_KEY
from monitor.wyoming.source import FrameDecoder
from monitor.wyoming.wire import encode_event
from tests.daemon_corpus import DaemonCorpus
from tests.protect.test_policy_relay import _decode
from tests.wyoming.wyoming_peers import conversation

pytestmark = pytest.mark.corpus


def _relay(pcm: np.ndarray, mode: str) -> tuple[list[Event], np.ndarray]:
    """The events as the tap is offered them and the audio the upstream got, through the real
    transform with α fixed at 0.7."""
    transform = UpstreamAnonymiser(ProtectionPolicy(mode, Alpha.fixed(0.7)))
    events = conversation(pcm, Transcribe().event())
    sent = b""
    for event in events:
        raw = encode_event(event)
        out = transform(event, raw)
        assert PROTECT_KEY.encode() not in out  # never on the wire upstream
        sent += out
    upstream = [e for e in _decode(sent) if AudioChunk.is_type(e.type)]
    audio = np.frombuffer(b"".join(AudioChunk.from_event(e).audio for e in upstream), "<i2")
    return events, audio


def _measure(events: list[Event]) -> tuple[list[SpeechChunk], int]:
    """The measuring side as the vad stage runs it: decoder → VAD → received counterparts."""
    decoder = FrameDecoder(30, SourceStats(), "test", turns=True)
    vad = WebRtcVad(2, 30, hangover_ms=100)
    received = ReceivedAudio()
    chunks: list[SpeechChunk] = []
    speech = 0
    for event in events:
        for frame in decoder.process(event):
            ends = frame.utterance_end or frame.stream_end
            found = vad.process(frame)
            if ends:
                found = [*found, *vad.flush()]
            speech += sum(c.samples.shape[0] for c in found)
            chunks += received.attach(frame, found, ends)
    return chunks, speech


def test_a_protected_utterance_is_reproduced_sample_for_sample(
    daemon_corpus: DaemonCorpus,
) -> None:
    audio, _ = read_audio(daemon_corpus.known_stream)
    pcm = (audio[: 8 * 16000] * 32767).astype(np.int16)  # 8 s, pauses between utterances
    events, upstream = _relay(pcm, "always")
    start = events[1]
    assert start.data[PROTECT_KEY] == {"method": "mcadams", "alpha": 0.7}
    assert upstream.size == pcm.size and not np.array_equal(upstream, pcm)

    chunks, speech = _measure(events)
    assert len(chunks) > 3  # several runs of speech, some split where not final yet
    assert sum(c.samples.shape[0] for c in chunks) == speech  # nothing held back at the end
    for chunk in chunks:
        a = round(chunk.start_seconds * 16000)
        b = a + chunk.samples.shape[0]
        np.testing.assert_array_equal(chunk.samples, pcm[a:b])
        assert chunk.received is not None
        np.testing.assert_array_equal(chunk.received, upstream[a:b])

    windower = Windower(3.0, turn_pause_seconds=0.15, min_window_seconds=1.0)
    windows = [w for c in chunks for w in windower.process(c)] + windower.flush()
    assert windows and all(w.received is not None for w in windows)
    spoken = np.concatenate([c.samples for c in chunks])
    got = np.concatenate([c.received for c in chunks if c.received is not None])
    heads = np.lib.stride_tricks.sliding_window_view(spoken, 160)
    for window in windows:  # the same stretch of speech, as it was and as the upstream got it
        pcm_window = np.rint(window.samples * 32768).astype(np.int16)
        (at,) = np.flatnonzero((heads == pcm_window[:160]).all(axis=1))
        assert window.received is not None and window.received.shape == window.samples.shape
        expected = got[at : at + pcm_window.size].astype(np.float32) / np.float32(32768)
        np.testing.assert_array_equal(window.received, expected)


def test_a_clear_utterance_has_no_received_counterpart(daemon_corpus: DaemonCorpus) -> None:
    audio, _ = read_audio(daemon_corpus.known_stream)
    pcm = (audio[: 4 * 16000] * 32767).astype(np.int16)
    events, upstream = _relay(pcm, "off")
    assert PROTECT_KEY not in events[1].data
    np.testing.assert_array_equal(upstream, pcm)  # passed as it came
    chunks, speech = _measure(events)
    assert chunks and speech == sum(c.samples.shape[0] for c in chunks)
    assert all(c.received is None for c in chunks)


def test_clear_audio_after_a_protected_utterance_without_its_stop_loses_no_speech(
    daemon_corpus: DaemonCorpus,
) -> None:
    """A protected utterance whose audio-stop never came, then clear audio on the same stream:
    the protected speech keeps its counterparts, the clear speech passes without, none is
    lost or held back."""
    audio, _ = read_audio(daemon_corpus.known_stream)
    pcm = (audio[: 6 * 16000] * 32767).astype(np.int16)
    vad, received = WebRtcVad(2, 30, hangover_ms=100), ReceivedAudio()
    half = 3 * 16000
    chunks: list[SpeechChunk] = []
    speech = 0
    for i in range(0, pcm.size, 480):
        alpha = 0.7 if i < half else None
        frame = AudioFrame(pcm[i : i + 480], i / 16000, protect_alpha=alpha)
        found = vad.process(frame)
        speech += sum(c.samples.shape[0] for c in found)
        chunks += received.attach(frame, found, False)
    found = vad.flush()
    speech += sum(c.samples.shape[0] for c in found)
    chunks += received.attach(None, found, True)
    assert sum(c.samples.shape[0] for c in chunks) == speech
    protected = [c for c in chunks if c.received is not None]
    assert protected and all(c.end_seconds <= 3.0 + 0.02 for c in protected)
    assert any(c.received is None and c.start_seconds >= 3.0 for c in chunks)
