"""(enroll, trial) name pairs as rows of 64-bit words and 64-bit hashes, for an exact join of a
score file with its key in numpy (:mod:`monitor.scorefiles.trials`) without a Python string per
line.

A name longer than ``MAX_NAME_WORDS`` words keeps its first words and a 128-bit BLAKE2b digest
of the whole name in its last two: a row stays at most ``2 · MAX_NAME_WORDS + 1`` words however
long one name in the file is (a 1 MB name took 1.4 GB when every row was as wide as it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from monitor.scorefiles.trial_text import IrregularError

MAX_NAME_WORDS = 32
"""Words (8 bytes each) of a name kept as they are; longer names end in a digest instead."""
_DIGEST_WORDS = 2

_ONE = np.uint64(1)


@dataclass
class Pairs:
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

    def take(self, index: np.ndarray) -> Pairs:
        return Pairs(self.rows[index], self.enroll_width)

    def equal(self, other: Pairs) -> np.ndarray:
        """(n,) bool: the same pair, row by row (both in the same widths)."""
        return np.asarray((self.rows == other.rows).all(axis=1))


def _words(strings: pa.Array, out: np.ndarray) -> np.ndarray:
    """Write the names of an arrow string array as words into the columns of ``out`` (n, W):
    W words each, zero-padded; a longer name is cut (its length still tells it apart), and at
    the widest (MAX_NAME_WORDS) ends in a digest of the whole name. Returns
    the lengths (n,) int32.

    Raises IrregularError for an empty name (a line the line-by-line reader must judge).
    """
    offsets = _offsets(strings)
    lengths = np.diff(offsets)
    if not lengths.all():
        raise IrregularError("an empty name")
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
    if width == MAX_NAME_WORDS and longest > 8 * width:
        _digest_long_names(data, starts, lengths, out)
    return lengths


def _digest_long_names(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray
) -> None:
    """Overwrite the last words of each name longer than ``out``'s width with a BLAKE2b digest of
    the whole name (equal names, equal rows; different ones collide with chance 2⁻¹²⁸)."""
    width = out.shape[1]
    for row in np.flatnonzero(lengths > 8 * width):
        name = data[starts[row] : starts[row] + lengths[row]].tobytes()
        digest = hashlib.blake2b(name, digest_size=8 * _DIGEST_WORDS).digest()
        out[row, width - _DIGEST_WORDS :] = np.frombuffer(digest, dtype=np.uint64)


def pairs_of(
    enroll: pa.Array, trial: pa.Array, widths: tuple[int, int], out: np.ndarray | None = None
) -> Pairs:
    """A chunk's pairs as rows of words in ``widths``, written into ``out`` if given."""
    n = len(enroll)
    rows = np.empty((n, widths[0] + widths[1] + 1), dtype=np.uint64) if out is None else out
    if n == 0:
        return Pairs(rows, widths[0])
    enroll_lengths = _words(enroll, rows[:, : widths[0]])
    trial_lengths = _words(trial, rows[:, widths[0] : -1])
    np.bitwise_or(
        enroll_lengths.astype(np.uint64) << np.uint64(32),
        trial_lengths.astype(np.uint64),
        out=rows[:, -1],
    )
    return Pairs(rows, widths[0])


def _offsets(strings: pa.Array) -> np.ndarray:
    """(n + 1,) int32: where each name of an arrow string array starts in its data buffer."""
    return np.frombuffer(
        strings.buffers()[1], dtype=np.int32, count=len(strings) + 1, offset=4 * strings.offset
    )


def name_bytes(strings: pa.Array) -> int:
    """Bytes of all the names together."""
    offsets = _offsets(strings)
    return int(offsets[-1] - offsets[0])


def longest_words(strings: pa.Array) -> int:
    """Words (8 bytes each) a row needs for the longest name: at least 1, at most
    MAX_NAME_WORDS."""
    return min(MAX_NAME_WORDS, max(1, (int(np.diff(_offsets(strings)).max()) + 7) // 8))


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


def pair_hashes(pairs: Pairs, seed: int) -> np.ndarray:
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
