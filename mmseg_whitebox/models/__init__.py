"""Models registered with mmseg's ``MODELS`` registry: the layer library
shared by heads and backbones (``layers``), the white-box backbone, the
decode heads, a segmentor with bounded test-time memory and a data
preprocessor with Segmenter's test-time upsampling."""
from . import layers
from .backbones import WhiteBoxViT
from .data_preprocessors import ShortSideDataPreProcessor
from .decode_heads import (CBSAHead, DEPICTHead, JointTokenHead,
                           MaskClassificationHead, MSSAHead,
                           SegmenterMaskTransformerHeadReleasedInit, TSSAHead)
from .segmentors import BoundedMemoryEncoderDecoder

__all__ = [
    'BoundedMemoryEncoderDecoder', 'CBSAHead', 'DEPICTHead', 'JointTokenHead',
    'MaskClassificationHead', 'MSSAHead',
    'SegmenterMaskTransformerHeadReleasedInit', 'ShortSideDataPreProcessor',
    'TSSAHead', 'WhiteBoxViT', 'layers'
]
