"""Reading the text of a trial file (``enroll trial value`` lines: scores or key labels) in
chunks of three arrow columns, fast or line by line, and finding lines again for messages.

The fast reader is pyarrow's streaming CSV reader (parsing on its threads). When it balks — mixed
whitespace, a bad line, bad UTF-8, an empty name, a score arrow does not read, a line over
:data:`~monitor.userfiles.MAX_LINE_BYTES` — the file is read again line by line, which finds and
names the exact problem. Either way memory holds one chunk and lines are bounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from monitor.errors import InputError
from monitor.numerals import ascii_float
from monitor.userfiles import MAX_LINE_BYTES, bounded_lines, regular_file

_T = TypeVar("_T")

# 2 MB of text (~6.6·10^4 trial lines) per streamed chunk: the per-chunk arrays stay small enough
# to be reused by the allocator and cached (as fast as 4-8 MB chunks, 30-70 MB less peak RSS).
_BLOCK_BYTES = 1 << 21
_FIELDS = ("enroll", "trial", "value")
_SLOW_ROWS = 1 << 17  # lines per chunk of the line-by-line reader (fewer when lines are long)

Chunk = tuple[pa.Array, pa.Array, pa.Array]
LABEL_TYPE = pa.dictionary(pa.int32(), pa.string())  # a key's third column: a few distinct words


def finite_float(token: str, source: str, line: int, what: str) -> float:
    """``token`` as a finite float, else InputError naming the file and line."""
    try:
        value = ascii_float(token)
    except ValueError:
        raise InputError(source, f"{what} {shown(token)} is not a number", line=line) from None
    if not math.isfinite(value):
        raise InputError(source, f"{what} {shown(token)} is not a finite number", line=line)
    return value


def shown(text: str, limit: int = 60) -> str:
    """``repr(text)``, cut to about ``limit`` characters: a message stays one readable line."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text):,} characters)"


class IrregularError(Exception):
    """A file the fast reader cannot take as it is: it is read again line by line."""


def _open_problem(path: Path) -> None:
    """InputError unless ``path`` is a regular file this process can open."""
    regular_file(path)
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise InputError(str(path), f"cannot read: {error.strerror or error}") from None


def _delimiter(path: Path) -> str:
    """Tab when the first line is tab-separated, else a single space (Kaldi)."""
    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
    first = next((line for line in head.splitlines() if line.strip()), b"")
    return "\t" if b"\t" in first else " "


def _fast_chunks(path: Path, third: pa.DataType) -> Iterator[Chunk]:
    """(enroll, trial, third) columns in chunks, by pyarrow's streaming CSV reader (parsing on
    its threads); the third column is typed ``third`` (float64 scores, dictionary labels).

    Raises IrregularError at the first line that is not exactly three single-delimited fields,
    whose third field does not convert (no null values: an empty field is an error) or whose
    names alone are longer than a line may be. (No invalid-row handler: pyarrow decodes the
    row's text for it, and bad UTF-8 there printed an "Exception ignored" traceback.)
    """
    string = pa.string()
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(column_names=_FIELDS, block_size=_BLOCK_BYTES),
            parse_options=pacsv.ParseOptions(delimiter=_delimiter(path), quote_char=False),
            convert_options=pacsv.ConvertOptions(
                column_types={"enroll": string, "trial": string, "value": third},
                strings_can_be_null=False,
                null_values=[],
            ),
        )
        for batch in _read_ahead(reader):
            enroll, trial = batch.column(0), batch.column(1)
            if _longest_pair(enroll, trial) > MAX_LINE_BYTES:
                raise IrregularError("a line longer than a line may be")
            yield enroll, trial, batch.column(2)
    except pa.ArrowInvalid as error:
        raise IrregularError(str(error)) from None


def _longest_pair(enroll: pa.Array, trial: pa.Array) -> int:
    """Bytes of the longest enroll and trial names of a line together (0 for no lines)."""
    if len(enroll) == 0:
        return 0
    lengths = [
        np.diff(
            np.frombuffer(s.buffers()[1], dtype=np.int32, count=len(s) + 1, offset=4 * s.offset)
        )
        for s in (enroll, trial)
    ]
    return int((lengths[0] + lengths[1]).max())


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


def _slow_chunks(path: Path, third: pa.DataType) -> Iterator[Chunk]:
    """The same chunks read line by line (each line at most MAX_LINE_BYTES, a chunk at most
    about _BLOCK_BYTES of text); names the first line that is not 3 fields. Scores are read by
    Python's float (NaN where they are not numbers)."""
    columns: tuple[list[str], list[str], list[str]] = ([], [], [])
    held = 0

    def chunk() -> Chunk:
        enroll, trial, tokens = columns
        if third == LABEL_TYPE:
            words = {word: code for code, word in enumerate(dict.fromkeys(tokens))}
            codes = pa.array([words[t] for t in tokens], pa.int32())
            labels = pa.DictionaryArray.from_arrays(codes, pa.array(list(words), pa.string()))
            return pa.array(enroll, pa.string()), pa.array(trial, pa.string()), labels
        values = pa.array([_python_float(t) for t in tokens], pa.float64())
        return pa.array(enroll, pa.string()), pa.array(trial, pa.string()), values

    try:
        for number, text in bounded_lines(path):
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
            held += len(text)
            if len(columns[0]) == _SLOW_ROWS or held >= _BLOCK_BYTES:
                yield chunk()
                columns, held = ([], [], []), 0
    except UnicodeDecodeError:
        raise InputError(str(path), "not a UTF-8 text file") from None
    if columns[0]:
        yield chunk()


def consume_chunks(path: Path, third: pa.DataType, consumer: Callable[[Iterator[Chunk]], _T]) -> _T:
    """Run ``consumer`` over the fast chunks of ``path``, or over the line-by-line ones if the
    fast reader balks (the consumer starts again from the first chunk)."""
    _open_problem(path)
    try:
        return consumer(_fast_chunks(path, third))
    except IrregularError:
        return consumer(_slow_chunks(path, third))


def row_lines(path: Path, rows: Iterable[int]) -> dict[int, int]:
    """Line number (1-based) of each 0-based row index, rows being the non-blank lines (of a
    file a reader above accepted: bounded lines of UTF-8)."""
    wanted = sorted(set(rows))
    found: dict[int, int] = {}
    if not wanted:
        return found
    row = -1
    for number, text in bounded_lines(path):
        if not text.split():
            continue
        row += 1
        if row == wanted[len(found)]:
            found[row] = number
            if len(found) == len(wanted):
                break
    return found


def pair_at(path: Path, row: int) -> tuple[int, list[str]]:
    """Line number and fields of a 0-based row (for messages only)."""
    line = row_lines(path, [row])[row]
    for number, text in bounded_lines(path):
        if number == line:
            return line, text.split()
    raise AssertionError("unreachable: the row was just found")


def first_line_of_pair(path: Path, pair: list[str]) -> int:
    """Line number of the first line holding the pair (for the 'repeats line' message)."""
    for number, text in bounded_lines(path):
        if text.split()[:2] == pair:
            return number
    raise AssertionError("unreachable: the pair was just read")
