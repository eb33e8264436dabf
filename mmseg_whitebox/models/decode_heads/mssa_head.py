"""The MSSA head: the DEPICT decoders (Wen & Li, NeurIPS 2024)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from mmcv.cnn import build_norm_layer
from mmseg.registry import MODELS

from ..layers import CrossPreNormResidual
from .mask_classification_head import JointTokenHead

MODES = ('sa', 'ca')
MSSA_DEFAULTS = dict(type='MSSA', num_heads=3, head_dim=100,
                     out_proj='tied', basis_init='scaled_normal')
CROSS_DEFAULTS = dict(type='CrossMSSA', head_dim=50)


@MODELS.register_module()
class MSSAHead(JointTokenHead):
    """DEPICT-SA or DEPICT-CA.

    ``'sa'``: ``num_layers`` pre-norm residual MSSA layers (no MLP) over
    patch tokens and class embeddings, then a norm. ``'ca'``: the MSSA
    layers over the patches alone (then a norm), then ``num_cross_layers``
    CrossMSSA layers in which the class embeddings query the patches, with
    a residual on the queries (then a norm).

    Args:
        mode: ``'sa'`` or ``'ca'``.
        num_layers: self-attention depth (published: 3).
        attn_cfg: the MSSA operator, over the published defaults.
        num_cross_layers: CA depth (published: 3).
        cross_attn_cfg: the cross operator, merged over ``attn_cfg`` and
            ``dict(type='CrossMSSA', head_dim=50)``.
    """

    def __init__(self,
                 mode: str = 'sa',
                 num_layers: int = 3,
                 attn_cfg: Optional[Dict[str, Any]] = None,
                 num_cross_layers: int = 3,
                 cross_attn_cfg: Optional[Dict[str, Any]] = None,
                 **kwargs) -> None:
        if mode not in MODES:
            raise ValueError(f'mode must be one of {MODES}, got {mode!r}')
        attn_cfg = {**MSSA_DEFAULTS, **(attn_cfg or {})}
        cross_cfg = {**attn_cfg, **CROSS_DEFAULTS, **(cross_attn_cfg or {})}
        super().__init__(num_layers=num_layers, attn_cfg=attn_cfg, **kwargs)
        self.mode = mode
        if mode != 'ca':
            return
        self.cross_layers = self.build_blocks(
            CrossPreNormResidual, cross_cfg, num_cross_layers)
        self.class_norm = build_norm_layer(self.norm_cfg, self.channels)[1]

    def decode_tokens(self, patches, classes, hw):
        if self.mode == 'sa':
            return super().decode_tokens(patches, classes, hw)
        for layer in self.layers:
            patches = layer(patches, hw=hw, grid_start=0)
        patches = self.decoder_norm(patches)
        for layer in self.cross_layers:
            classes = layer(classes, patches)
        return patches, self.class_norm(classes)
