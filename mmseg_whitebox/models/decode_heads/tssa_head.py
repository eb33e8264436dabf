"""ToST decoder: TSSA in the Segmenter/DEPICT decoder frame."""
from __future__ import annotations

import torch.nn as nn
from mmseg.registry import MODELS

from mmseg_whitebox.ops import TSSA
from .mask_frame import JointTokenHead, PreNormResidual


@MODELS.register_module()
class TSSAHead(JointTokenHead):
    """``num_layers`` pre-LayerNorm residual TSSA layers (no MLP) over patch
    tokens and class embeddings together, then the mask frame. Cost is
    linear in the number of tokens.

    Args:
        num_layers, num_heads, head_dim: decoder depth and subspaces (as
            the other white-box decoders: 3 layers, 3 heads x 100).
        out_proj, basis_init: see :class:`~mmseg_whitebox.ops.TSSA`.
    """

    def __init__(self,
                 num_layers: int = 3,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 out_proj: str = 'linear',
                 basis_init: str = 'trunc_normal',
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.layers = nn.ModuleList(
            PreNormResidual(
                self.channels,
                TSSA(self.channels, num_heads, head_dim, out_proj,
                     basis_init, self.init_std)) for _ in range(num_layers))
