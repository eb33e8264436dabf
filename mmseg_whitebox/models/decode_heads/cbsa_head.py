"""CBT decoder: the CBSA head (CBSA paper, Sec. 4.2)."""
from __future__ import annotations

from typing import Tuple, Union

import torch.nn as nn
from mmseg.registry import MODELS

from mmseg_whitebox.ops import CBSA
from .mask_frame import JointTokenHead, PreNormResidual


@MODELS.register_module()
class CBSAHead(JointTokenHead):
    """Contract-and-Broadcast Transformer decoder.

    ``num_layers`` pre-LayerNorm residual CBSA layers (no MLP) over the
    patch tokens and the appended class embeddings, then the mask frame.
    Representatives are pooled from the patch grid only; the class tokens
    take part in extraction and receive the broadcast.

    Args:
        num_layers: decoder depth (published: 3).
        num_heads: subspaces per layer (published at ViT-T: 3).
        head_dim: subspace dimension (published: 100).
        rep_grid: grid of representatives per subspace (published: 10x10).
        out_proj: ``'linear'`` (CBT) or ``'tied'`` (the rigorous CBT-dagger,
            no output linear).
        basis_init: how the bases ``U`` start (see
            :class:`~mmseg_whitebox.ops.SubspaceAttention`).
        **kwargs: :class:`MaskClassificationHead` / ``BaseDecodeHead``
            arguments (``in_channels``, ``channels``, ``num_classes``, ...).
    """

    def __init__(self,
                 num_layers: int = 3,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 rep_grid: Union[int, Tuple[int, int]] = (10, 10),
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.layers = nn.ModuleList(
            PreNormResidual(
                self.channels,
                CBSA(self.channels, num_heads, head_dim, rep_grid, out_proj,
                     basis_init, self.init_std),
                # the token stream is the head's own: for inference each
                # layer may sum its update into it in place
                inplace=True)
            for _ in range(num_layers))

    def layer_kwargs(self, hw: Tuple[int, int]) -> dict:
        return dict(hw=hw, grid_start=0)
