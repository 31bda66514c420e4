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
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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


# 2 MB of text (~7·10^4 trial lines) per streamed chunk: arrow's reader holds ~40 blocks ahead.
_BLOCK_BYTES = 1 << 21
_FIELDS = ("enroll", "trial", "value")


class _IrregularError(Exception):
    """A file the fast reader cannot take as it is (mixed whitespace, a bad line, bad UTF-8):
    it is read again line by line, which finds and names the exact problem."""


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


def _fast_chunks(path: Path) -> Iterator[tuple[pa.Array, pa.Array, pa.Array]]:
    """(enroll, trial, value) string columns in chunks, by pyarrow's streaming CSV reader.

    Raises _IrregularError at the first line that is not exactly three single-delimited fields.
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
                column_types=dict.fromkeys(_FIELDS, string), strings_can_be_null=False
            ),
        )
        for batch in reader:
            yield batch.column(0), batch.column(1), batch.column(2)
    except pa.ArrowInvalid as error:
        raise _IrregularError(str(error)) from None


def _slow_chunks(path: Path, rows: int = 1 << 17) -> Iterator[tuple[pa.Array, pa.Array, pa.Array]]:
    """The same chunks read line by line; names the first line that is not 3 fields."""
    columns: tuple[list[str], list[str], list[str]] = ([], [], [])
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
                    yield tuple(pa.array(c, pa.string()) for c in columns)  # type: ignore[misc]
                    columns = ([], [], [])
    except UnicodeDecodeError:
        raise InputError(str(path), "not a UTF-8 text file") from None
    if columns[0]:
        yield tuple(pa.array(c, pa.string()) for c in columns)  # type: ignore[misc]


def _chunks(path: Path) -> Iterator[Iterator[tuple[pa.Array, pa.Array, pa.Array]]]:
    """Offer the fast chunk stream; the consumer asks again (slow stream) on _IrregularError."""
    failure = _open_failure(path)
    if failure is not None:
        raise failure
    yield _fast_chunks(path)
    yield _slow_chunks(path)


def _consume(path: Path, consumer: Callable[[Iterator[tuple[pa.Array, ...]]], _T]) -> _T:
    """Run ``consumer`` over the fast chunks, or over the slow ones if the fast reader balks."""
    streams = _chunks(path)
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


def _pairs(enroll: pa.Array, trial: pa.Array) -> pa.Array:
    """'enroll trial' strings: names never hold whitespace, so the space keeps pairs distinct."""
    return pc.binary_join_element_wise(enroll, trial, " ")


_HASH_ROWS = 1 << 16  # strings hashed per step: bounded temporaries


def _hash_strings(strings: pa.Array, seed: int) -> np.ndarray:
    """A 64-bit polynomial hash per string (n,) uint64, vectorised over the bytes. Equal
    strings hash equal; the join checks every hit against the strings themselves."""
    n = len(strings)
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset :][: n + 1]
    data = np.frombuffer(strings.buffers()[2], dtype=np.uint8)
    multiplier = np.uint64(0x100000001B3 + 2 * seed)  # odd: a bijection on each position
    lengths = np.diff(offsets)
    powers = np.cumprod(np.full(int(lengths.max(initial=1)), multiplier, dtype=np.uint64))
    hashes = np.empty(n, dtype=np.uint64)
    for r0 in range(0, n, _HASH_ROWS):
        r1 = min(r0 + _HASH_ROWS, n)
        first, last = int(offsets[r0]), int(offsets[r1])
        starts = offsets[r0:r1] - first
        size = lengths[r0:r1]
        position = np.arange(last - first) - np.repeat(starts, size)
        terms = (data[first:last].astype(np.uint64) + np.uint64(1)) * powers[position]
        h = np.add.reduceat(terms, starts) if terms.size else np.zeros(len(starts), np.uint64)
        h[size == 0] = 0
        h ^= h >> np.uint64(31)
        h *= np.uint64(0x9E3779B97F4A7C15)
        hashes[r0:r1] = h ^ (h >> np.uint64(29))
    return hashes


@dataclass
class _Key:
    """The key, encoded for a join in bounded memory: a 64-bit hash per 'enroll trial' pair,
    sorted, beside the pair strings themselves (every hash hit is checked against them)."""

    pairs: pa.ChunkedArray  # (K,) 'enroll trial' strings
    order: np.ndarray  # (K,) int64: rows sorted by hash (stable: first occurrence first)
    sorted_hashes: np.ndarray  # (K,) uint64
    seed: int  # hash seed under which no two different key pairs collide
    is_target: np.ndarray  # (K,) bool
    is_nontarget: np.ndarray  # (K,) bool
    first_problem: int | None  # first row with a bad label or a repeated pair

    def rows(self, enroll: pa.Array, trial: pa.Array) -> np.ndarray:
        """Key row of each pair (its first occurrence); -1 where the pair is not in the key."""
        pairs = _pairs(enroll, trial)
        hashes = _hash_strings(pairs, self.seed)
        by_hash = np.argsort(hashes)  # sorted needles: the binary searches walk forwards
        pos = np.empty(hashes.size, dtype=np.intp)
        pos[by_hash] = np.searchsorted(self.sorted_hashes, hashes[by_hash])
        np.minimum(pos, self.order.size - 1, out=pos)
        rows = np.where(self.sorted_hashes[pos] == hashes, self.order[pos], -1)
        hit = np.flatnonzero(rows >= 0)
        same = _same_strings(self.pairs, rows[hit], pairs, hit)
        rows[hit[~same]] = -1  # same hash, other pair: not in the key
        return rows


def _same_strings(
    chunked: pa.ChunkedArray, rows: np.ndarray, other: pa.Array, other_rows: np.ndarray
) -> np.ndarray:
    """chunked[rows] == other[other_rows] (bool), taking from one chunk at a time (a take on the
    chunked array itself would first join every chunk into one copy)."""
    bounds = np.cumsum([0] + [len(c) for c in chunked.chunks])
    chunk_of = np.searchsorted(bounds, rows, side="right") - 1
    by_chunk = np.argsort(chunk_of, kind="stable")
    cuts = np.searchsorted(chunk_of[by_chunk], np.arange(len(bounds)))
    same = np.zeros(rows.size, dtype=bool)
    for c in np.unique(chunk_of).tolist():
        inside = by_chunk[cuts[c] : cuts[c + 1]]
        mine = pc.take(chunked.chunks[c], pa.array(rows[inside] - bounds[c]))
        theirs = pc.take(other, pa.array(other_rows[inside]))
        same[inside] = _to_numpy(pc.equal(mine, theirs)).astype(bool)
    return same


def _take(chunked: pa.ChunkedArray, rows: np.ndarray) -> list[str]:
    """chunked[rows] as Python strings (few rows: the tied hashes of the key)."""
    bounds = np.cumsum([0] + [len(c) for c in chunked.chunks])
    found = []
    for row in rows.tolist():
        c = int(np.searchsorted(bounds, row, side="right")) - 1
        found.append(chunked.chunks[c][row - int(bounds[c])].as_py())
    return found


def _sorted_hashes(pairs: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(order, sorted hashes, repeated-row mask) under the first seed where only equal pairs
    share a hash."""
    for seed in range(64):
        hashes = np.concatenate([_hash_strings(c, seed) for c in pairs.chunks])
        order = np.argsort(hashes, kind="stable").astype(
            np.int32 if hashes.size < 2**31 else np.int64
        )
        sorted_hashes = hashes[order]
        del hashes
        tied = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1])
        first, later = order[tied], order[tied + 1]
        equal = _same_strings(pairs, first, pa.array(_take(pairs, later)), np.arange(later.size))
        if equal.all():
            repeated = np.zeros(order.size, dtype=bool)
            repeated[order[tied + 1]] = True
            return order, sorted_hashes, repeated, seed
    raise AssertionError("unreachable: 64 independent 64-bit hashes all collided")


