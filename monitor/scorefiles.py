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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from monitor.errors import InputError

LABELS = {"target": True, "nontarget": False}
_SEPARATORS = re.compile(r"[,\s]+")


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


def _three_fields(path: Path) -> list[tuple[int, list[str]]]:
    """Non-blank lines of a Kaldi-style trial file as (line number, [3 fields])."""
    rows = []
    for number, text in enumerate(_read_text(path), start=1):
        fields = text.split()
        if not fields:
            continue
        if len(fields) != 3:
            raise InputError(
                str(path), f"expected 3 fields 'enroll trial value', got {len(fields)}", line=number
            )
        rows.append((number, fields))
    if not rows:
        raise InputError(str(path), "empty: no trial lines")
    return rows


def read_scores_key(scores_path: str | Path, key_path: str | Path) -> PairScores:
    """Join a score file and a key file on (enroll, trial) (DESIGN §3.7).

    Score lines whose pair is not in the key are ignored; a key line without a score, a
    duplicated pair, a bad label or a non-finite score raises InputError.
    """
    scores_path, key_path = Path(scores_path), Path(key_path)
    key_rows = _three_fields(key_path)
    score_rows = _three_fields(scores_path)
    labels: dict[tuple[str, str], tuple[bool, int]] = {}
    for number, (enroll, trial, label) in key_rows:
        if label not in LABELS:
            raise InputError(
                str(key_path), f"label {label!r} is not 'target' or 'nontarget'", line=number
            )
        if (enroll, trial) in labels:
            first = labels[(enroll, trial)][1]
            raise InputError(
                str(key_path), f"pair {enroll} {trial} repeats line {first}", line=number
            )
        labels[(enroll, trial)] = (LABELS[label], number)
    scores: dict[tuple[str, str], float] = {}
    seen_at: dict[tuple[str, str], int] = {}
    for number, (enroll, trial, token) in score_rows:
        pair = (enroll, trial)
        if pair not in labels:
            continue
        if pair in scores:
            raise InputError(
                str(scores_path), f"pair {enroll} {trial} repeats line {seen_at[pair]}", line=number
            )
        scores[pair] = _finite_float(token, str(scores_path), number, "score")
        seen_at[pair] = number
    tar, non = [], []
    for pair, (is_target, number) in labels.items():
        if pair not in scores:
            raise InputError(
                str(key_path),
                f"no score for pair {pair[0]} {pair[1]} in {scores_path}",
                line=number,
            )
        (tar if is_target else non).append(scores[pair])
    if not tar or not non:
        missing = "target" if not tar else "nontarget"
        raise InputError(str(key_path), f"no {missing} trials: both classes are needed")
    return PairScores(np.array(tar), np.array(non))


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
    """Score matrix (T, N) float64 from ``.npy`` or ``.csv`` (comma-separated rows, no header).

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
        matrix = array.astype(np.float64)
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
