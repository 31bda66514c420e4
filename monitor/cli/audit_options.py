"""Options of ``voxmeter evaluate`` beyond the corpus commands' shared ones: the calibration its
LID weights come from, and ``--protect`` (checked, and its summary line)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from monitor.cli.common import console
from monitor.errors import VoxmeterError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from monitor.calibration.buckets import CalibrationSet
    from monitor.evaluate.protection import ProtectRequest
    from monitor.protect.mcadams import Alpha

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
ProtectAlphaOption = Annotated[
    str, typer.Option("--protect-alpha", help="McAdams α: fixed (0.8) or drawn per utterance.")
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
    int, typer.Option("--wer-utterances", help="Utterances the word error rate decodes (0: none).")
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


def lazy_template_alpha(method: str | None, alpha: str) -> Alpha | None:
    """``enroll --protect``: the α of the lazy-informed templates (None: none asked)."""
    request = protect_request(method, alpha, 0)
    return None if request is None else request.alpha


def protect_request(
    method: str | None, alpha: str, wer_utterances: int, attacker: Path | None = None
) -> ProtectRequest | None:
    """The ``--protect`` options checked (one line naming the option when wrong)."""
    from monitor.evaluate.protection import ProtectRequest, check_method
    from monitor.protect.mcadams import parse_alpha

    if method is None:
        return None
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
    return loaded, calibration_path
