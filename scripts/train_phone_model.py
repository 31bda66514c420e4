"""Train the phone model shipped with voxmeter (``monitor/features/shipped/phone-model.npz``).

    python scripts/train_phone_model.py [CORPUS] [--labels labels.npz] [--epochs 12]

What it learns: for each 10 ms frame of CAM++'s Kaldi filterbanks (80 log-mel bands, mean
removed over the speech, :func:`monitor.features.fbank.kaldi_fbank`: the frames the default
embedding computes anyway), the posterior of each of the 39 CMU phones and of "no phone"
(silence, pocketsphinx's ``+...+`` fillers). The feature then counts phones from these
posteriors (:mod:`monitor.features.phone_model`).

Teacher: **pocketsphinx's all-phone decoding of the same speech** (the decoder and settings of
``features.phone = "pocketsphinx"``), its segmentation giving every frame a label. Why this
teacher and not a forced alignment of the prompts in ``utterances.tsv``:

- the feature measures what an attacker learns from *how a speaker pronounces*: an accent's
  substitutions (a learner's /IY/ for /IH/, a dropped /DH/) are the evidence. A forced alignment
  labels the phones the prompt's dictionary expects, whatever was said, and so would teach the
  model to hide exactly the substitutions that identify a speaker; a free phone decoding keeps
  them;
- the rule the model is held to is disclosure against pocketsphinx's (within 0.05 bits):
  imitating its decoder is the direct way there, and it needs neither a pronunciation
  dictionary nor an aligner (none ships with voxmeter);
- the daemon sees no prompts: a model that needs no text is trained the way it is used.

Data: the corpus's *train* speakers only (``speakers.tsv`` ``original_split``), each utterance
read and trimmed to speech as every feature sees it (``read_audio`` + ``speech_only``). A
tenth of the train speakers (drawn with :data:`SEED`) is held out, speaker-disjoint, for early
stopping; the test speakers are never read here (they are the disclosure check's).

Model: a small time-delay network (1-D convolutions over frames, receptive field ±7 frames)
of about 100k parameters: ~20 MFLOP per second of audio, a few milliseconds of one core in
numpy. Weights ship as float16 in an .npz (< 1 MB), run in float32 by numpy.

The shipped weights: ``--limit 625 --epochs 8`` (the first 625 train utterances in corpus
order, 63 speakers: 57 trained on, 6 held out). Labelling is pocketsphinx's decoding, ~0.04 of
a core per second of speech: most of the script's CPU.

Figures (frame accuracy against the teacher on the training and held-out frames, parameters,
size, seconds) go to ``bench/results/phone-model-train.json`` in the benchmarks' schema.
Deterministic: fixed seed, one torch thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import CORPUS  # noqa: E402
from monitor.features.phone import CMU_PHONES  # noqa: E402
from monitor.features.phone_model import (  # noqa: E402
    CONTEXT,
    HIDDEN,
    N_CLASSES,
    PAD,
    SHIPPED,
)

SEED = 20261202
"""Seeds the held-out draw, the initial weights and the batch order."""
HELD_OUT = 0.1
"""Share of the train speakers held out for early stopping."""
_INDEX = {phone: i for i, phone in enumerate(CMU_PHONES)}
NO_PHONE = len(CMU_PHONES)


def teacher_labels(speech: np.ndarray, frames: int) -> np.ndarray:
    """(frames,) int8 class of each Kaldi frame: pocketsphinx's all-phone segmentation of
    ``speech`` (16 kHz), the frames of a non-phone segment (or none) :data:`NO_PHONE`.
    Both front ends hop 10 ms from the first sample, so frame t is frame t in both."""
    from monitor.features.phone import phone_segments

    labels = np.full(frames, NO_PHONE, np.int8)
    for phone, first, last in phone_segments(speech, 16000):
        labels[first : last + 1] = _INDEX[phone]
    return labels


def label_corpus(corpus: Path, split: str, limit: int | None = None) -> dict[str, Any]:
    """Filterbanks and teacher labels of every utterance of ``split``'s speakers."""
    from monitor.audio.file import read_audio
    from monitor.audio.vad import speech_only
    from monitor.corpus.scan import scan_corpus
    from monitor.features.fbank import kaldi_fbank

    utterances = list(scan_corpus(corpus, split=split).utterances)[:limit]
    feats, labels, speakers, lengths = [], [], [], []
    started = time.process_time()
    for i, utterance in enumerate(utterances):
        speech = speech_only(read_audio(utterance.path)[0], 16000)
        fbank = kaldi_fbank(speech)
        feats.append(fbank.astype(np.float16))
        labels.append(teacher_labels(speech, fbank.shape[0]))
        speakers.append(utterance.speaker)
        lengths.append(fbank.shape[0])
        if i % 250 == 0:
            print(f"labelled {i}/{len(utterances)} ({time.process_time() - started:.0f} s CPU)")
    return {
        "feats": np.concatenate(feats) if feats else np.zeros((0, 80), np.float16),
        "labels": np.concatenate(labels) if labels else np.zeros(0, np.int8),
        "speakers": np.asarray(speakers),
        "lengths": np.asarray(lengths, np.int64),
    }


