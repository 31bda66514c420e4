"""Score matrices for 1-to-N evaluation and the true identity of each trial: a (T, N) matrix
(T trials × N identities, ``.npy`` or ``.csv``) and T identity indices (``.npy``, ``.csv`` or
``.txt``). Every problem is an InputError naming the file (and line or entry) and the problem.

Pooled 1-to-1 trial files (score file and key) are read by :mod:`monitor.scorefiles.trials`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from monitor.errors import InputError
from monitor.numerals import ascii_int
from monitor.scorefiles.trial_text import finite_float, shown
from monitor.userfiles import bounded_lines, regular_file

_SEPARATORS = re.compile(r"[,\s]+")
MAX_ROW_BYTES = 1 << 24
"""A text row of a matrix or truth file: 16 MiB (a million and more scores or indices on one
line); longer lines are refused, so no file can make one line fill the memory."""


def _load_npy(path: Path) -> np.ndarray:
    """An .npy array, its header checked before any memory is allocated.

    A renamed .npz (a zip archive), a header whose shape needs more bytes than the file holds,
    or an object array is refused with one line; the data are memory-mapped, never read twice.
    """
    regular_file(path)
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
    path = regular_file(path)
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
    return _read_csv_matrix(path)


def _read_csv_matrix(path: Path) -> np.ndarray:
    """Comma-separated rows, one numpy row each as it is read (8 bytes an entry, no Python
    float per entry kept); a row is at most MAX_ROW_BYTES."""
    rows: list[np.ndarray] = []
    width = None
    for number, text in _text_lines(path):
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
        rows.append(_finite_row(fields, str(path), number))
    if not rows:
        raise InputError(str(path), "empty: no rows")
    return np.stack(rows)


def _finite_row(fields: list[str], source: str, line: int) -> np.ndarray:
    """(n,) float64 of a row's fields; InputError naming the first bad one."""
    try:
        row = np.array(fields, dtype=np.float64)
    except ValueError:
        row = None
    if row is None or not np.isfinite(row).all():
        for field in fields:
            finite_float(field, source, line, "score")
        raise AssertionError(f"unreachable: a field of line {line} was found bad")
    return row


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines of a matrix or truth text file, each at most MAX_ROW_BYTES."""
    try:
        yield from bounded_lines(path, max_bytes=MAX_ROW_BYTES)
    except UnicodeDecodeError:
        raise InputError(str(path), "not a UTF-8 text file") from None


def _read_truth_lines(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Truth indices and, for text files, the line each index came from."""
    if _suffix(regular_file(path), (".npy", ".csv", ".txt")) == ".npy":
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
    values: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    for number, text in _text_lines(path):
        tokens = [token for token in _SEPARATORS.split(text.strip()) if token]
        if tokens:
            values.append(_indices(tokens, str(path), number))
            lines.append(np.full(len(tokens), number))
    if not values:
        raise InputError(str(path), "empty: no trials")
    return np.concatenate(values), np.concatenate(lines)


def _indices(tokens: list[str], source: str, line: int) -> np.ndarray:
    """(n,) int64 of a line's identity indices; InputError naming the first that is not one."""
    parsed = []
    for token in tokens:
        try:
            parsed.append(ascii_int(token))
        except ValueError:
            raise InputError(
                source, f"{shown(token)} is not an integer identity index", line=line
            ) from None
    try:
        return np.array(parsed, dtype=np.int64)
    except OverflowError:
        i = next(i for i, v in enumerate(parsed) if not -(2**63) <= v < 2**63)
        raise InputError(
            source, f"identity index {shown(tokens[i])} is out of range", line=line
        ) from None


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
