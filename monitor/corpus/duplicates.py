"""Audio that appears twice in a corpus: the same recording under two speakers (a copy, a
symlink, a mislabelled folder) makes one identity's template disclose another's, and within
one speaker it lets a test utterance match its own copy in the templates. Found from the
observations already extracted (exactly equal for the same audio), so nothing is read again."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from monitor.features.base import Observation

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DuplicateAudio:
    """Files (speaker, path) whose observations are identical under every feature."""

    files: tuple[tuple[str, str], ...]

    @property
    def speakers(self) -> tuple[str, ...]:
        return tuple(sorted({speaker for speaker, _ in self.files}))


def fingerprint(observations: Mapping[str, Observation], speech_seconds: float) -> bytes:
    """A digest of everything a file's features say: equal for the same audio, and in practice
    never for different recordings (float64 observation values, bit for bit).

    Bit for bit holds for features computed by one machine's kernels; an entry of a feature
    cache filled on another CPU, or by the other embedding runtime, may differ in its last bits,
    and then a copy is not reported as one: a missed duplicate, never a false one."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(repr(round(speech_seconds, 6)).encode())
    for name in sorted(observations):
        digest.update(name.encode())
        digest.update(observations[name].values.tobytes())
    return digest.digest()


def find_duplicates(files: Iterable[tuple[str, str, bytes]]) -> list[DuplicateAudio]:
    """Groups of (speaker, path, fingerprint) sharing one fingerprint, in input order."""
    groups: dict[bytes, list[tuple[str, str]]] = {}
    for speaker, path, print_ in files:
        groups.setdefault(print_, []).append((speaker, path))
    return [DuplicateAudio(tuple(group)) for group in groups.values() if len(group) > 1]


def warn_duplicates(duplicates: list[DuplicateAudio], *, within_speaker_matters: bool) -> None:
    """One warning per group: across speakers always; within one speaker only where a test
    utterance could meet its copy among the templates (calibrate, evaluate)."""
    for group in duplicates:
        across = len(group.speakers) > 1
        if not across and not within_speaker_matters:
            continue
        paths = ", ".join(path for _, path in group.files)
        if across:
            logger.warning(
                "the same audio appears under speakers %s (%s): their templates disclose each "
                "other; remove the copies or fix the folders",
                ", ".join(group.speakers),
                paths,
            )
        else:
            logger.warning(
                "speaker %s holds the same audio twice (%s): a test utterance can meet its own "
                "copy among the templates, which overstates disclosure",
                group.speakers[0],
                paths,
            )
