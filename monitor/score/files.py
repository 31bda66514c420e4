"""Readers for the score files ``voxmeter score`` accepts; every problem is an InputError.

Two layouts:
- pooled 1-to-1 trials in the ZEBRA/VoicePrivacy (Kaldi-style) text format: a score file of
  ``enroll trial score`` lines and a key file of ``enroll trial target|nontarget`` lines, joined
  on (enroll, trial) (DESIGN §3.7);
- a 1-to-N score matrix (T trials × N identities, ``.npy`` or ``.csv``) with the true identity
  index of each trial (``.npy``, ``.csv`` or ``.txt``).

Messages name the file, the line (for text) and the problem, so the CLI prints one useful line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from monitor.errors import InputError

LABELS = {"target": True, "nontarget": False}
_SEPARATORS = re.compile(r"[,\s]+")
_T = TypeVar("_T")


@dataclass(frozen=True)
class PairScores:
    """Pooled trial scores split by the key: targets (same speaker) and non-targets."""

    tar: np.ndarray  # (n_tar,) float64
    non: np.ndarray  # (n_non,) float64


def _read_text(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig") as handle:  # a BOM is not part of a name
            return handle.read().splitlines()
    except FileNotFoundError:
        raise InputError(str(path), "no such file") from None
    except IsADirectoryError:
        raise InputError(str(path), "is a directory, not a file") from None
    except UnicodeDecodeError:
        raise InputError(str(path), "not a UTF-8 text file") from None
    except OSError as error:
        raise InputError(str(path), f"cannot read: {error.strerror or error}") from None


def _finite_float(token: str, source: str, line: int, what: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise InputError(source, f"{what} {token!r} is not a number", line=line) from None
    if not math.isfinite(value):
        raise InputError(source, f"{what} {token!r} is not a finite number", line=line)
    return value


# 2 MB of text (~6.6·10^4 trial lines) per streamed chunk: the per-chunk arrays stay small enough
# to be reused by the allocator and cached (as fast as 4-8 MB chunks, 30-70 MB less peak RSS).
_BLOCK_BYTES = 1 << 21
_FIELDS = ("enroll", "trial", "value")


class _IrregularError(Exception):
    """A file the fast reader cannot take as it is (mixed whitespace, a bad line, bad UTF-8, an
    empty name, a score arrow does not read): it is read again line by line, which finds and
    names the exact problem."""


def _open_failure(path: Path) -> InputError | None:
    """The InputError of a file that cannot be opened, or None."""
    try:
        with open(path, "rb"):
            return None
    except FileNotFoundError:
        return InputError(str(path), "no such file")
    except IsADirectoryError:
        return InputError(str(path), "is a directory, not a file")
    except OSError as error:
        return InputError(str(path), f"cannot read: {error.strerror or error}")


def _delimiter(path: Path) -> str:
    """Tab when the first line is tab-separated, else a single space (Kaldi)."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
    first = next((line for line in head.splitlines() if line.strip()), b"")
    return "\t" if b"\t" in first else " "


_Chunk = tuple[pa.Array, pa.Array, pa.Array]
_LABELS = pa.dictionary(pa.int32(), pa.string())  # a key's third column: a few distinct words


def _fast_chunks(path: Path, third: pa.DataType) -> Iterator[_Chunk]:
    """(enroll, trial, third) columns in chunks, by pyarrow's streaming CSV reader (parsing on
    its threads); the third column is typed ``third`` (float64 scores, dictionary labels).

    Raises _IrregularError at the first line that is not exactly three single-delimited fields
    or whose third field does not convert (no null values: an empty field is an error).
    """

    def on_invalid(row: pacsv.InvalidRow) -> str:
        return "skip" if not row.text.split() else "error"  # whitespace-only lines are blank

    string = pa.string()
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=_FIELDS, block_size=_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(
                delimiter=_delimiter(path), quote_char=False, invalid_row_handler=on_invalid
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={"enroll": string, "trial": string, "value": third},
                strings_can_be_null=False,
                null_values=[],
            ),
        )
        for batch in _read_ahead(reader):
            yield batch.column(0), batch.column(1), batch.column(2)
    except pa.ArrowInvalid as error:
        raise _IrregularError(str(error)) from None


