"""Pooled 1-to-1 trials in the ZEBRA/VoicePrivacy (Kaldi-style) text format: a score file of
``enroll trial score`` lines joined with a key file of ``enroll trial target|nontarget`` lines on
(enroll, trial). Every problem is an InputError naming the file, line and problem.

Both files are streamed in chunks (:mod:`monitor.scorefiles.trial_text`); names become 64-bit
words and pairs 64-bit hashes (:mod:`monitor.scorefiles.pair_words`), joined with numpy and
checked word by word, so memory grows with the key only. Score matrices are read by
:mod:`monitor.scorefiles.matrix_files`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from monitor.errors import InputError
from monitor.scorefiles.pair_words import Pairs, longest_words, name_bytes, pair_hashes, pairs_of
from monitor.scorefiles.trial_text import (
    LABEL_TYPE,
    Chunk,
    consume_chunks,
    finite_float,
    first_line_of_pair,
    pair_at,
    shown,
)

LABELS = {"target": True, "nontarget": False}


@dataclass(frozen=True)
class PairScores:
    """Pooled trial scores split by the key: targets (same speaker) and non-targets."""

    tar: np.ndarray  # (n_tar,) float64
    non: np.ndarray  # (n_non,) float64


def _to_numpy(array: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """A read-only view of a primitive arrow array without nulls (the readers allow none):
    ``Array.to_numpy`` imports pandas when it is installed (0.5 s of start-up)."""
    if array.null_count:
        raise AssertionError("unreachable: the readers allow no null values")
    size = np.dtype(dtype).itemsize
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=size * array.offset
    )


@dataclass
class _Key:
    """The key, encoded for a join in bounded memory: its pairs as words in line order, and a
    64-bit hash per pair, sorted (every hash hit is checked against the pair itself)."""

    pairs: Pairs  # (K,) in line order
    sorted_hashes: np.ndarray  # (K,) uint64, ascending
    order: np.ndarray  # (K,) int: key row (line order) at each hash position; ties in line order
    seed: int  # hash seed under which no two different key pairs collide
    is_target: np.ndarray  # (K,) bool, in line order
    is_nontarget: np.ndarray  # (K,) bool, in line order
    first_problem: int | None  # first row with a bad label or a repeated pair

    def rows(self, enroll: pa.Array, trial: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Key row of each pair (its first occurrence; -1 where the pair is not in the key), and
        an order of the pairs by hash (equal pairs side by side)."""
        pairs = pairs_of(enroll, trial, self.pairs.widths)
        hashes = pair_hashes(pairs, self.seed)
        by_hash = np.argsort(hashes)
        needles = hashes[by_hash]
        pos = np.searchsorted(self.sorted_hashes, needles)  # ascending: a forward walk
        np.minimum(pos, self.order.size - 1, out=pos)
        hit = np.flatnonzero(self.sorted_hashes[pos] == needles)
        found = np.full(hashes.size, -1, dtype=np.int64)
        found[by_hash[hit]] = self.order[pos[hit]]
        # Check each hit against its pair; when every pair hit (the usual case) the chunk's own
        # rows are compared where they are, without a copy.
        mine = np.flatnonzero(found >= 0)
        own = pairs if mine.size == hashes.size else pairs.take(mine)
        same = self.pairs.take(found[mine]).equal(own)
        found[mine[~same]] = -1  # the same hash, another pair
        return found, by_hash


