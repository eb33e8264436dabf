"""Datasets: the synthetic ADE20K-layout generator, the data checks
(``CheckedSegDataset``, ``CheckSegSample``) and the input-corruption
transform ``ImageCorruption`` (the ImageNet-C corruptions of the
``imagecorruptions`` package, see :mod:`.corruption_library`), registered
in mmseg."""
from .checks import CheckSegSample, checked_seg_dataset
from .corruption_transform import ImageCorruption

__all__ = [
    'CheckSegSample', 'ImageCorruption',
    'checked_seg_dataset'
]
