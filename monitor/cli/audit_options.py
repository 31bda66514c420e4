"""Options of ``voxmeter evaluate`` beyond the corpus commands' shared ones: the calibration its
LID weights come from, and ``--protect`` (checked, and its summary line)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from monitor.cli.common import console, follow_calibration_phone
from monitor.errors import VoxmeterError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from monitor.calibration.buckets import CalibrationSet
    from monitor.evaluate.anonymiser_audit import ProtectRequest
    from monitor.protect.mcadams import Alpha

# ``voxmeter enroll``: how much of each speaker, and whether they live here.
UtterancesOption = Annotated[
    int | None,
    typer.Option("--utterances", min=1, help="Use each speaker's first K usable utterances."),
]
SecondsOption = Annotated[
    float | None,
    typer.Option("--seconds", min=0.0, help="Use each speaker's first S seconds of speech."),
]
LocalOption = Annotated[
    bool, typer.Option("--local", help="Also register every speaker as a device user.")
]

# ``voxmeter calibrate``: where the fit goes, and its grid.
CalibrationOutOption = Annotated[
    Path,
    typer.Option(
        "--out",
        help="Calibration JSON to write (required: the shipped calibration is "
        "replaced only when named here).",
    ),
]
CalibrationDbOption = Annotated[
    Path | None,
    typer.Option("--db", help="Also store the calibration in this database ($VOXMETER_DB)."),
]
CalibrationLossOption = Annotated[
    str, typer.Option("--loss", help="Beta-binomial loss: ll (default), ms, wms, rwms, cll.")
]
BucketsOption = Annotated[
    str, typer.Option("--buckets", help="Test-speech seconds per bucket, as far as possible.")
]
CalibrationTemplateOption = Annotated[
    str, typer.Option("--template-seconds", help="Template speech seconds, or 'rest'.")
]

# ``voxmeter evaluate``: the length grid, the copies audited beside, the LID weights' source.
TestSecondsOption = Annotated[
    str, typer.Option("--test-seconds", help="Test speech seconds (grid), e.g. 3,6,12.")
]
TemplateGridOption = Annotated[
    str, typer.Option("--template-seconds", help="Template speech seconds (grid) or 'rest'.")
]
ProtectedOption = Annotated[
    Path | None,
    typer.Option("--protected", help="Pseudonymised copy of the corpus (same file names)."),
]
AuditLossOption = Annotated[
    str, typer.Option("--loss", help="Loss of the reported model: ll, ms, wms, rwms, cll.")
]
CalibrationOption = Annotated[
    Path | None,
    typer.Option("--calibration", help="Calibration JSON for LID (default: the shipped one)."),
]
LidFromOption = Annotated[
    str | None,
    typer.Option(
        "--lid-from",
        help="'calibration' or 'crossfit' (default: calibration if it covers every feature).",
    ),
]

ProtectOption = Annotated[
    str | None,
    typer.Option(
        "--protect",
        help="Also audit the split anonymised by this method (mcadams): original, ignorant "
        "and lazy-informed attackers, and pocketsphinx's word error rate before and after.",
    ),
]
EnrolProtectOption = Annotated[
    str | None,
    typer.Option(
        "--protect",
        help="Also store each speaker's lazy-informed embedding template: the same files "
        "anonymised by this method (mcadams).",
    ),
]
NarrowOption = Annotated[
    bool,
    typer.Option(
        "--narrow/--no-narrow",
        help="Also store each speaker's narrow-band embedding template (the same files as an "
        "8 kHz device delivers them): the daemon tracks and scores 8 kHz sources against it.",
    ),
]
RoomOption = Annotated[
    bool,
    typer.Option(
        "--room/--no-room",
        help="With --local: also store each member's far-field embedding template (the same "
        "files in synthetic reverberant rooms): the tracker meets them across a room with it.",
    ),
]
DEFAULT_PROTECT_ALPHA = "0.5,0.9"
DEFAULT_WER_UTTERANCES = 200
"""Utterances ``evaluate --protect`` decodes for the word error rate unless told otherwise."""
ProtectAlphaOption = Annotated[
    str | None,
    typer.Option(
        "--protect-alpha",
        help=f"With --protect: McAdams α, fixed (0.8) or drawn per utterance "
        f"(default {DEFAULT_PROTECT_ALPHA}).",
    ),
]
AttackerOption = Annotated[
    Path | None,
    typer.Option(
        "--attacker",
        help="Semi-informed attacker's back-end (.npz of scripts/train_semi_informed.py; "
        "default: the one shipped for the embedding network).",
    ),
]
WerUtterancesOption = Annotated[
    int | None,
    typer.Option(
        "--wer-utterances",
        help=f"Utterances the word error rate decodes (0: none; default {DEFAULT_WER_UTTERANCES}).",
    ),
]


def print_protection(document: dict[str, Any]) -> None:
    """The summary line of ``--protect``, when the report has one."""
    if document.get("protection"):
        console.print(protection_line(document["protection"]), markup=False, highlight=False)


def protection_line(protection: dict[str, Any]) -> str:
    """One line of ``evaluate --protect``: EER and MeanD per attacker (the embedding's, else
    the first feature's), and the word error rate."""
    parts = []
    for condition, setting in protection["conditions"].items():
        features = setting["features"]
        name = "embedding" if "embedding" in features else next(iter(features))
        f = features[name]
        parts.append(f"{condition} EER {100 * f['EER']:.1f} % MeanD {f['MeanD_histogram']:.2f}")
    wer = protection.get("wer")
    if wer:
        parts.append(f"WER {100 * wer['before']:.1f} -> {100 * wer['after']:.1f} %")
    return f"protection ({protection['method']}, α {protection['alpha']}): " + "; ".join(parts)


def lazy_template_alpha(method: str | None, alpha: str | None) -> Alpha | None:
    """``enroll --protect``: the α of the lazy-informed templates (None: none asked)."""
    request = protect_request(method, alpha, None)
    return None if request is None else request.alpha


def protect_request(
    method: str | None,
    alpha: str | None,
    wer_utterances: int | None,
    attacker: Path | None = None,
) -> ProtectRequest | None:
    """The ``--protect`` options checked (one line naming the option when wrong; an option
    that means something only with ``--protect`` is refused without it, never ignored)."""
    from monitor.evaluate.anonymiser_audit import ProtectRequest, check_method
    from monitor.protect.mcadams import parse_alpha

    if method is None:
        if alpha is not None:
            raise VoxmeterError(f"--protect-alpha {alpha}: needs --protect (mcadams)")
        if attacker is not None:
            raise VoxmeterError(f"--attacker {attacker}: needs --protect (mcadams)")
        if wer_utterances is not None:
            raise VoxmeterError(f"--wer-utterances {wer_utterances}: needs --protect (mcadams)")
        return None
    wer_utterances = DEFAULT_WER_UTTERANCES if wer_utterances is None else wer_utterances
    alpha = DEFAULT_PROTECT_ALPHA if alpha is None else alpha
    try:
        check_method(method)
    except ValueError as error:
        raise VoxmeterError(f"--protect: {error}") from None
    try:
        parsed = parse_alpha(alpha)
    except ValueError as error:
        raise VoxmeterError(f"--protect-alpha {error}") from None
    if wer_utterances < 0:
        raise VoxmeterError(f"--wer-utterances {wer_utterances}: expected 0 or more")
    if attacker is not None and not attacker.is_file():
        raise VoxmeterError(f"--attacker {attacker}: no such file")
    return ProtectRequest(method, parsed, wer_utterances=wer_utterances, attacker=attacker)


def audit_calibration(
    calibration: Path | None, lid_from: str | None, names: Sequence[str]
) -> tuple[CalibrationSet | None, Path]:
    """The calibration an audit reads its LID weights from (given, or the shipped one if there
    is one), and its path."""
    from monitor.calibration.buckets import CalibrationSet, default_path
    from monitor.userfiles import MAX_JSON_BYTES, regular_file

    shipped = default_path()
    if lid_from not in (None, "calibration", "crossfit"):
        raise VoxmeterError(f"--lid-from {lid_from!r}: expected 'calibration' or 'crossfit'")
    calibration_path = calibration if calibration is not None else shipped
    loaded = None
    if calibration is not None or lid_from == "calibration" or shipped.is_file():
        loaded = CalibrationSet.load(regular_file(calibration_path, max_bytes=MAX_JSON_BYTES))
        if "embedding" in names:
            loaded.check_embedding_backend(str(calibration_path))
    if loaded is not None and "phone" in names and lid_from != "crossfit":
        follow_calibration_phone(loaded, str(calibration_path))
    return loaded, calibration_path
