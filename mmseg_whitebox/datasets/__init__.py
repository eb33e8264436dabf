"""Datasets: the synthetic ADE20K-layout generator, and the data checks
(``CheckedSegDataset``, ``CheckSegSample``) registered in mmseg."""
from .checks import CheckSegSample, DatasetCheckError, checked_seg_dataset

__all__ = ['CheckSegSample', 'DatasetCheckError', 'checked_seg_dataset']