def split_speakers(speakers: np.ndarray, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (training, held-out) speakers: a seeded, speaker-disjoint draw of HELD_OUT."""
    unique = np.unique(speakers)
    rng = np.random.default_rng(seed)
    held = max(1, round(HELD_OUT * unique.shape[0]))
    chosen = np.zeros(unique.shape[0], bool)
    chosen[rng.choice(unique.shape[0], held, replace=False)] = True
    return unique[~chosen], unique[chosen]


def _utterances(data: dict[str, Any], keep: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(features, labels) per utterance of the ``keep`` speakers."""
    ends = np.cumsum(data["lengths"])
    starts = ends - data["lengths"]
    wanted = set(keep.tolist())
    return [
        (data["feats"][a:b].astype(np.float32), data["labels"][a:b].astype(np.int64))
        for a, b, s in zip(starts, ends, data["speakers"], strict=True)
        if s in wanted and b > a
    ]


def build_network() -> Any:
    """The torch twin of :class:`monitor.features.phone_model.PhoneModel` (same layers)."""
    import torch
    from torch import nn

    layers: list[nn.Module] = []
    width = 80
    for kernel, dilation in CONTEXT:
        layers += [nn.Conv1d(width, HIDDEN, kernel, dilation=dilation), nn.ReLU()]
        width = HIDDEN
    layers.append(nn.Conv1d(width, N_CLASSES, 1))
    torch.manual_seed(SEED)
    return nn.Sequential(*layers)


def _batches(
    utts: list[tuple[np.ndarray, np.ndarray]], scale: np.ndarray, rng: np.random.Generator
) -> list[tuple[Any, Any]]:
    """Chunks of 200 frames (zero-padded by the receptive field, as the numpy forward pads),
    shuffled, 64 a batch."""
    import torch

    pad, size = PAD, 200
    chunks_x, chunks_y = [], []
    for x, y in utts:
        xs = np.pad(x * scale, ((pad, pad), (0, 0)))
        for a in range(0, y.shape[0], size):
            piece = y[a : a + size]
            fx = np.zeros((size + 2 * pad, 80), np.float32)
            fx[: piece.shape[0] + 2 * pad] = xs[a : a + piece.shape[0] + 2 * pad]
            fy = np.full(size, -100, np.int64)
            fy[: piece.shape[0]] = piece
            chunks_x.append(fx)
            chunks_y.append(fy)
    order = rng.permutation(len(chunks_x))
    X, Y = np.stack(chunks_x)[order], np.stack(chunks_y)[order]
    return [
        (torch.from_numpy(X[i : i + 64]).transpose(1, 2), torch.from_numpy(Y[i : i + 64]))
        for i in range(0, X.shape[0], 64)
    ]


def _accuracy(net: Any, batches: list[tuple[Any, Any]]) -> float:
    import torch

    right = total = 0
    with torch.no_grad():
        for x, y in batches:
            guess = net(x).argmax(dim=1)
            mask = y >= 0
            right += int((guess[mask] == y[mask]).sum())
            total += int(mask.sum())
    return right / max(total, 1)


def train(
    data: dict[str, Any], epochs: int, patience: int = 3
) -> tuple[Any, np.ndarray, dict[str, Any]]:
    """The network trained on the training speakers, the epoch with the best held-out frame
    accuracy kept; returns it, the input scale and the figures."""
    import torch

    torch.set_num_threads(1)
    training, held = split_speakers(data["speakers"])
    fit, check = _utterances(data, training), _utterances(data, held)
    frames = np.concatenate([x for x, _ in fit])
    scale = (1.0 / np.maximum(frames.std(axis=0), 1e-3)).astype(np.float32)
    rng = np.random.default_rng(SEED)
    net = build_network()
    optimiser = torch.optim.Adam(net.parameters(), lr=2e-3, weight_decay=1e-5)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=-100)
    check_batches = _batches(check, scale, rng)
    best, best_state, since, history = -1.0, None, 0, []
    for epoch in range(epochs):
        net.train()
        batches = _batches(fit, scale, rng)
        for x, y in batches:
            optimiser.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            optimiser.step()
        net.eval()
        held_acc = _accuracy(net, check_batches)
        history.append(round(held_acc, 4))
        print(f"epoch {epoch + 1}: held-out frame accuracy {held_acc:.4f}", flush=True)
        if held_acc > best:
            best, since = held_acc, 0
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
        else:
            since += 1
            if since >= patience:
                break
        for group in optimiser.param_groups:
            group["lr"] *= 0.8
    assert best_state is not None
    net.load_state_dict(best_state)
    net.eval()
    figures = {
        "training_speakers": training.tolist(),
        "held_out_speakers": held.tolist(),
        "training_frames": int(sum(y.shape[0] for _, y in fit)),
        "held_out_frames": int(sum(y.shape[0] for _, y in check)),
        "epochs_run": len(history),
        "held_out_accuracy_per_epoch": history,
        "training_frame_accuracy": round(_accuracy(net, _batches(fit, scale, rng)), 4),
        "held_out_frame_accuracy": round(best, 4),
    }
    return net, scale, figures


