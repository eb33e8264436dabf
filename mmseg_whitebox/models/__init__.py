"""Models registered with mmseg's ``MODELS`` registry: the layer library
shared by heads and backbones (``layers``), the white-box backbone, the
decode heads, segmentors with bounded test-time memory and with the
training loss in bands of rows (``losses``), and a data preprocessor with
Segmenter's test-time upsampling."""
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
