"""Models registered with mmseg's ``MODELS`` registry: the layer library
shared by heads and backbones (``layers``), the white-box backbone and the
decode heads."""
from . import layers
from .backbones import WhiteBoxViT
from .decode_heads import (CBSAHead, DEPICTHead, JointTokenHead,
                           MaskClassificationHead, MSSAHead, TSSAHead)

__all__ = [
    'CBSAHead', 'DEPICTHead', 'JointTokenHead', 'MaskClassificationHead',
    'MSSAHead', 'TSSAHead', 'WhiteBoxViT', 'layers'
]
