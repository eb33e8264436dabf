"""Datasets: the synthetic ADE20K-layout generator, and the data checks
(``CheckedSegDataset``, ``CheckSegSample``) registered in mmseg, and the
input-corruption transform ``ImageCorruption`` (registered from
:mod:`mmseg_whitebox.robustness.corruptions`)."""
from ..robustness.corruptions import ImageCorruption  # noqa: F401
from .checks import CheckSegSample, DatasetCheckError, checked_seg_dataset

__all__ = ['CheckSegSample', 'DatasetCheckError', 'checked_seg_dataset']
