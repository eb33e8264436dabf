"""Models registered with mmseg's ``MODELS`` registry: the layer library
shared by heads and backbones (``layers``), the white-box backbone, the
decode heads and a segmentor with bounded test-time memory."""
from . import layers
from .backbones import WhiteBoxViT
from .decode_heads import (CBSAHead, DEPICTHead, JointTokenHead,
                           MaskClassificationHead, MSSAHead, TSSAHead)
from .segmentors import BoundedMemoryEncoderDecoder

__all__ = [
    'BoundedMemoryEncoderDecoder', 'CBSAHead', 'DEPICTHead', 'JointTokenHead',
    'MaskClassificationHead', 'MSSAHead', 'TSSAHead', 'WhiteBoxViT', 'layers'
]
