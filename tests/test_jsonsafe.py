"""The one NaN/inf-to-JSON rule (monitor.jsonsafe) and the outputs that use it."""

from __future__ import annotations

import json
import math

import numpy as np

from monitor.calibration.buckets import _from_jsonable
from monitor.jsonsafe import finite_bits, jsonable
from monitor.scorefiles.report import to_json_text

VALUES = {
    1: [np.float64("nan"), np.inf, -np.inf, np.float32(1.5)],
    "arr": np.array([2.0, -np.inf]),
    "pair": (np.int64(3), "x", None),
}


def test_default_policy_writes_inf_as_strings_and_nan_as_null() -> None:
    out = jsonable(VALUES)
    assert out == {"1": [None, "inf", "-inf", 1.5], "arr": [2.0, "-inf"], "pair": [3, "x", None]}
    assert type(out["pair"][0]) is int and type(out["1"][3]) is float
    json.dumps(out, allow_nan=False)  # strict JSON accepts it


def test_null_policy_writes_every_non_finite_number_as_null() -> None:
    out = jsonable(VALUES, inf="null")
    assert out == {"1": [None, None, None, 1.5], "arr": [2.0, None], "pair": [3, "x", None]}


def test_score_json_text_is_strict_json_with_null_for_non_finite() -> None:
    text = to_json_text({"EER": math.nan, "linkability": math.inf, "min_Cllr": np.float64(0.25)})
    assert json.loads(text) == {"EER": None, "linkability": None, "min_Cllr": 0.25}


def test_calibration_reads_back_what_the_default_policy_writes() -> None:
    written = jsonable({"lid_weight": math.inf, "lid_bias": -math.inf, "fit_loss": math.nan})
    back = _from_jsonable(json.loads(json.dumps(written)))
    assert back["lid_weight"] == math.inf and back["lid_bias"] == -math.inf
    assert math.isnan(back["fit_loss"])


def test_finite_bits_clamps_inf_and_keeps_real_figures() -> None:
    assert finite_bits(math.inf) == 1e9 and finite_bits(-math.inf) == -1e9
    assert finite_bits(3.25) == 3.25
