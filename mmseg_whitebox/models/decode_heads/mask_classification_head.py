"""The mask-classification frame shared by Segmenter-style decoders.

Written once for every white-box head (CBSA, DEPICT, ToST), as in the
Segmenter, DEPICT and CBT papers: ``K`` learnable class embeddings are
processed together with the encoder's patch tokens; at the end patch and
class features are L2-normalised, ``masks = patches @ classes^T``, a
LayerNorm over the ``K`` classes, reshaped to the token grid (any ``H x W``)
and upsampled by mmseg's ``BaseDecodeHead`` as usual.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model.weight_init import constant_init, trunc_normal_init
from mmseg.models.decode_heads.decode_head import BaseDecodeHead

from mmseg_whitebox.ops import SubspaceAttention
from mmseg_whitebox.ops.subspace import eager_inference


def _has_hooks(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def add_update(x: torch.Tensor, update: torch.Tensor,
               module: nn.Module) -> torch.Tensor:
    """``x + update``, where ``update`` is what ``module`` returned.

    For inference, where the update is a fresh tensor of ``x``'s shape and
    dtype that nothing else holds, it is summed in place: the residual step
    then allocates (and, on a CPU, page-faults in) no new token-sized
    buffer. Out of place when gradients flow, when ``module`` has forward
    hooks (they may keep its output), and for a lower-precision update
    (autocast), so the residual stream keeps ``x``'s dtype.
    """
    if (eager_inference(update) and not module._forward_hooks
            and update.shape == x.shape and update.dtype == x.dtype
            and update.is_contiguous() and update._base is None
            and update.data_ptr() != x.data_ptr()):
        return update.add_(x)
    return x + update


class PreNormResidual(nn.Module):
    """``x + attn(LayerNorm(x), ...)``: one white-box layer (no MLP).

    The attention update is the output of ``self.attn``, so analysis tools
    can read or remove it with a forward hook on that submodule.

    Args:
        dim: token width.
        attn: the attention operator.
        inplace: for inference, let an operator that can sum its update
            into the residual stream itself (``accepts_residual``, e.g.
            CBSA) do so in the input's memory, which is overwritten (as
            with ``nn.ReLU(inplace=True)``). Not while this layer or its
            operator has hooks, which may need the input or the update.
    """

    def __init__(self, dim: int, attn: nn.Module,
                 inplace: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = attn
        self.inplace = inplace

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        if (self.inplace and getattr(self.attn, 'accepts_residual', False)
                and not _has_hooks(self) and not _has_hooks(self.attn)):
            return self.attn(self.norm(x), residual=x, **kwargs)
        return add_update(x, self.attn(self.norm(x), **kwargs), self.attn)


class CrossPreNormResidual(PreNormResidual):
    """``query + attn(query, LayerNorm(x))`` (DEPICT-CA): the keys/values
    are normalised, the class queries are not, as in the published code."""

    def forward(self, query: torch.Tensor,  # type: ignore[override]
                x: torch.Tensor) -> torch.Tensor:
        return add_update(query, self.attn(query, self.norm(x)), self.attn)


class MaskClassificationHead(BaseDecodeHead):
    """Base class of the white-box heads.

    Args:
        in_channels: encoder width.
        channels: decoder width ``d``. The published decoders work at the
            encoder width (``channels == in_channels``, no input
            projection); otherwise a ``Linear`` projects the tokens first.
        init_std: std of the truncated-normal init of class embeddings and
            Linear layers (the published decoders use 0.02).
        **kwargs: :class:`BaseDecodeHead` arguments (``num_classes``,
            ``loss_decode``, ``ignore_index``, ``align_corners``, ...).

    Subclasses build their layers and implement :meth:`decode_tokens`.
    """

    def __init__(self,
                 in_channels: int,
                 channels: int,
                 init_std: float = 0.02,
                 **kwargs) -> None:
        kwargs.setdefault('dropout_ratio', 0.0)
        super().__init__(in_channels=in_channels, channels=channels,
                         **kwargs)
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
        return masks.transpose(1, 2).reshape(b, self.num_classes, h, w)


class JointTokenHead(MaskClassificationHead):
    """Heads whose layers process patch and class tokens together (class
    tokens appended after the patch grid), then one LayerNorm."""

    def __init__(self, in_channels: int, channels: int, **kwargs) -> None:
        super().__init__(in_channels, channels, **kwargs)
        self.decoder_norm = nn.LayerNorm(channels)

    def layer_kwargs(self, hw: Tuple[int, int]) -> dict:
        """Extra arguments every layer's attention needs (e.g. the grid)."""
        return {}

    def decode_tokens(self, patches, classes, hw):
        num_patches = patches.shape[1]
        x = torch.cat([patches, classes], dim=1)
        kwargs = self.layer_kwargs(hw)
        for layer in self.layers:
            x = layer(x, **kwargs)
        x = self.decoder_norm(x)
        return x[:, :num_patches], x[:, num_patches:]