def mean_frames(data: dict[str, Any]) -> np.ndarray:
    """(N_CLASSES,) mean length in frames of a teacher segment of each class (runs of one label
    within an utterance): what turns summed frame posteriors into expected phone counts."""
    labels = data["labels"].astype(np.int64)
    ends = np.cumsum(data["lengths"])
    boundary = np.ones(labels.shape[0], bool)
    boundary[1:] = labels[1:] != labels[:-1]
    boundary[ends[:-1]] = True
    runs = np.bincount(labels[boundary], minlength=N_CLASSES).astype(np.float64)
    frames = np.bincount(labels, minlength=N_CLASSES).astype(np.float64)
    return np.where(runs > 0, frames / np.maximum(runs, 1), 1.0)


def export(net: Any, scale: np.ndarray, durations: np.ndarray, out: Path) -> int:
    """The weights as float16 in an .npz (``layerK_w`` (out, in·kernel), ``layerK_b``)."""
    arrays: dict[str, np.ndarray] = {"scale": scale, "mean_frames": durations}
    convs = [m for m in net if m.__class__.__name__ == "Conv1d"]
    for k, conv in enumerate(convs):
        w = conv.weight.detach().numpy()  # (out, in, kernel)
        arrays[f"layer{k}_w"] = w.transpose(2, 1, 0).reshape(-1, w.shape[0]).astype(np.float16)
        arrays[f"layer{k}_b"] = conv.bias.detach().numpy().astype(np.float32)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)  # type: ignore[arg-type]  # numpy stubs
    return sum(int(np.prod(a.shape)) for n, a in arrays.items() if n.startswith("layer"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=CORPUS)
    parser.add_argument("--labels", type=Path, help="an .npz keeping features and labels")
    parser.add_argument("--limit", type=int, help="only the first N train utterances (tests)")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument(
        "--figures", type=Path, default=ROOT / "bench/results/phone-model-train.json"
    )
    args = parser.parse_args(argv)
    started = time.process_time()
    if args.labels is not None and args.labels.is_file():
        data = dict(np.load(args.labels))
    else:
        data = label_corpus(args.corpus, "train", args.limit)
        if args.labels is not None:
            np.savez(args.labels, **data)
    labelled = time.process_time() - started
    net, scale, figures = train(data, args.epochs)
    parameters = export(net, scale, mean_frames(data), args.out)
    figures.update(
        {
            "seed": SEED,
            "teacher": 'pocketsphinx all-phone (features.phone = "pocketsphinx")',
            "split": "train speakers of speakers.tsv; held out: a seeded tenth of them",
            "parameters": parameters,
            "bytes": args.out.stat().st_size,
            "labelling_cpu_seconds": round(labelled, 1),
            "training_cpu_seconds": round(time.process_time() - started - labelled, 1),
        }
    )
    _write_figures(args.figures, figures)
    print({k: v for k, v in figures.items() if not k.endswith("speakers")})


def _write_figures(path: Path, figures: dict[str, Any]) -> None:
    from bench.common import Run

    record = Run(path.stem, command="python scripts/train_phone_model.py")
    record.figures.update(figures)
    record.write(path=path)


if __name__ == "__main__":
    main()
