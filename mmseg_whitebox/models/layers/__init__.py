"""Blocks shared by decode heads and backbones (as mmseg's
``models/utils`` and timm's ``layers``): the pre-norm residual block, its
cross-attention form, and the builder that makes an attention operator
from ``attn_cfg=dict(type='CBSA', ...)``."""
from .blocks import CrossPreNormResidual, PreNormResidual, WhiteBoxBlock
from .builder import ATTENTION_OPERATORS, build_attention, build_feedforward

__all__ = [
    'ATTENTION_OPERATORS', 'CrossPreNormResidual', 'PreNormResidual',
    'WhiteBoxBlock', 'build_attention', 'build_feedforward'
]