class _KeyRows:
    """The key's pairs, appended chunk by chunk into one block that is allocated once for the
    lines the file can hold (pages never written cost nothing) and widened if a later chunk
    has longer names (rare)."""

    def __init__(self, path: Path) -> None:
        self.file_bytes = path.stat().st_size
        self.block = np.zeros((0, 3), dtype=np.uint64)
        self.widths = (1, 1)
        self.size = 0

    def append(self, enroll: pa.Array, trial: pa.Array) -> None:
        n = len(enroll)
        if n == 0:
            return
        widths = (
            max(self.widths[0], longest_words(enroll)),
            max(self.widths[1], longest_words(trial)),
        )
        if widths != self.widths:
            self._widen(widths)
        if self.size + n > self.block.shape[0]:
            # As many more lines as the file holds at no more than this chunk's bytes a line:
            # both names, two delimiters, a newline and 'target' (the shortest label).
            line_bytes = (name_bytes(enroll) + name_bytes(trial)) / n + 9
            self._grow(self.size + n + int(self.file_bytes / line_bytes) + 1024)
        pairs_of(enroll, trial, self.widths, out=self.block[self.size : self.size + n])
        self.size += n

    def _widen(self, widths: tuple[int, int]) -> None:
        block = np.zeros((self.block.shape[0], widths[0] + widths[1] + 1), dtype=np.uint64)
        e, t = self.widths
        block[: self.size, :e] = self.block[: self.size, :e]
        block[: self.size, widths[0] : widths[0] + t] = self.block[: self.size, e:-1]
        block[: self.size, -1] = self.block[: self.size, -1]
        self.block, self.widths = block, widths

    def _grow(self, rows: int) -> None:
        block = np.empty((rows, self.block.shape[1]), dtype=np.uint64)
        block[: self.size] = self.block[: self.size]
        self.block = block

    def pairs(self) -> Pairs:
        return Pairs(self.block[: self.size], self.widths[0])


