"""Score-file readers: the join of the ZEBRA format, matrix/truth formats, and their errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.errors import InputError
from monitor.scorefiles.matrix_files import read_matrix, read_matrix_trials, read_truth
from monitor.scorefiles.trials import read_scores_key


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_join_on_enroll_and_trial_ignores_unkeyed_scores(tmp_path):
    scores = write(
        tmp_path / "s.txt",
        "spk1 utt1 2.5\nspk1 utt2 -1.0\n\nspk2 utt1 0.25\nspk9 uttX 99\n",
    )
    key = write(
        tmp_path / "k.txt",
        "spk2 utt1 nontarget\nspk1 utt1 target\nspk1 utt2 nontarget\n",
    )
    pairs = read_scores_key(scores, key)
    np.testing.assert_array_equal(pairs.tar, [2.5])
    np.testing.assert_array_equal(np.sort(pairs.non), [-1.0, 0.25])


def test_a_byte_order_mark_is_not_part_of_the_first_name(tmp_path):
    # Files saved by Windows editors start with U+FEFF; the first pair must still join.
    scores = write(tmp_path / "s.txt", "\ufeffspk1 utt1 2.5\nspk1 utt2 -1.0\n")
    key = write(tmp_path / "k.txt", "\ufeffspk1 utt1 target\nspk1 utt2 nontarget\n")
    pairs = read_scores_key(scores, key)
    assert pairs.tar.tolist() == [2.5] and pairs.non.tolist() == [-1.0]
    matrix = write(tmp_path / "M.csv", "\ufeff1,2\n3,4\n")
    np.testing.assert_array_equal(read_matrix(matrix), [[1, 2], [3, 4]])


@pytest.mark.parametrize(
    ("scores", "key", "where", "problem"),
    [
        ("a b 1\n", "a b target\na c nontarget\n", "k.txt:2", "no score for pair a c"),
        ("a b 1\na c 2\n", "a b target\na c nontraget\n", "k.txt:2", "label 'nontraget'"),
        ("a b nan\na c 2\n", "a b target\na c nontarget\n", "s.txt:1", "not a finite number"),
        ("a b x\na c 2\n", "a b target\na c nontarget\n", "s.txt:1", "'x' is not a number"),
        ("a b 1 7\n", "a b target\n", "s.txt:1", "expected 3 fields"),
        ("a b 1\na c 2\n", "a b target\na c target\n", "k.txt", "no nontarget trials"),
        ("a b 1\na b 2\na c 2\n", "a b target\na c nontarget\n", "s.txt:2", "repeats line 1"),
        ("a b 1\na c 2\n", "a b target\na b nontarget\n", "k.txt:2", "repeats line 1"),
        ("", "a b target\n", "s.txt", "empty"),
    ],
)
def test_pair_errors_name_file_and_line(tmp_path, scores, key, where, problem):
    s = write(tmp_path / "s.txt", scores)
    k = write(tmp_path / "k.txt", key)
    with pytest.raises(InputError) as info:
        read_scores_key(s, k)
    message = str(info.value)
    assert message.startswith(str(tmp_path / where)), message
    assert problem in message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_scores_key(tmp_path / "nope.txt", write(tmp_path / "k.txt", "a b target\n"))
    with pytest.raises(InputError, match="no such file"):
        read_matrix(tmp_path / "nope.npy")
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(InputError, match="directory"):
        read_truth(tmp_path / "dir.txt")


def test_matrix_formats_agree(tmp_path):
    M = np.array([[0.9, 0.1, 0.3], [0.2, 0.8, -1.5]])
    np.save(tmp_path / "m.npy", M)
    write(tmp_path / "m.csv", "0.9, 0.1, 0.3\n0.2,0.8,-1.5\n")
    np.testing.assert_array_equal(read_matrix(tmp_path / "m.npy"), M)
    np.testing.assert_array_equal(read_matrix(tmp_path / "m.csv"), M)


def test_truth_formats_agree(tmp_path):
    np.save(tmp_path / "t.npy", np.array([2, 0, 1]))
    np.save(tmp_path / "f.npy", np.array([2.0, 0.0, 1.0]))
    write(tmp_path / "t.txt", "2\n0\n1\n")
    write(tmp_path / "t.csv", "2,0,1\n")
    for name in ("t.npy", "f.npy", "t.txt", "t.csv"):
        np.testing.assert_array_equal(read_truth(tmp_path / name), [2, 0, 1])


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("1,2\n3\n", 2, "ragged row"),
        ("1,2\n3,nan\n", 2, "not a finite number"),
        ("1,2\n3,abc\n", 2, "'abc' is not a number"),
    ],
)
def test_matrix_csv_errors(tmp_path, text, line, problem):
    path = write(tmp_path / "m.csv", text)
    with pytest.raises(InputError, match=problem) as info:
        read_matrix(path)
    assert str(info.value).startswith(f"{path}:{line}:")


def test_matrix_npy_errors(tmp_path):
    bad = np.ones((3, 4))
    bad[2, 1] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(InputError, match="row 2, column 1"):
        read_matrix(tmp_path / "nan.npy")
    np.save(tmp_path / "vec.npy", np.ones(4))
    with pytest.raises(InputError, match="2-D"):
        read_matrix(tmp_path / "vec.npy")
    np.save(tmp_path / "empty.npy", np.ones((0, 4)))
    with pytest.raises(InputError, match="empty"):
        read_matrix(tmp_path / "empty.npy")
    write(tmp_path / "garbage.npy", "not numpy")
    with pytest.raises(InputError, match="not a readable"):
        read_matrix(tmp_path / "garbage.npy")
    write(tmp_path / "empty.csv", "\n\n")
    with pytest.raises(InputError, match="empty"):
        read_matrix(tmp_path / "empty.csv")
    with pytest.raises(InputError, match="unsupported file type"):
        read_matrix(write(tmp_path / "m.json", "[]"))


def test_truth_errors(tmp_path):
    np.save(tmp_path / "m.npy", np.ones((3, 4)))
    write(tmp_path / "frac.txt", "0\n1.5\n2\n")
    with pytest.raises(InputError, match=r"'1\.5' is not an integer") as info:
        read_truth(tmp_path / "frac.txt")
    assert str(info.value).startswith(f"{tmp_path / 'frac.txt'}:2:")
    np.save(tmp_path / "frac.npy", np.array([0.0, 0.5, 1.0]))
    with pytest.raises(InputError, match=r"entry 1: 0\.5 is not an integer"):
        read_truth(tmp_path / "frac.npy")
    write(tmp_path / "range.txt", "0\n1\n\n4\n")
    with pytest.raises(InputError, match=r"identity index 4 is outside \[0, 4\)") as info:
        read_matrix_trials(tmp_path / "m.npy", tmp_path / "range.txt")
    assert str(info.value).startswith(f"{tmp_path / 'range.txt'}:4:")
    write(tmp_path / "short.txt", "0 1\n")
    with pytest.raises(InputError, match="2 truth indices for 3 trials"):
        read_matrix_trials(tmp_path / "m.npy", tmp_path / "short.txt")
    np.save(tmp_path / "one.npy", np.ones((3, 1)))
    write(tmp_path / "zeros.txt", "0 0 0")
    with pytest.raises(InputError, match="need at least 2"):
        read_matrix_trials(tmp_path / "one.npy", tmp_path / "zeros.txt")


def _reference_join(scores: str, key: str) -> tuple[list[float], list[float]]:
    """Obviously correct join of two texts (the former line parser, without error checks)."""
    given = {}
    for line in scores.splitlines():
        if line.split():
            enroll, trial, value = line.split()
            given[(enroll, trial)] = value
    tar, non = [], []
    for line in key.splitlines():
        if line.split():
            enroll, trial, label = line.split()
            (tar if label == "target" else non).append(float(given[(enroll, trial)]))
    return tar, non


@pytest.mark.parametrize("block_bytes", [64, 1 << 25])
@pytest.mark.parametrize("separator", [" ", "\t", "mixed"])
def test_streamed_join_matches_the_line_parser(tmp_path, monkeypatch, block_bytes, separator):
    # Small blocks put chunk boundaries everywhere; tabs and mixed whitespace take the other
    # delimiter and the line-by-line path; blank lines and unkeyed scores are sprinkled in.
    import monitor.scorefiles.trial_text as trial_text

    monkeypatch.setattr(trial_text, "_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(7)
    n = 500
    pairs = [(f"e{rng.integers(20)}", f"t{i}") for i in range(n)]
    values = rng.normal(size=n).round(6).tolist()

    def sep(i: int) -> str:
        return ("  " if i % 3 else "\t") if separator == "mixed" else separator

    score_lines = [
        f"{e}{sep(i)}{t}{sep(i)}{v!r}"
        for i, ((e, t), v) in enumerate(zip(pairs, values, strict=True))
    ]
    score_lines.insert(100, "")
    score_lines.insert(200, f"x{sep(0)}y{sep(0)}not-a-number")  # unkeyed: never parsed
    order = rng.permutation(n)[: n - 50]
    key_lines = [
        f"{pairs[i][0]}{sep(i)}{pairs[i][1]}{sep(i)}{'target' if i % 4 == 0 else 'nontarget'}"
        for i in order
    ]
    key_lines.insert(10, "   ")
    scores_text, key_text = "\n".join(score_lines) + "\n", "\n".join(key_lines) + "\n"
    joined = read_scores_key(
        write(tmp_path / "s.txt", scores_text), write(tmp_path / "k.txt", key_text)
    )
    tar, non = _reference_join(scores_text, key_text)
    assert joined.tar.tolist() == tar and joined.non.tolist() == non


@pytest.mark.parametrize(
    ("scores", "where", "problem"),
    [
        ("a b 1\n" + "\nq r 2\n" * 40 + "a b 3\n", "s.txt:82", "pair a b repeats line 1"),
        ("a b 1\n" + "q r 1\n" * 80 + "\nb c inf\n", "s.txt:83", "'inf' is not a finite"),
        ("a b 1\n" + "q r 1\n" * 80 + "b c 1 2\n", "s.txt:82", "expected 3 fields"),
    ],
)
def test_errors_far_into_a_streamed_file_name_the_line(
    tmp_path, monkeypatch, scores, where, problem
):
    import monitor.scorefiles.trial_text as trial_text

    monkeypatch.setattr(trial_text, "_BLOCK_BYTES", 64)
    s = write(tmp_path / "s.txt", scores)
    k = write(tmp_path / "k.txt", "a b target\nb c nontarget\n")
    with pytest.raises(InputError) as info:
        read_scores_key(s, k)
    assert str(info.value).startswith(f"{tmp_path / where}:"), str(info.value)
    assert problem in str(info.value)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    (tmp_path / "s.txt").write_bytes(b"a b 1\n\xff\xfe c 2\n")
    k = write(tmp_path / "k.txt", "a b target\n")
    with pytest.raises(InputError, match="not a UTF-8 text file"):
        read_scores_key(tmp_path / "s.txt", k)


def test_pairs_that_share_a_hash_are_told_apart(tmp_path, monkeypatch):
    # A hash with only 997 values: key pairs collide at some seeds (another seed is taken) and
    # thousands of unkeyed score pairs share a key pair's hash (the strings tell them apart).
    import monitor.scorefiles.trials as trials

    strong = trials.pair_hashes
    monkeypatch.setattr(
        trials,
        "pair_hashes",
        lambda pairs, seed: strong(pairs, seed) % np.uint64(997),
    )
    key_lines = [f"e{i} t{i} {'target' if i % 2 else 'nontarget'}" for i in range(30)]
    score_lines = [f"e{i} t{i} {i}.5" for i in range(30)]
    score_lines += [f"x{i} y{i} 1e9" for i in range(5000)]  # never keyed
    joined = read_scores_key(
        write(tmp_path / "s.txt", "\n".join(score_lines[::-1]) + "\n"),
        write(tmp_path / "k.txt", "\n".join(key_lines) + "\n"),
    )
    assert joined.tar.tolist() == [i + 0.5 for i in range(1, 30, 2)]
    assert joined.non.tolist() == [i + 0.5 for i in range(0, 30, 2)]


def test_key_chunks_with_longer_names_or_shorter_lines_later(tmp_path, monkeypatch):
    # Tiny blocks: the first chunks have long lines (few rows guessed for the file), later
    # ones short lines (the key block grows) and then longer names (the key block widens).
    import monitor.scorefiles.trial_text as trial_text

    monkeypatch.setattr(trial_text, "_BLOCK_BYTES", 256)
    names = [(f"enroll-{'x' * 30}-{i}", f"trial-{'y' * 30}-{i}") for i in range(20)]
    names += [(f"e{i}", f"t{i}") for i in range(3000)]
    names += [(f"e{i}-{'z' * 70}", f"t{i}-{'w' * 90}") for i in range(40)]
    key_text = "".join(
        f"{e} {t} {'target' if i % 3 == 0 else 'nontarget'}\n" for i, (e, t) in enumerate(names)
    )
    scores_text = "".join(f"{e} {t} {i}.25\n" for i, (e, t) in reversed(list(enumerate(names))))
    joined = read_scores_key(
        write(tmp_path / "s.txt", scores_text), write(tmp_path / "k.txt", key_text)
    )
    tar, non = _reference_join(scores_text, key_text)
    assert joined.tar.tolist() == tar and joined.non.tolist() == non


@pytest.mark.parametrize(
    ("scores", "problem"),
    [
        ("a b 1\n c 2\n", "s.txt:2: expected 3 fields 'enroll trial value', got 2"),  # '' name
        ("a b 1\na c 0x10\n", "s.txt:2: score '0x10' is not a number"),  # arrow refuses it
        ("a b 1\na c \n", "s.txt:2: expected 3 fields 'enroll trial value', got 2"),
    ],
)
def test_lines_the_fast_reader_balks_at_are_judged_line_by_line(tmp_path, scores, problem):
    s = write(tmp_path / "s.txt", scores)
    k = write(tmp_path / "k.txt", "a b target\na c nontarget\n")
    with pytest.raises(InputError) as info:
        read_scores_key(s, k)
    assert str(info.value) == f"{tmp_path / problem}"


def test_names_that_differ_only_by_trailing_nul_bytes_are_different_pairs(tmp_path):
    # Names become zero-padded 64-bit words; the lengths keep "a" and "a\0" apart.
    key = write(tmp_path / "k.txt", "a b target\na\0 b nontarget\na b\0\0 nontarget\n")
    scores = write(tmp_path / "s.txt", "a b\0\0 3.0\na\0 b 2.0\na b 1.0\n")
    joined = read_scores_key(scores, key)
    assert joined.tar.tolist() == [1.0] and joined.non.tolist() == [2.0, 3.0]
