"""The mask-classification frame of the white-box heads (Segmenter,
DEPICT, CBT): ``K`` learnable class embeddings are processed with the patch
tokens; then ``masks = LayerNorm_K(normalise(patches) @
normalise(classes)^T)`` on the token grid, upsampled by mmseg's
``BaseDecodeHead``.
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
    """``dst.copy_(src)`` image by image: torch copies a transposed 2-D
    matrix block by block, but a batched transposed view column by column
    (several times slower on a CPU at power-of-two token counts)."""
    for i in range(dst.shape[0]):
        dst[i].copy_(src[i])
    return dst


class MaskClassificationHead(BaseDecodeHead):
    """Base class of the white-box heads.

    Args:
        in_channels: encoder width.
        channels: decoder width ``d`` (published: ``in_channels``; else a
            ``Linear`` projects the tokens first).
        init_std: std of the truncated-normal init of class embeddings and
            Linear layers.
        norm_cfg: the decoder layers' norms (default LayerNorm).
        **kwargs: :class:`BaseDecodeHead` arguments.

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
        """``num`` blocks of type ``block`` at the decoder width."""
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
        for module in self.modules():
            if isinstance(module, SubspaceAttention):
                module.reset_parameters()

    @abstractmethod
    def decode_tokens(self, patches: torch.Tensor, classes: torch.Tensor,
                      hw: Tuple[int, int]
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(B, HW, d)`` patches, ``(B, K, d)`` classes -> final
        features."""

    def forward(self, inputs: List[torch.Tensor]) -> torch.Tensor:
        x = self._transform_inputs(inputs)  # (B, C, H, W)
        b, _, h, w = x.shape
        patches = self.dec_proj(x.flatten(2).transpose(1, 2))
        classes = self.cls_emb.expand(b, -1, -1)
        patches, classes = self.decode_tokens(patches, classes, (h, w))
        classes = F.normalize(classes, dim=-1)
        # L2-normalised patches: similarities divided by the patch norms
        norms = torch.linalg.vector_norm(patches, dim=-1, keepdim=True)
        similarities = torch.matmul(patches, classes.transpose(1, 2))
        masks = self.mask_norm(similarities.div_(norms.clamp_min(1e-12)))
        # contiguous class maps: resizing the transposed view is slower
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
        # torch.cat([patches, classes], dim=1) without its slow copy; the
        # dtype promoted only when needed (it breaks a torch.compile graph)
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