def _read_key(path: Path) -> _Key:
    def consume(stream: Iterator[tuple[pa.Array, ...]]) -> _Key:
        pairs, is_target, is_non = [], [], []
        for enroll, trial, label in stream:
            pairs.append(_pairs(enroll, trial))
            is_target.append(_to_numpy(pc.equal(label, "target")))
            is_non.append(_to_numpy(pc.equal(label, "nontarget")))
        if sum(len(p) for p in pairs) == 0:
            raise InputError(str(path), "empty: no trial lines")
        chunked = pa.chunked_array(pairs, type=pa.string())
        del pairs
        order, sorted_hashes, repeated, seed = _sorted_hashes(chunked)
        is_target, is_non = np.concatenate(is_target), np.concatenate(is_non)
        problem = repeated | ~(is_target | is_non)
        first_problem = int(np.argmax(problem)) if problem.any() else None
        return _Key(chunked, order, sorted_hashes, seed, is_target, is_non, first_problem)

    return _consume(path, consume)


@dataclass
class _Joined:
    """Scores of the key rows, and the first problem row of the score file (if any)."""

    values: np.ndarray  # (K,) float64, NaN where no score was given
    filled: np.ndarray  # (K,) bool
    first_problem: int | None  # a keyed row that repeats a pair or whose score is bad
    problem_token: str | None  # the bad score text (None: a repeated pair)


