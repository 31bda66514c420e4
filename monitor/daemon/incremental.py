"""Features computed while a window fills, so that its end leaves only the remainder to do.

The VAD stage hands every speech chunk to :meth:`IncrementalWindows.feed` as it arrives (the
same chunks the windower gets, in the same order); when the windower closes a window, the
feature stage calls :meth:`IncrementalWindows.take` with its samples and finishes the streams
it gets back (phone decoding's last frames, F0's voicing gate, the embedding network). Both run
on one dedicated worker thread, in submission order, so the loop thread never decodes.

Streams are exact (``tests/features/test_streams``), so an observation does not depend on
whether it was streamed. :meth:`take` checks that the samples it fed are the window's, and
falls back to whole-window extraction when they are not: a window that closed early (before
the streams' cap, after more speech was fed) or a windower that dropped speech. A window longer
than the cap (a turn's last window, which takes the turn's tail) is streamed up to the cap and
fed the rest when it closes.

The turn splitter runs here too, when the window closes and before :meth:`take`
(:meth:`split`): its change score reads the log-mel frames the embedding stream computed while
the window filled (:meth:`frames`), so they are not computed twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from monitor.audio.frames import RATE_HZ
from monitor.audio.windows import SpeechWindow
from monitor.features.base import BufferedStream, Feature, FeatureStream, open_stream
from monitor.features.embedding import EmbeddingStream
from monitor.features.fbank import EcapaFbankStream, KaldiFbankStream, ecapa_db
from monitor.features.phone_model import PhoneNetworkStream
from monitor.load.shedding import AbsentStream, LoadShedder
from monitor.tracking.turns import TurnSplitter, WindowFrames, frames_of


def as_float(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1): int16 chunks scaled as the windower scales them."""
    data = np.asarray(samples)
    if np.issubdtype(data.dtype, np.integer):
        return data.astype(np.float32) / np.float32(32768.0)
    return data.astype(np.float32, copy=False)


