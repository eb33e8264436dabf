"""Models registered with mmseg's ``MODELS``: shared layers, the white-box
backbone, decode heads, segmentors with bounded test-time memory and
banded training loss, and Segmenter's test-time upsampling."""
from . import layers, losses
from .attention_registry import register_attention
from .backbones import WhiteBoxViT
from .data_preprocessors import ShortSideDataPreProcessor
from .decode_heads import (CBSAHead, JointTokenHead, MaskClassificationHead,
                           MSSAHead, SegmenterMaskTransformerHeadReleasedInit,
                           TSSAHead)
from .segmentors import (BandedLossEncoderDecoder,
                         BoundedMemoryEncoderDecoder)

__all__ = [
    'BandedLossEncoderDecoder', 'BoundedMemoryEncoderDecoder', 'CBSAHead',
    'JointTokenHead', 'MaskClassificationHead', 'MSSAHead',
    'SegmenterMaskTransformerHeadReleasedInit', 'ShortSideDataPreProcessor',
    'TSSAHead', 'WhiteBoxViT', 'layers', 'losses', 'register_attention'
]