def _parse_scores(tokens: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """float64 values and a mask of tokens that are not numbers (as Python's float reads them)."""
    try:
        return _to_numpy(pc.cast(tokens, pa.float64())), np.zeros(len(tokens), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        values = np.empty(len(tokens))
        bad = np.zeros(len(tokens), dtype=bool)
        for i, token in enumerate(tokens.to_pylist()):  # only a chunk with a bad token
            try:
                values[i] = float(token)
            except ValueError:
                values[i], bad[i] = math.nan, True
        return values, bad


def _join_scores(path: Path, key: _Key) -> _Joined:
    def consume(stream: Iterator[tuple[pa.Array, ...]]) -> _Joined:
        size = key.is_target.size
        joined = _Joined(np.full(size, np.nan), np.zeros(size, dtype=bool), None, None)
        start = 0
        for enroll, trial, tokens in stream:
            rows = key.rows(enroll, trial)
            keyed = np.flatnonzero(rows >= 0)
            _join_chunk(joined, rows[keyed], keyed, tokens, start)
            start += len(enroll)
            del enroll, trial, tokens
            pa.default_memory_pool().release_unused()  # keep RSS near what is live
        if start == 0:
            raise InputError(str(path), "empty: no trial lines")
        return joined

    return _consume(path, consume)


def _join_chunk(
    joined: _Joined, key_rows: np.ndarray, keyed: np.ndarray, tokens: pa.Array, start: int
) -> None:
    """Store one chunk's keyed scores; remember its first repeated pair or bad score."""
    values, not_number = _parse_scores(pc.take(tokens, pa.array(keyed)))
    repeated = joined.filled[key_rows]
    in_order = np.sort(key_rows)
    if np.any(in_order[1:] == in_order[:-1]):  # a pair twice within the chunk
        _, first = np.unique(key_rows, return_index=True)
        again = np.ones(key_rows.size, dtype=bool)
        again[first] = False
        repeated |= again
    bad = repeated | not_number | ~np.isfinite(values)
    if bad.any() and joined.first_problem is None:
        i = int(np.argmax(bad))
        joined.first_problem = start + int(keyed[i])
        joined.problem_token = None if repeated[i] else tokens[int(keyed[i])].as_py()
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


def _score_problem(path: Path, row: int, token: str | None) -> InputError:
    line, (enroll, trial, _) = _pair_at(path, row)
    if token is None:
        first = _first_row_of_pair(path, [enroll, trial])
        return InputError(str(path), f"pair {enroll} {trial} repeats line {first}", line=line)
    _finite_float(token, str(path), line, "score")
    raise AssertionError(f"unreachable: {token!r} was found not to be a finite number")


def read_scores_key(scores_path: str | Path, key_path: str | Path) -> PairScores:
    """Join a score file and a key file on (enroll, trial) (DESIGN §3.7).

    Score lines whose pair is not in the key are ignored; a key line without a score, a
    duplicated pair, a bad label or a non-finite score raises InputError. Both files are
    streamed in chunks by pyarrow's CSV reader and joined on int64 pair codes, so memory grows
    with the key only (about 50 bytes a key line); line numbers are looked up again only
    to name a problem.
    """
    scores_path, key_path = Path(scores_path), Path(key_path)
    key = _read_key(key_path)
    joined = _join_scores(scores_path, key)
    if key.first_problem is not None:
        raise _key_problem(key_path, key.first_problem)
    if joined.first_problem is not None:
        raise _score_problem(scores_path, joined.first_problem, joined.problem_token)
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