class IncrementalWindows:
    """The streams of the window being filled (not thread-safe: one worker thread calls it)."""

    def __init__(
        self,
        features: Mapping[str, Feature],
        *,
        max_samples: int,
        block_samples: int = 4000,
        turns: TurnSplitter | None = None,
        shedder: LoadShedder | None = None,
    ) -> None:
        self.features = dict(features)
        self.max_samples = max_samples  # the windower's full window: never fed beyond
        self._cap = max_samples  # this window's end: lower once the windower closed it early
        # speech is handed to the streams in blocks of >= 0.25 s: fewer, cheaper calls (VAD
        # chunks can be 30 ms frames), and each holds the GIL for a few ms at most
        self.block_samples = block_samples
        self._unfed: list[np.ndarray] = []
        self._unfed_count = 0
        self.streamed = 0  # windows whose streams held exactly their samples
        self.fallbacks = 0  # windows extracted whole instead
        self._streams: dict[str, FeatureStream] | None = None  # opened on the first sample
        self._fed: list[np.ndarray] = []
        self._count = 0
        self._spill: list[np.ndarray] = []  # speech past the cap: the next window's
        self._error: BaseException | None = None
        self.feed_seconds = 0.0  # thread CPU spent feeding (the daemon's busy share)
        # the turn splitter, run when a window closes (None: none, or no threshold fitted)
        self.turns = turns if turns is not None and turns.active else None
        self.frames_reused = 0  # windows whose change score read the embedding stream's frames
        self.shedder = shedder  # under load: phone decoding, then the turn splitting, shed
        self._shed: set[str] = set()  # features shed in the window being filled

    def warm_up(self) -> None:
        """Two streams of every feature opened and finished now, so that the pools behind them
        (phone decoders: ~0.1 s each to build) hold what a window and the next one need."""
        cold = [f for f in self.features.values() if id(f) not in _WARM]
        noise = np.random.default_rng(0).normal(0.0, 0.05, RATE_HZ).astype(np.float32)
        streams = [open_stream(f, RATE_HZ) for f in cold for _ in range(2)]
        for stream in streams:
            stream.feed(noise)
        for stream in streams:
            stream.finish()
        _WARM.update(id(f) for f in cold)

    def feed(self, samples: np.ndarray) -> None:
        """Speech as it arrives (fire and forget): a failure is raised by the next :meth:`take`."""
        if self._error is not None:
            return
        started = time.thread_time()
        try:
            self._feed(as_float(samples))
        except Exception as error:
            self._error = error
        self.feed_seconds += time.thread_time() - started
        if self.shedder is not None:
            self.shedder.processed()

    def close_window(self) -> None:
        """The windower closed the window being filled (a turn ended early): what was fed is
        all of it, and speech fed from now on is the next window's. (Called in order with
        :meth:`feed`; a window still waiting for :meth:`take` keeps its own end, and the later
        one is then extracted whole: slower, never different.)"""
        if self._count < self._cap:
            self._cap = self._count

    def discard(self) -> None:
        """The windower dropped the speech it held (a turn too short to score): so do we,
        unless a closed window still waits for :meth:`take` (it checks what it gets)."""
        if self._count < self._cap:
            self._streams, self._fed, self._count, self._shed = None, [], 0, set()
            self._unfed, self._unfed_count = [], 0

    def reset(self) -> None:
        """Forget every stream, the speech fed and a failure (the measuring side restarts after
        one, :mod:`monitor.daemon.measuring`); the counters are kept."""
        self._streams, self._fed, self._count, self._spill = None, [], 0, []
        self._unfed, self._unfed_count, self._cap = [], 0, self.max_samples
        self._error, self._shed = None, set()

    def _feed(self, data: np.ndarray, *, push: bool = True) -> None:
        room = self._cap - self._count
        head, rest = data[:room], data[room:]
        if head.shape[0]:
            self._fed.append(head)
            self._count += head.shape[0]
            self._unfed.append(head)
            self._unfed_count += head.shape[0]
            if push and self._unfed_count >= self.block_samples:
                self._push()
        if rest.shape[0]:
            self._spill.append(rest)

    def _push(self) -> None:
        """The speech held back into the streams (opened on the window's first block)."""
        if not self._unfed:
            return
        block = np.concatenate(self._unfed)
        if self._streams is None:
            self._shed |= {n for n in self.features if self._sheds(n)}
            self._streams = {
                n: open_stream(f, RATE_HZ) for n, f in self.features.items() if n not in self._shed
            }
            share_fbank(self._streams)
        for name, stream in self._streams.items():
            if name not in self._shed and self._sheds(name):
                self._shed.add(name)  # shed from here: this window's stream is incomplete
            if name not in self._shed:
                stream.feed(block)
        self._unfed, self._unfed_count = [], 0

    def _sheds(self, feature: str) -> bool:
        return self.shedder is not None and self.shedder.sheds(feature)

    def split(self, window: SpeechWindow) -> list[SpeechWindow]:
        """``window`` (just closed, not yet taken) cut at changes of speaker, on this thread."""
        assert self.turns is not None, "no turn splitter"
        if not self.turns.wants(window):
            return [window]
        started = time.thread_time()
        try:
            return self.turns.split(window, self.frames(window.samples))
        finally:
            self.feed_seconds += time.thread_time() - started

    def frames(self, window: np.ndarray) -> WindowFrames:
        """The log-mel frames of ``window``: those its ECAPA embedding stream computed while it
        filled (the held speech pushed first; the last few frames, which need the window's
        end, computed now), else all computed now (the torch runtime, CAM++, whose Kaldi frames
        separate voices worse, or a window the streams do not hold exactly)."""
        stream = (self._streams or {}).get("embedding")
        n = window.shape[0]
        if (
            self._error is not None
            or "embedding" in self._shed
            or not isinstance(stream, EmbeddingStream)
            or not isinstance(stream.fbank, EcapaFbankStream)
            or self._count != n
            or not np.array_equal(np.concatenate(self._fed), window)
        ):
            return frames_of(window)
        self._push()  # take() would push it anyway: the stream then holds the whole window
        done = stream.fbank.computed()
        self.frames_reused += 1
        return WindowFrames(np.concatenate([done, ecapa_db(window, first=done.shape[0])]), "ecapa")

    def take(self, window: np.ndarray) -> dict[str, FeatureStream]:
        """Streams holding exactly ``window``'s samples, to finish; fresh ones start after it."""
        if self._error is not None:
            raise self._error
        seen = np.concatenate([*self._fed, *self._spill]) if self._fed else np.zeros(0)
        n = window.shape[0]
        offset = _find(seen, window)
        follows = offset == 0
        if follows and self._count < n:
            # the window runs past the streams' cap (a turn's last window takes its tail):
            # its rest, already seen, is fed now; the streams then hold exactly the window
            self._unfed.append(seen[self._count : n])
            self._unfed_count += n - self._count
            self._count = n
        if self._count == n and follows:
            self._push()
            assert self._streams is not None
            streams = self._streams
            self.streamed += 1
        else:
            streams = {}
            self._shed = {name for name in self.features if self._sheds(name)}
            for name, feature in self.features.items():
                if name not in self._shed:
                    streams[name] = BufferedStream(feature, RATE_HZ)
                    streams[name].feed(window)
            self.fallbacks += 1
        for name in self._shed:  # absent, not invented: no counts, 0 s (module shedding)
            abandoned = streams.pop(name, None)
            if abandoned is not None:
                abandoned.finish()  # its decoder goes back to the pool
            streams[name] = AbsentStream(self.features[name])
            if self.shedder is not None:
                self.shedder.count(name, n / RATE_HZ)
        streams = {name: streams[name] for name in self.features}
        self._shed = set()
        self._streams, self._fed, self._count, self._spill = None, [], 0, []
        self._unfed, self._unfed_count, self._cap = [], 0, self.max_samples
        if offset is not None and seen.shape[0] > offset + n:
            # what follows the window starts the next one: fed with the next chunk, so that
            # this window's streams are handed over now
            self._feed(seen[offset + n :], push=False)
        return streams


def share_fbank(streams: Mapping[str, FeatureStream]) -> bool:
    """Let the phone network read the filterbanks the CAM++ embedding stream computes from the
    same blocks (both are fed every block of the window, and the embedding is never shed), so
    they are computed once a window; True when they are shared."""
    phone, embedding = streams.get("phone"), streams.get("embedding")
    if (
        isinstance(phone, PhoneNetworkStream)
        and isinstance(embedding, EmbeddingStream)
        and isinstance(embedding.fbank, KaldiFbankStream)
    ):
        phone.share(embedding.fbank)
        return True
    return False


#: ``id`` of every extractor whose streams were warmed up in this process (registry instances
#: live as long as the process, so an id is never reused).
_WARM: set[int] = set()


def _find(seen: np.ndarray, window: np.ndarray, *, tries: int = 64) -> int | None:
    """Where ``window`` starts in ``seen`` (0 unless the windower skipped speech), else None."""
    n = window.shape[0]
    if n == 0 or seen.shape[0] < n:
        return None
    for start in np.flatnonzero(seen[: seen.shape[0] - n + 1] == window[0])[:tries]:
        if np.array_equal(seen[start : start + n], window):
            return int(start)
    return None
