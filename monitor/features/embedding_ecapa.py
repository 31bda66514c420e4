"""ECAPA-TDNN speaker embeddings (SpeechBrain ``spkrec-ecapa-voxceleb``), ported to plain torch.

SpeechBrain 1.1.2 cannot be imported beside torch 2.13 (it needs torchaudio, which does not
load here), so this module re-states what its ``hyperparams.yaml`` builds for inference:
``Fbank(n_mels=80)`` (centred STFT, Hamming window, triangular mel filters, dB with an 80 dB
floor), ``InputNormalization(norm_type="sentence", std_norm=False)`` and ``ECAPA_TDNN`` with
channels 1024×4 + 3072, for one utterance at a time (no padding masks). The parameter names
match SpeechBrain's, so its checkpoint loads unchanged. ``tests/features/test_embedding_ecapa``
checks parity with SpeechBrain's own classes on corpus files (max |difference| ≤ 1e-4);
``scripts/ecapa_reference.py`` made the reference. Code adapted from SpeechBrain
(Apache-2.0, authors Hwidong Na, Mirco Ravanelli and others).
"""

from __future__ import annotations

import math

import torch
from torch import nn

N_MELS = 80
CHANNELS = (1024, 1024, 1024, 1024, 3072)
KERNELS = (5, 3, 3, 3, 1)
DILATIONS = (1, 2, 3, 4, 1)


class Fbank(nn.Module):
    """SpeechBrain's ``Fbank`` defaults at 16 kHz: 25 ms Hamming frames every 10 ms, centred
    with zero padding, power spectrum, 80 triangular mel filters 0–8000 Hz, 10·log10 with an
    80 dB dynamic range per utterance. (n,) or (B, n) float32 → (B, frames, 80)."""

    def __init__(self, *, rate: int = 16000, n_fft: int = 400, n_mels: int = N_MELS) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.hop = round(rate / 1000 * 10)
        self.win = round(rate / 1000 * 25)
        self.register_buffer("window", torch.hamming_window(self.win), persistent=False)
        self.register_buffer("filters", _mel_filters(rate, n_fft, n_mels), persistent=False)

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        wav = torch.atleast_2d(wav)
        spec = torch.stft(
            wav,
            self.n_fft,
            self.hop,
            self.win,
            self.window,
            center=True,
            pad_mode="constant",
            return_complex=True,
        )
        power = torch.view_as_real(spec).pow(2).sum(-1).transpose(1, 2)  # (B, frames, bins)
        db = 10 * torch.log10(torch.clamp(power @ self.filters, min=1e-10))
        floor = db.amax(dim=(-2, -1)) - 80.0
        return torch.max(db, floor.view(-1, 1, 1))


