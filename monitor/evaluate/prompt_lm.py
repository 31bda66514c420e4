"""A trigram language model of a closed set of sentences, in ARPA format, for pocketsphinx.

A closed-vocabulary assistant accepts a known set of sentences. A JSGF grammar of the corpus's
~2,500 prompts says exactly that, but pocketsphinx's grammar search over so many alternatives
costs ~8 CPU seconds per utterance; a trigram model trained on the same sentences decodes as
fast as the general model and still puts almost all of its mass on them. Built at run time
from the prompts (nothing downloaded): absolute discounting (D = 0.05) with back-off to the
lower order, the standard ARPA layout (log10 probabilities and back-off weights). What the
decoder says is then mapped to the nearest prompt (:func:`nearest`, fewest word edits), as a
closed-set intent matcher would: the command is right when that prompt is the one read.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

DISCOUNT = 0.05  # little mass left for word sequences outside the prompts
ORDER = 3


def _counts(sentences: Sequence[str]) -> list[Counter[tuple[str, ...]]]:
    """Counts of every n-gram (n = 1..ORDER) of the sentences padded with <s> and </s>."""
    counts: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(ORDER)]
    for sentence in sentences:
        words = ["<s>", *sentence.split(), "</s>"]
        for n in range(1, ORDER + 1):
            counts[n - 1].update(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return counts


def arpa(sentences: Sequence[str]) -> str:
    """The ARPA text of a trigram model of ``sentences`` (words separated by spaces)."""
    counts = _counts(sentences)
    unigrams = counts[0]
    total = sum(c for (w,), c in unigrams.items() if w != "<s>")
    prob: dict[tuple[str, ...], float] = {
        g: (c / total if g != ("<s>",) else 0.0) for g, c in unigrams.items()
    }
    backoff: dict[tuple[str, ...], float] = {}
    for n in range(2, ORDER + 1):
        context_total: Counter[tuple[str, ...]] = Counter()
        followers: dict[tuple[str, ...], list[tuple[str, ...]]] = defaultdict(list)
        for gram, c in counts[n - 1].items():
            context_total[gram[:-1]] += c
            followers[gram[:-1]].append(gram)
        for context, grams in followers.items():
            c_context = context_total[context]
            for gram in grams:
                prob[gram] = (counts[n - 1][gram] - DISCOUNT) / c_context
            left = DISCOUNT * len(grams) / c_context
            lower = sum(prob[gram[1:]] for gram in grams)
            backoff[context] = left / max(1.0 - lower, 1e-12)
    return _layout(counts, prob, backoff)


def _layout(
    counts: list[Counter[tuple[str, ...]]],
    prob: dict[tuple[str, ...], float],
    backoff: dict[tuple[str, ...], float],
) -> str:
    def log10(x: float) -> str:
        return f"{math.log10(x):.6f}" if x > 0 else "-99"

    lines = ["\\data\\", *(f"ngram {n}={len(counts[n - 1])}" for n in range(1, ORDER + 1)), ""]
    for n in range(1, ORDER + 1):
        lines.append(f"\\{n}-grams:")
        for gram in sorted(counts[n - 1]):
            row = f"{log10(prob[gram])} {' '.join(gram)}"
            if n < ORDER:
                row += f" {log10(backoff.get(gram, 1.0))}"
            lines.append(row)
        lines.append("")
    lines.append("\\end\\")
    return "\n".join(lines) + "\n"


def _edits(a: Sequence[str], b: Sequence[str]) -> int:
    """Word edit distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def nearest(hypothesis: str, sentences: Sequence[str]) -> str:
    """The sentence of ``sentences`` fewest word edits away from ``hypothesis`` (the first
    on a tie; the empty hypothesis gives the shortest sentence)."""
    words = hypothesis.split()
    return min(sentences, key=lambda s: _edits(words, s.split()))
