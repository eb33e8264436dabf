"""Blocks shared by decode heads and backbones: the pre-norm residual
blocks, the attention builder, the published encoders' patch embeddings
and the gradient-layout hook for DDP."""
from .blocks import CrossPreNormResidual, PreNormResidual, WhiteBoxBlock
from .builder import ATTENTION_OPERATORS, build_attention, build_feedforward
from .grad_layout import keep_grad_layout
from .patch_stems import ConvPatchStem, NormedPatchEmbed

__all__ = [
    'ATTENTION_OPERATORS', 'ConvPatchStem', 'CrossPreNormResidual',
    'NormedPatchEmbed', 'PreNormResidual', 'WhiteBoxBlock',
    'build_attention', 'build_feedforward', 'keep_grad_layout'
]
