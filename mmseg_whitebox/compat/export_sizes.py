"""Graphs valid at every input size, applied by the ONNX export only
(mmsegmentation 1.2.2 and onedl-mmsegmentation 1.4.2, mmcv 2.1; torch's
dynamo exporter, torch >= 2.5).

*What it patches.* The ``_pos_embeding`` of each mmseg
``VisionTransformer`` (``WhiteBoxViT`` too) and the ``forward`` of each
mmseg/mmcv ``AdaptivePadding`` in the exported model, as instance
attributes inside :func:`export_friendly` only.

*Why.* Both branch on the input size in Python: the embedding is resized
only when the token count differs from the training grid, the padding is
applied only when some is needed. ``torch.export`` takes the branch of
the export size once, so the graph would be wrong at other sizes. Here
both always run: at the training grid the bicubic resize is the
identity, and a padding of zero changes nothing.
"""
from __future__ import annotations

import contextlib
import types
from typing import Iterator, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


def _resized_pos_embedding(self, patched_img: torch.Tensor,
                           hw_shape: Tuple[int, int],
                           pos_embed: torch.Tensor) -> torch.Tensor:
    """mmseg's ``VisionTransformer._pos_embeding`` without its size test."""
    pos_h = self.img_size[0] // self.patch_size
    pos_w = self.img_size[1] // self.patch_size
    if pos_embed.shape[1] != pos_h * pos_w + 1:  # mmseg's own error
        return type(self)._pos_embeding(self, patched_img, hw_shape, pos_embed)
    pos_embed = self.resize_pos_embed(pos_embed, hw_shape, (pos_h, pos_w),
                                      self.interpolate_mode)
    return self.drop_after_pos(patched_img + pos_embed)


def _always_padded(self, x: torch.Tensor) -> torch.Tensor:
    """``AdaptivePadding.forward`` padding at every size (zero where none
    is needed), in symbolic-size arithmetic."""
    pads = []
    for size, kernel, stride, dilation in zip(x.shape[-2:], self.kernel_size,
                                              self.stride, self.dilation):
        reach = (kernel - 1) * dilation + 1
        pad = ((size + stride - 1) // stride - 1) * stride + reach - size
        # never negative when the kernel reaches a stride (patch embeddings)
        pads.append(pad if reach >= stride else torch.sym_max(pad, 0))
    pad_h, pad_w = pads
    if self.padding == 'corner':
        return F.pad(x, [0, pad_w, 0, pad_h])
    return F.pad(
        x, [pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2])


@contextlib.contextmanager
def export_friendly(model: nn.Module) -> Iterator[nn.Module]:
    """Inside the block ``model`` exports to a graph valid at any input
    size (module docstring); outside it, the model is as before."""
    from mmcv.cnn.bricks.transformer import AdaptivePadding as MMCVPadding
    from mmseg.models.backbones import VisionTransformer
    from mmseg.models.utils.embed import AdaptivePadding
    patched = []
    for module in model.modules():
        if isinstance(module, VisionTransformer):
            patched.append((module, '_pos_embeding', _resized_pos_embedding))
        elif isinstance(module, (AdaptivePadding, MMCVPadding)):
            patched.append((module, 'forward', _always_padded))
    for module, name, function in patched:
        setattr(module, name, types.MethodType(function, module))
    try:
        yield model
    finally:
        for module, name, _ in patched:
            delattr(module, name)