def _read_ahead(batches: Iterator[_T]) -> Iterator[_T]:
    """The same items, the next one parsed on another thread (arrow releases the GIL) while
    the caller works on this one: reading and joining share the two cores."""
    with ThreadPoolExecutor(1, thread_name_prefix="voxmeter-read") as pool:
        coming = pool.submit(next, batches, None)
        while (item := coming.result()) is not None:
            coming = pool.submit(next, batches, None)
            yield item


def _python_float(token: str) -> float:
    """Python's reading of a score (NaN where it is not a number: the join names it later)."""
    try:
        return float(token)
    except ValueError:
        return math.nan


def _slow_chunks(path: Path, third: pa.DataType, rows: int = 1 << 17) -> Iterator[_Chunk]:
    """The same chunks read line by line; names the first line that is not 3 fields. Scores are
    read by Python's float (NaN where they are not numbers)."""
    columns: tuple[list[str], list[str], list[str]] = ([], [], [])

    def chunk() -> _Chunk:
        enroll, trial, tokens = columns
        if third == _LABELS:
            words = {word: code for code, word in enumerate(dict.fromkeys(tokens))}
            codes = pa.array([words[t] for t in tokens], pa.int32())
            labels = pa.DictionaryArray.from_arrays(codes, pa.array(list(words), pa.string()))
            return pa.array(enroll, pa.string()), pa.array(trial, pa.string()), labels
        values = pa.array([_python_float(t) for t in tokens], pa.float64())
        return pa.array(enroll, pa.string()), pa.array(trial, pa.string()), values

    try:
        with open(path, encoding="utf-8-sig") as handle:  # a BOM is not part of a name
            for number, text in enumerate(handle, start=1):
                fields = text.split()
                if not fields:
                    continue
                if len(fields) != 3:
                    raise InputError(
                        str(path),
                        f"expected 3 fields 'enroll trial value', got {len(fields)}",
                        line=number,
                    )
                for column, field in zip(columns, fields, strict=True):
                    column.append(field)
                if len(columns[0]) == rows:
                    yield chunk()
                    columns = ([], [], [])
    except UnicodeDecodeError:
        raise InputError(str(path), "not a UTF-8 text file") from None
    if columns[0]:
        yield chunk()


def _chunks(path: Path, third: pa.DataType) -> Iterator[Iterator[_Chunk]]:
    """Offer the fast chunk stream; the consumer asks again (slow stream) on _IrregularError."""
    failure = _open_failure(path)
    if failure is not None:
        raise failure
    yield _fast_chunks(path, third)
    yield _slow_chunks(path, third)


def _consume(path: Path, third: pa.DataType, consumer: Callable[[Iterator[_Chunk]], _T]) -> _T:
    """Run ``consumer`` over the fast chunks, or over the slow ones if the fast reader balks."""
    streams = _chunks(path, third)
    try:
        return consumer(next(streams))
    except _IrregularError:
        return consumer(next(streams))


def _row_lines(path: Path, rows: Iterable[int]) -> dict[int, int]:
    """Line number (1-based) of each 0-based row index, rows being the non-blank lines."""
    wanted = sorted(set(rows))
    found: dict[int, int] = {}
    if not wanted:
        return found
    row = -1
    with open(path, encoding="utf-8-sig") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.split():
                continue
            row += 1
            if row == wanted[len(found)]:
                found[row] = number
                if len(found) == len(wanted):
                    break
    return found


def _to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return array.to_numpy(zero_copy_only=False)


_ONE = np.uint64(1)


@dataclass
class _Pairs:
    """(enroll, trial) pairs as numbers, for an exact join without Python strings: one row of
    uint64 per pair — the enroll name's UTF-8 bytes as little-endian words (zero-padded to
    ``enroll_width`` words), then the trial name's, then both lengths in bytes (enroll << 32 |
    trial: they tell apart names that differ only by trailing NUL bytes). A pair is one or two
    cache lines, so checking a hash hit reads it at once."""

    rows: np.ndarray  # (n, We + Wt + 1) uint64
    enroll_width: int  # We

    @property
    def widths(self) -> tuple[int, int]:
        """(We, Wt): words per enroll name and per trial name."""
        return self.enroll_width, self.rows.shape[1] - 1 - self.enroll_width

    def take(self, index: np.ndarray) -> _Pairs:
        return _Pairs(self.rows[index], self.enroll_width)

    def equal(self, other: _Pairs) -> np.ndarray:
        """(n,) bool: the same pair, row by row (both in the same widths)."""
        return np.asarray((self.rows == other.rows).all(axis=1))


