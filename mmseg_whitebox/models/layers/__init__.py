"""Blocks shared by decode heads and backbones (as mmseg's
``models/utils`` and timm's ``layers``): the pre-norm residual block, its
cross-attention form, the builder that makes an attention operator from
``attn_cfg=dict(type='CBSA', ...)``, and the published white-box encoders'
patch embeddings."""
from .blocks import CrossPreNormResidual, PreNormResidual, WhiteBoxBlock
from .builder import ATTENTION_OPERATORS, build_attention, build_feedforward
from .patch_stems import ConvPatchStem, NormedPatchEmbed

__all__ = [
    'ATTENTION_OPERATORS', 'ConvPatchStem', 'CrossPreNormResidual',
    'NormedPatchEmbed', 'PreNormResidual', 'WhiteBoxBlock',
    'build_attention', 'build_feedforward'
]
