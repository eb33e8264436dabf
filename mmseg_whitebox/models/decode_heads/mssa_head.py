"""DEPICT decoders (Wen & Li, NeurIPS 2024): MSSA as a decoder."""
from __future__ import annotations

import torch.nn as nn
from mmseg.registry import MODELS

from mmseg_whitebox.ops import MSSA, CrossMSSA
from .mask_frame import CrossPreNormResidual, JointTokenHead, PreNormResidual

MODES = ('sa', 'ca')


@MODELS.register_module()
class DEPICTHead(JointTokenHead):
    """DEPICT-SA or DEPICT-CA.

    ``mode='sa'``: ``num_layers`` pre-LayerNorm residual MSSA layers over
    patch tokens and class embeddings together (no MLP), then one
    LayerNorm. Each MSSA projects back through its own bases (tied) times a
    learnable scalar step size.

    ``mode='ca'``: ``num_layers`` MSSA layers over the patch tokens alone
    (then a LayerNorm), followed by ``num_cross_layers`` cross-attention
    MSSA layers in which the class embeddings query the patch tokens
    through shared bases of ``cross_head_dim`` dims, with a residual on the
    class queries (then a LayerNorm).

    Args:
        mode: ``'sa'`` or ``'ca'``.
        num_layers, num_heads, head_dim: the self-attention part
            (published: 3 layers, 3 heads x 100 at ViT-T).
        num_cross_layers, cross_head_dim: the CA part (published: 3, 50).
        out_proj, basis_init: see :class:`~mmseg_whitebox.ops.MSSA`
            (published: tied, N(0, 1/d)).
    """

    def __init__(self,
                 mode: str = 'sa',
                 num_layers: int = 3,
                 num_heads: int = 3,
                 head_dim: int = 100,
                 num_cross_layers: int = 3,
                 cross_head_dim: int = 50,
                 out_proj: str = 'tied',
                 basis_init: str = 'scaled_normal',
                 **kwargs) -> None:
        if mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
        super().__init__(**kwargs)
        self.mode = mode
        d = self.channels
        self.layers = nn.ModuleList(
            PreNormResidual(
                d,
                MSSA(d, num_heads, head_dim, out_proj, basis_init,
                     self.init_std)) for _ in range(num_layers))
        if mode == 'ca':
            self.cross_layers = nn.ModuleList(
                CrossPreNormResidual(
                    d,
                    CrossMSSA(d, num_heads, cross_head_dim, out_proj,
                              basis_init, self.init_std))
                for _ in range(num_cross_layers))
            self.class_norm = nn.LayerNorm(d)

    def decode_tokens(self, patches, classes, hw):
        if self.mode == 'sa':
            return super().decode_tokens(patches, classes, hw)
        for layer in self.layers:
            patches = layer(patches)
        patches = self.decoder_norm(patches)
        for layer in self.cross_layers:
            classes = layer(classes, patches)
        return patches, self.class_norm(classes)