def _mel_filters(rate: int, n_fft: int, n_mels: int) -> torch.Tensor:
    """(bins, n_mels) triangular filters as SpeechBrain's ``Filterbank`` builds them."""

    def to_mel(hz: float) -> float:
        return 2595 * math.log10(1 + hz / 700)

    mel = torch.linspace(to_mel(0), to_mel(rate // 2), n_mels + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    band = (hz[1:] - hz[:-1])[:-1]
    central = hz[1:-1]
    freqs = torch.linspace(0, rate // 2, n_fft // 2 + 1)
    slope = (freqs[None, :] - central[:, None]) / band[:, None]
    return torch.clamp(torch.min(slope + 1.0, 1.0 - slope), min=0).T.contiguous()


class _Conv(nn.Module):
    """SpeechBrain's Conv1d with ``padding="same"`` (reflect) at stride 1."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, dilation: int = 1) -> None:
        super().__init__()
        pad = dilation * (kernel - 1) // 2
        self.conv = nn.Conv1d(
            cin, cout, kernel, dilation=dilation, padding=pad, padding_mode="reflect"
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _BatchNorm(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class TDNNBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _Conv(cin, cout, kernel, dilation)
        self.activation = nn.ReLU()
        self.norm = _BatchNorm(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.activation(self.conv(x)))


class Res2NetBlock(nn.Module):
    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(
            TDNNBlock(width, width, kernel, dilation) for _ in range(scale - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        out = [parts[0]]
        y = self.blocks[0](parts[1])
        out.append(y)
        for block, part in zip(self.blocks[1:], parts[2:], strict=True):
            y = block(part + y)
            out.append(y)
        return torch.cat(out, dim=1)


class SEBlock(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = _Conv(channels, se_channels)
        self.relu = nn.ReLU()
        self.conv2 = _Conv(se_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=2, keepdim=True)
        return torch.sigmoid(self.conv2(self.relu(self.conv1(s)))) * x


class SERes2NetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.tdnn1 = TDNNBlock(cin, cout, 1, 1)
        self.res2net_block = Res2NetBlock(cout, 8, kernel, dilation)
        self.tdnn2 = TDNNBlock(cout, cout, 1, 1)
        self.se_block = SEBlock(cout, 128)
        self.shortcut = _Conv(cin, cout) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.shortcut(x) if self.shortcut is not None else x
        x = self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))
        return x + residual


def _weighted_stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std over time with weights summing to 1 (SpeechBrain's eps 1e-12 on var)."""
    mean = (weights * x).sum(2)
    var = (weights * (x - mean.unsqueeze(2)).pow(2)).sum(2).clamp(1e-12)
    return mean, torch.sqrt(var)


class AttentiveStatisticsPooling(nn.Module):
    def __init__(self, channels: int, attention_channels: int = 128) -> None:
        super().__init__()
        self.tdnn = TDNNBlock(channels * 3, attention_channels, 1, 1)
        self.tanh = nn.Tanh()
        self.conv = _Conv(attention_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[-1]
        uniform = torch.full_like(x[:, :1, :], 1.0 / frames)
        mean, std = _weighted_stats(x, uniform)
        context = torch.cat(
            [x, mean.unsqueeze(2).expand(-1, -1, frames), std.unsqueeze(2).expand(-1, -1, frames)],
            dim=1,
        )
        attention = torch.softmax(self.conv(self.tanh(self.tdnn(context))), dim=2)
        mean, std = _weighted_stats(x, attention)
        return torch.cat((mean, std), dim=1).unsqueeze(2)


class ECAPA_TDNN(nn.Module):  # noqa: N801 - SpeechBrain's name, so the checkpoint's keys match
    """The embedding model of ``spkrec-ecapa-voxceleb``: (B, frames, 80) → (B, 1, 192)."""

    def __init__(self, input_size: int = N_MELS, lin_neurons: int = 192) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([TDNNBlock(input_size, CHANNELS[0], KERNELS[0], DILATIONS[0])])
        for i in range(1, len(CHANNELS) - 1):
            self.blocks.append(
                SERes2NetBlock(CHANNELS[i - 1], CHANNELS[i], KERNELS[i], DILATIONS[i])
            )
        self.mfa = TDNNBlock(CHANNELS[-2] * (len(CHANNELS) - 2), CHANNELS[-1], 1, 1)
        self.asp = AttentiveStatisticsPooling(CHANNELS[-1])
        self.asp_bn = _BatchNorm(CHANNELS[-1] * 2)
        self.fc = _Conv(CHANNELS[-1] * 2, lin_neurons)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        x = feats.transpose(1, 2)
        outputs = []
        for layer in self.blocks:
            x = layer(x)
            outputs.append(x)
        x = self.mfa(torch.cat(outputs[1:], dim=1))
        x = self.fc(self.asp_bn(self.asp(x)))
        return x.transpose(1, 2)


class EcapaEncoder(nn.Module):
    """Waveform → 192-d embedding, as SpeechBrain's ``EncoderClassifier.encode_batch``."""

    def __init__(self) -> None:
        super().__init__()
        self.compute_features = Fbank()
        self.embedding_model = ECAPA_TDNN()

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        feats = self.compute_features(wav)
        feats = feats - feats.mean(dim=1, keepdim=True)  # sentence mean norm, std_norm=False
        return self.embedding_model(feats)[:, 0, :]


def load_encoder(checkpoint: str) -> EcapaEncoder:
    """The encoder in eval mode with SpeechBrain's checkpoint (all keys must match)."""
    encoder = EcapaEncoder()
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    encoder.embedding_model.load_state_dict(_without_denormals(state), strict=True)
    return encoder.eval()


def _without_denormals(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Subnormal floats set to zero. The checkpoint holds ~73,000 of them (units that died in
    training, mostly in the attentive pooling); x86 arithmetic on subnormals is microcoded and
    made matrix products up to 50x slower here. Their effect on an embedding is below 1e-30."""
    tiny = torch.finfo(torch.float32).tiny
    return {
        key: torch.where(value.abs() < tiny, torch.zeros_like(value), value)
        if value.is_floating_point()
        else value
        for key, value in state.items()
    }
