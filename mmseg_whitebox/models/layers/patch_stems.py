"""Patch embeddings of the published white-box encoders, alternatives to
mmseg's ``PatchEmbed`` in
:class:`~mmseg_whitebox.models.backbones.WhiteBoxViT`. Both return
``(tokens (B, N, d), (H, W))`` and pad at the bottom and right (mmseg's
``'corner'``), so any input size works.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from mmseg.registry import MODELS


def pad_to_multiple(x: torch.Tensor, size: int) -> torch.Tensor:
    """Zero-pad ``(B, C, H, W)`` at the bottom and right to multiples of
    ``size``; always (maybe by zero), so an exported graph pads at every
    size."""
    h, w = x.shape[-2:]
    return F.pad(x, (0, -w % size, 0, -h % size))


@MODELS.register_module()
class ConvPatchStem(nn.Module):
    """The CBT classification model's convolutional stem: 3x3 stride-2
    convolutions (no bias) with BatchNorm, GELU between them, widening
    ``d/8 -> d/4 -> d/2 -> d`` (patch 16: four; patch 8: three, from
    ``d/4``). The last convolution has no activation.

    Args:
        in_channels: image channels.
        embed_dims: token width ``d``.
        patch_size: 16 or 8.
        norm_cfg: the norm after every convolution (default ``BN``; the
            configs set ``SyncBN``, as published).
    """

    def __init__(self,
                 in_channels: int = 3,
                 embed_dims: int = 192,
                 patch_size: int = 16,
                 norm_cfg: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        depths = {16: 4, 8: 3}
        if patch_size not in depths:
            raise ValueError('the convolutional stem exists for patch sizes '
                             f'16 and 8, not {patch_size}; use the linear '
                             'patch embedding (stem_cfg=None) for others')
        n = depths[patch_size]
        widths = [in_channels] + [embed_dims // 2**i for i in range(n)][::-1]
        self.patch_size = patch_size
        self.layers = nn.Sequential(*(
            ConvModule(c_in, c_out, 3, stride=2, padding=1, bias=False,
                       norm_cfg=norm_cfg or dict(type='BN'),
                       act_cfg=dict(type='GELU') if i < n - 1 else None)
            for i, (c_in, c_out) in enumerate(zip(widths, widths[1:]))))

    def forward(self, x: torch.Tensor
                ) -> Tuple[torch.Tensor, Tuple[int, int]]:
        x = self.layers(pad_to_multiple(x, self.patch_size))
        return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])


@MODELS.register_module()
class NormedPatchEmbed(nn.Module):
    """CRATE's patch embedding: each flattened ``P x P x C`` patch (pixel
    rows, then columns, then channels) is layer-normalised, mapped to ``d``
    by a linear layer, and normalised again.

    Args:
        in_channels, embed_dims, patch_size: as mmseg's ``PatchEmbed``.
        norm_cfg: both norms (LayerNorm, eps 1e-5, as published).
    """

    def __init__(self,
                 in_channels: int = 3,
                 embed_dims: int = 384,
                 patch_size: int = 16,
                 norm_cfg: Optional[Dict[str, Any]] = None) -> None:
        super().__init__()
        norm_cfg = norm_cfg or dict(type='LN')
        patch_dim = in_channels * patch_size**2
        self.patch_size = patch_size
        self.pre_norm = build_norm_layer(norm_cfg, patch_dim)[1]
        self.projection = nn.Linear(patch_dim, embed_dims)
        self.norm = build_norm_layer(norm_cfg, embed_dims)[1]

    def forward(self, x: torch.Tensor
                ) -> Tuple[torch.Tensor, Tuple[int, int]]:
        x = pad_to_multiple(x, self.patch_size)
        b, c, hp, wp = x.shape
        p = self.patch_size
        h, w = hp // p, wp // p
        patches = x.reshape(b, c, h, p, w, p).permute(0, 2, 4, 3, 5, 1)
        patches = patches.reshape(b, h * w, p * p * c)
        return self.norm(self.projection(self.pre_norm(patches))), (h, w)
