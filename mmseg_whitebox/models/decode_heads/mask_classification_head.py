"""The mask-classification frame shared by Segmenter-style decoders.

Written once for every white-box head (CBSA, MSSA, TSSA), as in the
Segmenter, DEPICT and CBT papers: ``K`` learnable class embeddings are
processed together with the encoder's patch tokens; at the end patch and
class features are L2-normalised, ``masks = patches @ classes^T``, a
LayerNorm over the ``K`` classes, reshaped to the token grid (any ``H x W``)
and upsampled by mmseg's ``BaseDecodeHead`` as usual.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmengine.model.weight_init import constant_init, trunc_normal_init
from mmseg.models.decode_heads.decode_head import BaseDecodeHead

from mmseg_whitebox.ops import SubspaceAttention
from ..layers import PreNormResidual


def _copy_by_image(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """``dst.copy_(src)`` image by image (``dst`` contiguous, ``src``
    often a transposed view, e.g. the encoder's ``(B, d, H, W)`` map read
    as ``(B, HW, d)`` tokens). torch copies a transposed 2-D matrix block
    by block; a batched copy of the same view (``torch.cat``,
    ``.contiguous()``) reads it column by column, and with a power-of-two
    token count those reads keep landing in the same cache sets: 2x (64x64
    tokens) to 4x (128x128) slower on a CPU. Returns ``dst``."""
    for i in range(dst.shape[0]):
        dst[i].copy_(src[i])
    return dst


class MaskClassificationHead(BaseDecodeHead):
    """Base class of the white-box heads.

    Args:
        in_channels: encoder width.
        channels: decoder width ``d``. The published decoders work at the
            encoder width (``channels == in_channels``, no input
            projection); otherwise a ``Linear`` projects the tokens first.
        init_std: std of the truncated-normal init of class embeddings and
            Linear layers (the published decoders use 0.02).
        norm_cfg: the norms of the decoder layers (mmcv's
            ``build_norm_layer``; default LayerNorm, as published).
        **kwargs: :class:`BaseDecodeHead` arguments (``num_classes``,
            ``loss_decode``, ``ignore_index``, ``align_corners``, ...).

    Subclasses build their layers and implement :meth:`decode_tokens`.
    """

    def __init__(self,
                 in_channels: int,
                 channels: int,
                 init_std: float = 0.02,
                 norm_cfg: Optional[Dict[str, Any]] = None,
                 **kwargs) -> None:
        kwargs.setdefault('dropout_ratio', 0.0)
        super().__init__(in_channels=in_channels, channels=channels,
                         norm_cfg=norm_cfg or dict(type='LN'), **kwargs)
        if self.input_transform is not None:
            raise ValueError('mask-classification heads take one feature '
                             'map: leave input_transform unset')
        self.init_std = init_std
        self.dec_proj = (nn.Identity() if in_channels == channels else
                         nn.Linear(in_channels, channels))
        self.cls_emb = nn.Parameter(
            torch.zeros(1, self.num_classes, channels))
        self.mask_norm = nn.LayerNorm(self.num_classes)
        del self.conv_seg  # masks come from patch/class similarities

    def build_blocks(self, block: type, attn_cfg: Dict[str, Any],
                     num: int) -> nn.ModuleList:
        """``num`` blocks of type ``block`` at the decoder width, with this
        head's norms and init std."""
        return nn.ModuleList(
            block(self.channels, attn_cfg, self.norm_cfg,
                  init_std=self.init_std) for _ in range(num))

    def init_weights(self) -> None:
        nn.init.trunc_normal_(self.cls_emb, std=self.init_std)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                trunc_normal_init(module, std=self.init_std, bias=0)
            elif isinstance(module, nn.LayerNorm):
                constant_init(module, val=1.0, bias=0.0)
        # the attention operators initialise themselves as published
        for module in self.modules():
            if isinstance(module, SubspaceAttention):
                module.reset_parameters()

    @abstractmethod
    def decode_tokens(self, patches: torch.Tensor, classes: torch.Tensor,
                      hw: Tuple[int, int]
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Process ``(B, HW, d)`` patch tokens and ``(B, K, d)`` class
        embeddings; return the final (normalised-by-LayerNorm) features."""

    def forward(self, inputs: List[torch.Tensor]) -> torch.Tensor:
        x = self._transform_inputs(inputs)  # (B, C, H, W)
        b, _, h, w = x.shape
        patches = self.dec_proj(x.flatten(2).transpose(1, 2))
        classes = self.cls_emb.expand(b, -1, -1)
        patches, classes = self.decode_tokens(patches, classes, (h, w))
        classes = F.normalize(classes, dim=-1)
        # L2-normalising the patches = dividing their similarities by the
        # patch norms: an (N, K) pass instead of an (N, d) copy
        norms = torch.linalg.vector_norm(patches, dim=-1, keepdim=True)
        similarities = torch.matmul(patches, classes.transpose(1, 2))
        masks = self.mask_norm(similarities.div_(norms.clamp_min(1e-12)))
        # contiguous class maps, as mmseg's heads return: resizing the
        # transposed view is several times slower
        maps = masks.new_empty(b, self.num_classes, h * w)
        return _copy_by_image(maps, masks.transpose(1, 2)).view(
            b, self.num_classes, h, w)


class JointTokenHead(MaskClassificationHead):
    """Heads whose ``num_layers`` pre-norm residual layers of one operator
    (``attn_cfg``) process patch and class tokens together (class tokens
    appended after the patch grid), then one norm.

    Args:
        num_layers: decoder depth.
        attn_cfg: the operator (``dict(type=..., ...)``, see
            :func:`~mmseg_whitebox.models.layers.build_attention`).
    """

    def __init__(self, in_channels: int, channels: int, num_layers: int,
                 attn_cfg: Dict[str, Any], **kwargs) -> None:
        super().__init__(in_channels, channels, **kwargs)
        self.layers = self.build_blocks(PreNormResidual, attn_cfg,
                                        num_layers)
        self.decoder_norm = build_norm_layer(self.norm_cfg, channels)[1]

    def decode_tokens(self, patches, classes, hw):
        b, num_patches, d = patches.shape
        # torch.cat([patches, classes], dim=1) without its slow copy of the
        # transposed feature map
        # (the promoted dtype, asked of torch only when the two differ:
        # a dtype-valued torch call breaks a torch.compile graph)
        dtype = patches.dtype
        if classes.dtype != dtype:  # autocast: float32 class embeddings
            dtype = torch.promote_types(dtype, classes.dtype)
        x = patches.new_empty(b, num_patches + classes.shape[1], d,
                              dtype=dtype)
        _copy_by_image(x[:, :num_patches], patches)
        x[:, num_patches:] = classes
        for layer in self.layers:
            x = layer(x, hw=hw, grid_start=0)
        x = self.decoder_norm(x)
        return x[:, :num_patches], x[:, num_patches:]
