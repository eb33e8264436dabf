"""Models registered with mmseg's ``MODELS`` registry."""
from .decode_heads import (CBSAHead, DEPICTHead, MaskClassificationHead,
                           TSSAHead)

__all__ = ['CBSAHead', 'DEPICTHead', 'MaskClassificationHead', 'TSSAHead']