def _hash_order(pairs: Pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(sorted hashes, key row at each hash position, repeated-row mask, seed) under the first
    seed where only equal pairs share a hash; within a tie the rows keep line order (the first
    is the one kept)."""
    for seed in range(64):
        hashes = pair_hashes(pairs, seed)
        order = np.argsort(hashes).astype(np.int32 if hashes.size < 2**31 else np.int64)
        hashes = hashes[order]
        tied = np.flatnonzero(hashes[1:] == hashes[:-1])
        if tied.size:  # rare: put each run of tied rows in line order
            run = np.unique(np.concatenate([tied, tied + 1]))
            order[run] = order[run][np.lexsort((order[run], hashes[run]))]
        first, later = order[tied], order[tied + 1]
        if pairs.take(first).equal(pairs.take(later)).all():
            repeated = np.zeros(order.size, dtype=bool)
            repeated[later] = True
            return hashes, order, repeated, seed
    raise AssertionError("unreachable: 64 independent 64-bit hashes all collided")


def _label_is(labels: pa.DictionaryArray, label: str) -> np.ndarray:
    """(n,) bool: which labels are ``label``, compared once per distinct label (a handful)."""
    words = labels.dictionary.to_pylist()  # distinct: at most one is ``label``
    if label not in words:
        return np.zeros(len(labels), dtype=bool)
    return np.asarray(_to_numpy(labels.indices, np.int32) == words.index(label))


def _read_key(path: Path) -> _Key:
    def consume(stream: Iterator[Chunk]) -> _Key:
        rows, is_target, is_non = _KeyRows(path), [], []
        for enroll, trial, label in stream:
            rows.append(enroll, trial)
            is_target.append(_label_is(label, "target"))
            is_non.append(_label_is(label, "nontarget"))
        if rows.size == 0:
            raise InputError(str(path), "empty: no trial lines")
        pairs = rows.pairs()
        sorted_hashes, order, repeated, seed = _hash_order(pairs)
        targets, nontargets = np.concatenate(is_target), np.concatenate(is_non)
        problem = repeated | ~(targets | nontargets)
        first_problem = int(np.argmax(problem)) if problem.any() else None
        return _Key(pairs, sorted_hashes, order, seed, targets, nontargets, first_problem)

    return consume_chunks(path, LABEL_TYPE, consume)


@dataclass
class _Joined:
    """Scores of the key rows, and the first problem row of the score file (if any)."""

    values: np.ndarray  # (K,) float64, NaN where no score was given
    filled: np.ndarray  # (K,) bool
    first_problem: int | None = None  # a keyed row that repeats a pair or whose score is bad
    repeats: bool = False  # the problem is a repeated pair (else a bad score)


def _join_scores(path: Path, key: _Key) -> _Joined:
    def consume(stream: Iterator[Chunk]) -> _Joined:
        size = key.is_target.size
        joined = _Joined(np.full(size, np.nan), np.zeros(size, dtype=bool))
        start = 0
        for enroll, trial, values in stream:
            rows, by_hash = key.rows(enroll, trial)
            _join_chunk(joined, rows, by_hash, _to_numpy(values, np.float64), start)
            start += len(enroll)
        if start == 0:
            raise InputError(str(path), "empty: no trial lines")
        return joined

    return consume_chunks(path, pa.float64(), consume)


def _join_chunk(
    joined: _Joined, rows: np.ndarray, by_hash: np.ndarray, values: np.ndarray, start: int
) -> None:
    """Store one chunk's keyed scores; remember its first repeated pair or bad score."""
    keyed = np.flatnonzero(rows >= 0)
    key_rows, values = rows[keyed], values[keyed]
    repeated = joined.filled[key_rows]
    grouped = rows[by_hash]  # equal pairs hash equal: a pair twice in the chunk sits side by side
    if np.any((grouped[1:] == grouped[:-1]) & (grouped[1:] >= 0)):
        _, first = np.unique(key_rows, return_index=True)
        again = np.ones(key_rows.size, dtype=bool)
        again[first] = False
        repeated |= again
    bad = repeated | ~np.isfinite(values)
    if bad.any() and joined.first_problem is None:
        i = int(np.argmax(bad))
        joined.first_problem = start + int(keyed[i])
        joined.repeats = bool(repeated[i])
    joined.values[key_rows[~repeated]] = values[~repeated]
    joined.filled[key_rows] = True


def _pair(enroll: str, trial: str, limit: int = 60) -> str:
    """A pair as a message shows it: each name cut to about ``limit`` characters."""
    return " ".join(n if len(n) <= limit else f"{n[:limit]}…" for n in (enroll, trial))


def _key_problem(path: Path, row: int) -> InputError:
    line, (enroll, trial, label) = pair_at(path, row)
    if label not in LABELS:
        return InputError(
            str(path), f"label {shown(label)} is not 'target' or 'nontarget'", line=line
        )
    first = first_line_of_pair(path, [enroll, trial])
    return InputError(str(path), f"pair {_pair(enroll, trial)} repeats line {first}", line=line)


def _score_problem(path: Path, row: int, repeats: bool) -> InputError:
    line, (enroll, trial, token) = pair_at(path, row)
    if repeats:
        first = first_line_of_pair(path, [enroll, trial])
        return InputError(str(path), f"pair {_pair(enroll, trial)} repeats line {first}", line=line)
    finite_float(token, str(path), line, "score")
    raise AssertionError(f"unreachable: {token!r} was found not to be a finite number")


def read_scores_key(scores_path: str | Path, key_path: str | Path) -> PairScores:
    """Join a score file and a key file on (enroll, trial).

    Score lines whose pair is not in the key are ignored; a key line without a score, a
    duplicated pair, a bad label or a non-finite score raises InputError. Both files are
    streamed in chunks by pyarrow's CSV reader; names become 64-bit words and pairs 64-bit
    hashes, joined with numpy and checked word by word, so memory grows with the key only
    (about 35 bytes a key line plus 8 per started 8 bytes of the longest names, up to
    MAX_NAME_WORDS words a name); line numbers are looked up again only to name a problem.
    """
    scores_path, key_path = Path(scores_path), Path(key_path)
    key = _read_key(key_path)
    joined = _join_scores(scores_path, key)
    if key.first_problem is not None:
        raise _key_problem(key_path, key.first_problem)
    if joined.first_problem is not None:
        raise _score_problem(scores_path, joined.first_problem, joined.repeats)
    if not joined.filled.all():
        row = int(np.argmin(joined.filled))
        line, (enroll, trial, _) = pair_at(key_path, row)
        raise InputError(
            str(key_path), f"no score for pair {_pair(enroll, trial)} in {scores_path}", line=line
        )
    tar, non = joined.values[key.is_target], joined.values[key.is_nontarget]
    if not tar.size or not non.size:
        missing = "target" if not tar.size else "nontarget"
        raise InputError(str(key_path), f"no {missing} trials: both classes are needed")
    return PairScores(tar, non)
