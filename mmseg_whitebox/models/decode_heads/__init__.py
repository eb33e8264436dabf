from .cbsa_head import CBSAHead
from .mask_classification_head import JointTokenHead, MaskClassificationHead
from .mssa_head import MSSAHead
from .segmenter_mask_head import SegmenterMaskTransformerHeadReleasedInit
from .tssa_head import TSSAHead

__all__ = [
    'CBSAHead', 'JointTokenHead', 'MaskClassificationHead', 'MSSAHead',
    'SegmenterMaskTransformerHeadReleasedInit', 'TSSAHead'
]
