"""``voxmeter score`` and ``voxmeter compose`` end to end through the CLI (typer's CliRunner)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from monitor.cli import app
from tests.disclosure.examples import M4, NON, S4, TAR


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def run_json(*args: str):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def four_by_four(tmp_path: Path) -> tuple[Path, Path]:
    np.save(tmp_path / "M.npy", S4)
    np.save(tmp_path / "T.npy", M4)
    return tmp_path / "M.npy", tmp_path / "T.npy"


def check_four_by_four(out: dict) -> None:
    assert out["EER"] == pytest.approx(0.5)
    assert out["EER_rocch"] == pytest.approx(0.375)
    assert out["min_Cllr"] == pytest.approx(0.75)
    assert out["zebra"]["D_ECE"] == pytest.approx(0.180337, abs=1e-6)
    assert out["zebra"]["log10_lr_max"] == pytest.approx(0.77815, abs=1e-5)
    assert out["zebra"]["tag"] == "A"
    assert out["top1_linkage"] == 1.0
    srd = out["srd"]
    assert (srd["MeanD"], srd["MaxD"], srd["IdR"], srd["StDD"], srd["Spread"], srd["N"]) == (
        pytest.approx(2.0),
        pytest.approx(2.0),
        pytest.approx(1.0),
        pytest.approx(0.0),
        pytest.approx(0.25),
        4,
    )
    assert set(srd["fit"]) == {
        "loss",
        "alpha",
        "beta",
        "KL_bits",
        "rank1_match_bits",
        "MeanD",
        "IdR",
        "MaxD",
        "StDD",
        "Spread",
    }
    assert srd["fit"]["IdR"] == pytest.approx(1.0, abs=1e-6)
    # LID- is undefined when every trial discloses (NaN -> null); linkability needs 10 mated.
    assert out["lid"]["LID_minus"] is None
    assert out["linkability"] is None


def test_paper003_matrix_through_the_cli(four_by_four):
    M, T = four_by_four
    out = run_json("score", "--matrix", str(M), "--truth", str(T))
    check_four_by_four(out)
    assert set(out) >= {
        "srd",
        "lid",
        "zebra",
        "EER",
        "EER_rocch",
        "Cllr",
        "min_Cllr",
        "linkability",
    }
    assert out["lid"]["calibrated_on"] == "eval"
    lid_keys = {"ALID", "PDR", "NDR", "LID_plus", "LID_minus", "LID_max", "weight", "bias"}
    assert set(out["lid"]) >= lid_keys
    assert set(out["srd"]) == {"MeanD", "IdR", "MaxD", "StDD", "Spread", "N", "fit"}
    assert set(out["zebra"]) == {"D_ECE", "log10_lr_max", "tag"}


def test_csv_and_txt_inputs_give_the_same_report(tmp_path, four_by_four):
    (tmp_path / "M.csv").write_text("\n".join(",".join(f"{v}" for v in row) for row in S4))
    (tmp_path / "T.txt").write_text("0\n0\n1\n2\n")
    out = run_json("score", "--matrix", str(tmp_path / "M.csv"), "--truth", str(tmp_path / "T.txt"))
    check_four_by_four(out)


def test_given_weight_reproduces_the_worked_lid(four_by_four):
    M, T = four_by_four
    out = run_json(
        "score", "--matrix", str(M), "--truth", str(T), "--lid-weight", "1", "--lid-bias", "0"
    )
    # §7.4: z_target = sqrt 3, others -1/sqrt 3, so w = 1 gives 1.62375 bits on every row.
    assert out["lid"]["ALID"] == pytest.approx(1.62375, abs=1e-5)
    assert out["lid"]["LID_max"] == pytest.approx(1.62375, abs=1e-5)
    assert out["lid"]["PDR"] == 1.0
    assert out["lid"]["calibrated_on"] == "given"
    # Cllr on the calibrated LLRs w·z + b + ln(N - 1): check against a direct computation.
    z_t, z_n = math.sqrt(3), -1 / math.sqrt(3)
    prior = math.log(3)
    expected = 0.5 * (
        math.log2(1 + math.exp(-(z_t + prior))) + math.log2(1 + math.exp(z_n + prior))
    )
    assert out["Cllr"] == pytest.approx(expected, rel=1e-9)


def test_human_output_says_where_the_calibration_came_from(four_by_four):
    M, T = four_by_four
    result = run("score", "--matrix", str(M), "--truth", str(T))
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "EVALUATION matrix itself" in text
    for snippet in ("50.00 %", "37.50 %", "100.00 %", "0.180 bits", "(A)", "MeanD", "α, β"):
        assert snippet in text, snippet


def test_dev_matrix_calibration(tmp_path):
    rng = np.random.default_rng(5)

    def simulate(T: int, N: int) -> tuple[np.ndarray, np.ndarray]:
        truth = rng.integers(0, N, T)
        S = rng.normal(0.0, 1.0, (T, N))
        S[np.arange(T), truth] += 2.0
        return S, truth

    for name, (S, truth) in {"dev": simulate(300, 30), "eval": simulate(200, 25)}.items():
        np.save(tmp_path / f"{name}_M.npy", S)
        np.save(tmp_path / f"{name}_T.npy", truth)
    out = run_json(
        "score",
        *("--matrix", str(tmp_path / "eval_M.npy"), "--truth", str(tmp_path / "eval_T.npy")),
        *("--dev-matrix", str(tmp_path / "dev_M.npy"), "--dev-truth", str(tmp_path / "dev_T.npy")),
        *("--fit-loss", "ll"),
    )
    assert out["lid"]["calibrated_on"] == "dev"
    assert out["srd"]["fit"]["loss"] == "ll"
    assert 0 < out["lid"]["ALID"] < math.log2(25)
    assert 0 < out["EER"] < 0.5
    assert 0 <= out["linkability"] <= 1
    assert out["lid"]["weight"] > 0


def test_scores_and_key(tmp_path):
    scores = tmp_path / "scores.txt"
    key = tmp_path / "key.txt"
    lines = [f"spk t{i} {s}" for i, s in enumerate(TAR + NON)] + ["other t0 5.0"]
    scores.write_text("\n".join(lines) + "\n")
    labels = ["target"] * len(TAR) + ["nontarget"] * len(NON)
    key.write_text("".join(f"spk t{i} {label}\n" for i, label in enumerate(labels)))
    out = run_json("score", "--scores", str(scores), "--key", str(key))
    assert out["zebra"]["D_ECE"] == pytest.approx(0.3343595, abs=1e-7)
    assert out["zebra"]["log10_lr_max"] == pytest.approx(0.574031, abs=1e-6)
    assert out["EER"] == pytest.approx(0.225)
    assert out["EER_rocch"] == pytest.approx(3 / 13)
    assert out["min_Cllr"] == pytest.approx(0.5353940, abs=1e-7)
    expected = 0.5 * (
        np.mean([math.log2(1 + math.exp(-s)) for s in TAR])
        + np.mean([math.log2(1 + math.exp(s)) for s in NON])
    )
    assert out["Cllr"] == pytest.approx(expected)
    assert out["srd"] is None and out["lid"] is None
    result = run("score", "--scores", str(scores), "--key", str(key))
    assert result.exit_code == 0
    assert "22.50 %" in result.stdout and "23.08 %" in result.stdout


def _error_line(result) -> str:
    """The whole output of a failed run: exit 2, nothing on stdout, one error line on stderr."""
    assert result.exit_code == 2, result.output
    assert result.stdout == "", result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("voxmeter: error:"), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("files", "args", "expected"),
    [
        ({"M.csv": "1,2,3\n4,5\n"}, ("--matrix", "M.csv", "--truth", "T.npy"), "M.csv:2: ragged"),
        ({"M.csv": ""}, ("--matrix", "M.csv", "--truth", "T.npy"), "M.csv: empty"),
        ({"M.csv": "1,2\nnan,3\n"}, ("--matrix", "M.csv", "--truth", "T.npy"), "M.csv:2:"),
        ({"T.txt": "0\n9\n"}, ("--matrix", "M.npy", "--truth", "T.txt"), "T.txt:2: trial 1"),
        ({"T.txt": "0\nx\n"}, ("--matrix", "M.npy", "--truth", "T.txt"), "T.txt:2: 'x'"),
        ({"T.txt": "0 1 2\n"}, ("--matrix", "M.npy", "--truth", "T.txt"), "3 truth indices"),
        ({"M.csv": "1\n2\n"}, ("--matrix", "M.csv", "--truth", "T.npy"), "need at least 2"),
        ({}, ("--matrix", "absent.npy", "--truth", "T.npy"), "absent.npy: no such file"),
        (
            {"s.txt": "a b 1\n", "k.txt": "a b target\na c nontarget\n"},
            ("--scores", "s.txt", "--key", "k.txt"),
            "k.txt:2: no score for pair a c",
        ),
        (
            {"s.txt": "a b 1\na c 0\n", "k.txt": "a b target\na c impostor\n"},
            ("--scores", "s.txt", "--key", "k.txt"),
            "k.txt:2: label 'impostor'",
        ),
        (
            {"s.txt": "a b nan\na c 0\n", "k.txt": "a b target\na c nontarget\n"},
            ("--scores", "s.txt", "--key", "k.txt"),
            "s.txt:1: score 'nan'",
        ),
        (
            {"s.txt": "a b 1\na c\n", "k.txt": "a b target\na c nontarget\n"},
            ("--scores", "s.txt", "--key", "k.txt"),
            "s.txt:2: expected 3 fields",
        ),
        (
            {"s.txt": "", "k.txt": "a b target\n"},
            ("--scores", "s.txt", "--key", "k.txt"),
            "s.txt: empty",
        ),
        (
            {"k.txt": "a b target\na b nontarget\n", "s.txt": "a b 1\n"},
            ("--scores", "s.txt", "--key", "k.txt"),
            "k.txt:2: pair a b repeats line 1",
        ),
        ({"T.txt": "0\n-1\n"}, ("--matrix", "M.npy", "--truth", "T.txt"), "T.txt:2: trial 1"),
        (
            {"B.npy": "\x93NUMPY not really"},
            ("--matrix", "B.npy", "--truth", "T.npy"),
            "B.npy: not a readable .npy array",
        ),
        ({}, ("--matrix", ".", "--truth", "T.npy"), ".: is a directory, not a file"),
        ({"m.json": "{}"}, ("--matrix", "m.json", "--truth", "T.npy"), "unsupported file type"),
        (
            {},
            (
                "--matrix",
                "M.npy",
                "--truth",
                "T.npy",
                "--dev-matrix",
                "M1.npy",
                "--dev-truth",
                "T.npy",
            ),
            "M1.npy: only 1 identity",
        ),
        ({}, ("--matrix", "M.npy", "--truth", "F.npy"), "F.npy: entry 0: 0.5"),
        ({}, ("--matrix", "N.npy", "--truth", "T.npy"), "N.npy: row 1, column 2: score nan"),
        (
            {},
            ("--matrix", "M.npy", "--truth", "T.npy", "--lid-weight", "1.7e308", "--lid-bias", "0"),
            "M.npy: cannot be scored:",
        ),
        ({}, ("--matrix", "M.npy"), "--truth: missing"),
        ({}, ("--matrix", "M.npy", "--truth", "T.npy", "--lid-weight", "1"), "give both"),
        ({}, ("--matrix", "M.npy", "--truth", "T.npy", "--fit-loss", "l2"), "--fit-loss"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, files, args, expected):
    monkeypatch.chdir(tmp_path)
    np.save("M.npy", np.ones((2, 3)) + np.eye(2, 3))
    np.save("T.npy", np.array([0, 1]))
    np.save("M1.npy", np.ones((2, 1)))
    np.save("F.npy", np.array([0.5, 1.0]))
    np.save("N.npy", np.array([[0.0, 1.0, 2.0], [1.0, 2.0, np.nan]]))
    for name, text in files.items():
        Path(name).write_text(text)
    line = _error_line(run("score", *args))
    assert expected in line, line


def test_compose_json_and_table():
    out = run_json(
        "compose", "--epsilon", "0.5", "--delta", "1e-5", "--steps", "100", "500", "1000", "10000"
    )
    assert [row["steps"] for row in out] == [100, 500, 1000, 10000]
    assert all(set(row) == {"steps", "basic", "advanced", "optimal"} for row in out)
    assert [row["basic"] for row in out] == [50, 250, 500, 5000]
    assert [math.floor(row["advanced"]) for row in out] == [36, 114, 198, 1464]
    np.testing.assert_allclose(
        [row["optimal"] for row in out], [31.173, 105.808, 186.121, 1429.689], atol=1e-2
    )
    result = run("compose", "--epsilon", "0.5", "--delta", "1e-5", "--steps", "100")
    assert result.exit_code == 0
    assert "36.239" in result.stdout and "31.173" in result.stdout and "56.429" in result.stdout


def test_compose_refuses_an_epsilon_whose_exponential_overflows():
    # e^1000 overflows a double: one line naming the option and its range, no warnings
    result = run("compose", "--epsilon", "1000", "--delta", "1e-5", "--steps", "1", "10")
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert "--epsilon" in line and "(0, 100]" in line and "1000" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--epsilon", "0.5", "--delta", "0", "--steps", "10"), "--delta"),
        (("--epsilon", "0.5", "--delta", "1", "--steps", "10"), "--delta"),
        (("--epsilon", "0", "--delta", "0.1", "--steps", "10"), "--epsilon"),
        (("--epsilon", "-1", "--delta", "0.1", "--steps", "10"), "--epsilon"),
        (("--epsilon", "0.5", "--delta", "0.1", "--steps", "10", "0"), "--steps"),
        (("--epsilon", "0.5", "--delta", "0.1", "--steps", "-3"), "--steps"),
        (("--epsilon", "0.5", "--delta", "0.1", "--steps", "2.5"), "--steps"),
        (
            ("--epsilon", "0.5", "--delta", "0.1", "--steps", "10", "1000000000"),
            "--steps: 1000000000",
        ),
    ],
)
def test_compose_bad_parameters(args, expected):
    line = _error_line(run("compose", *args))
    assert expected in line, line


def test_demo_script_runs_the_cli_on_a_simulation():
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "scripts" / "demo_score.py"
    result = subprocess.run(
        [sys.executable, str(script), "--identities", "40", "--trials", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout[result.stdout.index("{") :])
    assert out["srd"]["N"] == 40
    assert out["lid"]["calibrated_on"] == "dev"
    assert 0 < out["srd"]["MeanD"] <= math.log2(40)
    assert out["top1_linkage"] == pytest.approx(out["srd"]["IdR"])


#: What `voxmeter score --scores/--key --json` must not import: ~0.5 s of start-up for a command
#: that needs numpy and pyarrow only (scipy alone costs 0.4 s to import on the CI machine).
NOT_FOR_POOLED_SCORES = (
    "scipy",
    "torch",
    "dask",
    "distributed",
    "librosa",
    "sounddevice",
    "sklearn",
    "numba",
    "rich.table",
    "pyarrow.compute",
    "monitor.disclosure.lid",
    "monitor.disclosure.srd",
    "monitor.features",
    "monitor.daemon",
)


def test_scoring_pooled_trials_imports_only_what_it_needs(tmp_path):
    # A fresh interpreter runs the real entry point, then reports what was imported.
    import subprocess
    import sys

    scores, key = tmp_path / "s.txt", tmp_path / "k.txt"
    scores.write_text("".join(f"spk t{i} {s}\n" for i, s in enumerate(TAR + NON)))
    labels = ["target"] * len(TAR) + ["nontarget"] * len(NON)
    key.write_text("".join(f"spk t{i} {label}\n" for i, label in enumerate(labels)))
    program = (
        "import json, sys\n"
        "from monitor.cli import main\n"
        f"sys.argv = ['voxmeter', 'score', '--scores', {str(scores)!r}, '--key', {str(key)!r},"
        " '--json']\n"
        "code = main()\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["EER"] == pytest.approx(0.225)
    modules = json.loads(done.stderr.splitlines()[-1])
    loaded = [
        m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_FOR_POOLED_SCORES)
    ]
    assert loaded == [], loaded
    assert "pyarrow.csv" in modules  # the reader did run
