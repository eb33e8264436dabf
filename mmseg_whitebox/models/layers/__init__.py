"""Blocks shared by decode heads and backbones (as mmseg's
``models/utils`` and timm's ``layers``): the pre-norm residual block, its
cross-attention form, the builder that makes an attention operator from
``attn_cfg=dict(type='CBSA', ...)``, the published white-box encoders'
patch embeddings, and the hook that lays gradients out as their parameters
(for DDP)."""
from .blocks import CrossPreNormResidual, PreNormResidual, WhiteBoxBlock
from .builder import ATTENTION_OPERATORS, build_attention, build_feedforward
from .grad_layout import keep_grad_layout
from .patch_stems import ConvPatchStem, NormedPatchEmbed

__all__ = [
    'ATTENTION_OPERATORS', 'ConvPatchStem', 'CrossPreNormResidual',
    'NormedPatchEmbed', 'PreNormResidual', 'WhiteBoxBlock',
    'build_attention', 'build_feedforward', 'keep_grad_layout'
]
