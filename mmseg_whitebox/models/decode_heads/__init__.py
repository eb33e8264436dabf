from .cbsa_head import CBSAHead
from .depict_head import DEPICTHead
from .mask_frame import MaskClassificationHead
from .tssa_head import TSSAHead

__all__ = ['CBSAHead', 'DEPICTHead', 'MaskClassificationHead', 'TSSAHead']