def _words(strings: pa.Array, out: np.ndarray) -> np.ndarray:
    """Write the names of an arrow string array as words into the columns of ``out`` (n, W):
    W words each, zero-padded; a longer name is cut (its length still tells it apart). Returns
    the lengths (n,) int32.

    Raises _IrregularError for an empty name (a line the line-by-line reader must judge).
    """
    offsets = _offsets(strings)
    lengths = np.diff(offsets)
    if not lengths.all():
        raise _IrregularError("an empty name")
    width = out.shape[1]
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)[first:last]
    # The bytes again, 8-aligned, with room to read a word past the last name's start.
    aligned = np.zeros(data.size // 8 + width + 1, dtype=np.uint64)
    aligned.view(np.uint8)[: data.size] = data
    starts = offsets[:-1] - first
    word = starts >> 3
    low = ((starts & 7) << 3).astype(np.uint64)  # bit offset of each name in its first word
    high = np.uint64(63) - low  # (x << 1) << high is x << (64 - low), and 0 when low is 0
    aligned_starts = not low.any()  # e.g. names of 8 bytes each: whole words, no shifts
    shortest, longest = int(lengths.min()), int(lengths.max())
    for j in range(width):
        value = aligned[word + j]
        if not aligned_starts:
            value >>= low
            value |= (aligned[word + j + 1] << _ONE) << high
        if shortest >= 8 * (j + 1):  # every name fills word j
            out[:, j] = value
        elif shortest == longest:  # names of one length: one mask for all
            keep = np.uint64((1 << 8 * min(max(shortest - 8 * j, 0), 8)) - 1)
            np.bitwise_and(value, keep, out=out[:, j])
        else:
            left = lengths - 8 * j  # bytes of the name from word j on
            half = (np.clip(left, 0, 8) << 2).astype(np.uint64)  # 1 << 2·half overflows at 64
            np.bitwise_and(value, ((_ONE << half) << half) - _ONE, out=out[:, j])
    return lengths


def _pairs(
    enroll: pa.Array, trial: pa.Array, widths: tuple[int, int], out: np.ndarray | None = None
) -> _Pairs:
    """A chunk's pairs as rows of words in ``widths``, written into ``out`` if given."""
    n = len(enroll)
    rows = np.empty((n, widths[0] + widths[1] + 1), dtype=np.uint64) if out is None else out
    if n == 0:
        return _Pairs(rows, widths[0])
    enroll_lengths = _words(enroll, rows[:, : widths[0]])
    trial_lengths = _words(trial, rows[:, widths[0] : -1])
    np.bitwise_or(
        enroll_lengths.astype(np.uint64) << np.uint64(32),
        trial_lengths.astype(np.uint64),
        out=rows[:, -1],
    )
    return _Pairs(rows, widths[0])


def _offsets(strings: pa.Array) -> np.ndarray:
    """(n + 1,) int32: where each name of an arrow string array starts in its data buffer."""
    return np.frombuffer(
        strings.buffers()[1], dtype=np.int32, count=len(strings) + 1, offset=4 * strings.offset
    )


def _name_bytes(strings: pa.Array) -> int:
    """Bytes of all the names together."""
    offsets = _offsets(strings)
    return int(offsets[-1] - offsets[0])


def _longest_words(strings: pa.Array) -> int:
    """Words (8 bytes each) of the longest name, at least 1."""
    return max(1, (int(np.diff(_offsets(strings)).max()) + 7) // 8)


_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place: a bijection of the uint64s that keeps 0 at 0."""
    x ^= x >> np.uint64(30)
    x *= _MIX[0]
    x ^= x >> np.uint64(27)
    x *= _MIX[1]
    x ^= x >> np.uint64(31)
    return x


def _multipliers(seed: int, count: int) -> np.ndarray:
    """``count`` odd 64-bit multipliers of hash seed ``seed`` (one per word position)."""
    state = np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    state += np.uint64(seed) * np.uint64(0xD1B54A32D192ED03)
    return _mix(state) | _ONE


_HASH_ROWS = 1 << 16  # pairs hashed per step: temporaries stay in cache


def _pair_hashes(pairs: _Pairs, seed: int) -> np.ndarray:
    """A 64-bit hash per pair (n,) uint64: a sum of mixed words, so the zero words of padding
    add nothing and pairs of any widths hash alike. Equal pairs hash equal; the join checks
    every hit against the pair itself."""
    enroll_width, trial_width = pairs.widths
    k_enroll = _multipliers(2 * seed, enroll_width + 1)  # the last one for the lengths
    k_trial = _multipliers(2 * seed + 1, trial_width)
    multipliers = np.concatenate([k_enroll[:-1], k_trial, k_enroll[-1:]])
    n = pairs.rows.shape[0]
    hashes = np.empty(n, dtype=np.uint64)
    for r0 in range(0, n, _HASH_ROWS):
        block = pairs.rows[r0 : r0 + _HASH_ROWS]
        total = _mix(block[:, -1] * multipliers[-1])
        for j in range(block.shape[1] - 1):
            total += _mix(block[:, j] * multipliers[j])
        hashes[r0 : r0 + _HASH_ROWS] = _mix(total)
    return hashes


@dataclass
class _Key:
    """The key, encoded for a join in bounded memory: its pairs as words in line order, and a
    64-bit hash per pair, sorted (every hash hit is checked against the pair itself)."""

    pairs: _Pairs  # (K,) in line order
    sorted_hashes: np.ndarray  # (K,) uint64, ascending
    order: np.ndarray  # (K,) int: key row (line order) at each hash position; ties in line order
    seed: int  # hash seed under which no two different key pairs collide
    is_target: np.ndarray  # (K,) bool, in line order
    is_nontarget: np.ndarray  # (K,) bool, in line order
    first_problem: int | None  # first row with a bad label or a repeated pair

    def rows(self, enroll: pa.Array, trial: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Key row of each pair (its first occurrence; -1 where the pair is not in the key), and
        an order of the pairs by hash (equal pairs side by side)."""
        pairs = _pairs(enroll, trial, self.pairs.widths)
        hashes = _pair_hashes(pairs, self.seed)
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
            max(self.widths[0], _longest_words(enroll)),
            max(self.widths[1], _longest_words(trial)),
        )
        if widths != self.widths:
            self._widen(widths)
        if self.size + n > self.block.shape[0]:
            # As many more lines as the file holds at no more than this chunk's bytes a line:
            # both names, two delimiters, a newline and 'target' (the shortest label).
            line_bytes = (_name_bytes(enroll) + _name_bytes(trial)) / n + 9
            self._grow(self.size + n + int(self.file_bytes / line_bytes) + 1024)
        _pairs(enroll, trial, self.widths, out=self.block[self.size : self.size + n])
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

    def pairs(self) -> _Pairs:
        return _Pairs(self.block[: self.size], self.widths[0])


def _hash_order(pairs: _Pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(sorted hashes, key row at each hash position, repeated-row mask, seed) under the first
    seed where only equal pairs share a hash; within a tie the rows keep line order (the first
    is the one kept)."""
    for seed in range(64):
        hashes = _pair_hashes(pairs, seed)
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
    return np.asarray(_to_numpy(labels.indices) == words.index(label))


def _read_key(path: Path) -> _Key:
    def consume(stream: Iterator[_Chunk]) -> _Key:
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

    return _consume(path, _LABELS, consume)


@dataclass
class _Joined:
    """Scores of the key rows, and the first problem row of the score file (if any)."""

    values: np.ndarray  # (K,) float64, NaN where no score was given
    filled: np.ndarray  # (K,) bool
    first_problem: int | None = None  # a keyed row that repeats a pair or whose score is bad
    repeats: bool = False  # the problem is a repeated pair (else a bad score)


def _join_scores(path: Path, key: _Key) -> _Joined:
    def consume(stream: Iterator[_Chunk]) -> _Joined:
        size = key.is_target.size
        joined = _Joined(np.full(size, np.nan), np.zeros(size, dtype=bool))
        start = 0
        for enroll, trial, values in stream:
            rows, by_hash = key.rows(enroll, trial)
            _join_chunk(joined, rows, by_hash, _to_numpy(values), start)
            start += len(enroll)
        if start == 0:
            raise InputError(str(path), "empty: no trial lines")
        return joined

    return _consume(path, pa.float64(), consume)


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


def _pair_at(path: Path, row: int) -> tuple[int, list[str]]:
    """Line number and fields of a 0-based row (for messages only)."""
    line = _row_lines(path, [row])[row]
    with open(path, encoding="utf-8-sig") as handle:
        for number, text in enumerate(handle, start=1):
            if number == line:
                return line, text.split()
    raise AssertionError("unreachable: the row was just found")


def _first_row_of_pair(path: Path, pair: list[str]) -> int:
    """Line number of the first line holding the pair (for the 'repeats line' message)."""
    with open(path, encoding="utf-8-sig") as handle:
        for number, text in enumerate(handle, start=1):
            if text.split()[:2] == pair:
                return number
    raise AssertionError("unreachable: the pair was just read")


def _key_problem(path: Path, row: int) -> InputError:
    line, (enroll, trial, label) = _pair_at(path, row)
    if label not in LABELS:
        return InputError(str(path), f"label {label!r} is not 'target' or 'nontarget'", line=line)
    first = _first_row_of_pair(path, [enroll, trial])
    return InputError(str(path), f"pair {enroll} {trial} repeats line {first}", line=line)


def _score_problem(path: Path, row: int, repeats: bool) -> InputError:
    line, (enroll, trial, token) = _pair_at(path, row)
    if repeats:
        first = _first_row_of_pair(path, [enroll, trial])
        return InputError(str(path), f"pair {enroll} {trial} repeats line {first}", line=line)
    _finite_float(token, str(path), line, "score")
    raise AssertionError(f"unreachable: {token!r} was found not to be a finite number")


def read_scores_key(scores_path: str | Path, key_path: str | Path) -> PairScores:
    """Join a score file and a key file on (enroll, trial) (DESIGN §3.7).

    Score lines whose pair is not in the key are ignored; a key line without a score, a
    duplicated pair, a bad label or a non-finite score raises InputError. Both files are
    streamed in chunks by pyarrow's CSV reader; names become 64-bit words and pairs 64-bit
    hashes, joined with numpy and checked word by word, so memory grows with the key only
    (about 35 bytes a key line plus 8 per started 8 bytes of the longest names); line numbers
    are looked up again only to name a problem.
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
        line, (enroll, trial, _) = _pair_at(key_path, row)
        raise InputError(
            str(key_path), f"no score for pair {enroll} {trial} in {scores_path}", line=line
        )
    tar, non = joined.values[key.is_target], joined.values[key.is_nontarget]
    if not tar.size or not non.size:
        missing = "target" if not tar.size else "nontarget"
        raise InputError(str(key_path), f"no {missing} trials: both classes are needed")
    return PairScores(tar, non)


def _load_npy(path: Path) -> np.ndarray:
    """An .npy array, its header checked before any memory is allocated.

    A renamed .npz (a zip archive), a header whose shape needs more bytes than the file holds,
    or an object array is refused with one line; the data are memory-mapped, never read twice.
    """
    if not path.exists():
        raise InputError(str(path), "no such file")
    if path.is_dir():
        raise InputError(str(path), "is a directory, not a file")
    try:
        with open(path, "rb") as stream:
            if stream.read(4) == b"PK\x03\x04":
                raise InputError(str(path), "a .npz (zip) archive, not a .npy array")
            stream.seek(0)
            version = np.lib.format.read_magic(stream)
            read_header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _fortran, dtype = read_header(stream)
            offset = stream.tell()
        size = path.stat().st_size
    except InputError:
        raise
    except (ValueError, OSError, EOFError, SyntaxError) as error:
        raise InputError(str(path), f"not a readable .npy array ({error})") from None
    if dtype.hasobject:
        raise InputError(str(path), f"expected numbers, got dtype {dtype}")
    needed = math.prod(shape) * dtype.itemsize
    if needed != size - offset:
        raise InputError(
            str(path),
            f"header says shape {shape} of {dtype} ({needed} bytes) but the file holds "
            f"{size - offset} bytes of data",
        )
    if needed == 0:
        return np.zeros(shape, dtype=dtype)
    return np.load(path, mmap_mode="r", allow_pickle=False)


def _suffix(path: Path, allowed: tuple[str, ...]) -> str:
    suffix = path.suffix.lower()
    if suffix not in allowed:
        raise InputError(str(path), f"unsupported file type {suffix!r}; use {', '.join(allowed)}")
    return suffix


def read_matrix(path: str | Path) -> np.ndarray:
    """Score matrix (T, N) from ``.npy`` (float32 kept) or ``.csv`` (float64; comma-separated
    rows, no header).

    Empty, ragged, non-numeric, NaN or inf entries raise InputError naming the line or entry.
    """
    path = Path(path)
    if _suffix(path, (".npy", ".csv")) == ".npy":
        array = _load_npy(path)
        if array.ndim != 2:
            raise InputError(
                str(path), f"expected a 2-D (trials × identities) array, got shape {array.shape}"
            )
        if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
            raise InputError(str(path), f"expected numbers, got dtype {array.dtype}")
        # float32 stays float32 (half the memory): every metric compares or widens it exactly.
        keep = array.dtype in (np.dtype(np.float32), np.dtype(np.float64))
        matrix = array if keep else array.astype(np.float64)
        if matrix.size == 0:
            raise InputError(str(path), f"empty matrix (shape {matrix.shape})")
        bad = ~np.isfinite(matrix)
        if bad.any():
            row, column = (int(x) for x in np.argwhere(bad)[0])
            raise InputError(
                str(path), f"row {row}, column {column}: score {matrix[row, column]} is not finite"
            )
        return matrix
    rows: list[list[float]] = []
    width = None
    for number, text in enumerate(_read_text(path), start=1):
        if not text.strip():
            continue
        fields = [field.strip() for field in text.split(",")]
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise InputError(
                str(path),
                f"ragged row: {len(fields)} values where earlier rows have {width}",
                line=number,
            )
        rows.append([_finite_float(f, str(path), number, "score") for f in fields])
    if not rows:
        raise InputError(str(path), "empty: no rows")
    return np.array(rows, dtype=np.float64)


def _read_truth_lines(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Truth indices and, for text files, the line each index came from."""
    if _suffix(path, (".npy", ".csv", ".txt")) == ".npy":
        array = _load_npy(path)
        if array.ndim != 1:
            raise InputError(str(path), f"expected a 1-D array of indices, got shape {array.shape}")
        if array.size == 0:
            raise InputError(str(path), "empty: no trials")
        if np.issubdtype(array.dtype, np.integer):
            return array.astype(np.int64), None
        if not np.issubdtype(array.dtype, np.floating):
            raise InputError(str(path), f"expected integer indices, got dtype {array.dtype}")
        bad = ~np.isfinite(array) | (array != np.round(array))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(str(path), f"entry {i}: {array[i]} is not an integer index")
        return array.astype(np.int64), None
    values: list[int] = []
    lines: list[int] = []
    for number, text in enumerate(_read_text(path), start=1):
        for token in _SEPARATORS.split(text.strip()):
            if not token:
                continue
            try:
                values.append(int(token))
            except ValueError:
                raise InputError(
                    str(path), f"{token!r} is not an integer identity index", line=number
                ) from None
            lines.append(number)
    if not values:
        raise InputError(str(path), "empty: no trials")
    return np.array(values, dtype=np.int64), np.array(lines)


def read_truth(path: str | Path) -> np.ndarray:
    """True identity index per trial (T,) int64 from ``.npy``, ``.csv`` or ``.txt``.

    Text files hold integers separated by commas, spaces or newlines (one per trial, in order).
    """
    return _read_truth_lines(Path(path))[0]


def check_matrix_truth(
    matrix: np.ndarray,
    truth: np.ndarray,
    matrix_path: str | Path,
    truth_path: str | Path,
    *,
    truth_lines: np.ndarray | None = None,
) -> None:
    """A 1-to-N evaluation needs N >= 2 identities, one truth per trial, indices in [0, N)."""
    T, N = matrix.shape
    if N < 2:
        raise InputError(str(matrix_path), f"only {N} identity (column): need at least 2")
    if truth.shape[0] != T:
        raise InputError(
            str(truth_path),
            f"{truth.shape[0]} truth indices for {T} trials (rows) in {matrix_path}",
        )
    bad = (truth < 0) | (truth >= N)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        line = int(truth_lines[i]) if truth_lines is not None else None
        raise InputError(
            str(truth_path),
            f"trial {i}: identity index {int(truth[i])} is outside [0, {N})",
            line=line,
        )


def read_matrix_trials(
    matrix_path: str | Path, truth_path: str | Path
) -> tuple[np.ndarray, np.ndarray]:
    """Read and cross-check a score matrix (T, N) and its truth (T,)."""
    matrix = read_matrix(matrix_path)
    truth, lines = _read_truth_lines(Path(truth_path))
    check_matrix_truth(matrix, truth, matrix_path, truth_path, truth_lines=lines)
    return matrix, truth
