"""Input corruptions: the ImageNet-C corruptions (Hendrycks & Dietterich,
ICLR 2019) of the ``imagecorruptions`` package (the ``corruptions``
extra) inside mmseg's test pipeline, and the benchmark's summary (mPC,
rPC, as mmdetection's ``tools/analysis_tools/test_robustness.py``).

The library and its compatibility fixes:
:mod:`mmseg_whitebox.datasets.corruption_library` and
:mod:`mmseg_whitebox.compat.imagecorruptions`; the transform
(:class:`ImageCorruption`, seeded per image and corruption, not per
severity): :mod:`mmseg_whitebox.datasets.corruption_transform`; the
numbers, table and plot: :mod:`.report`; the pipeline change, store and
evaluation loop: :mod:`.benchmark`.
"""
from mmseg_whitebox.datasets.corruption_library import (
    GROUPS, INSTALL_HINT, SEVERITIES, check_severities,
    corruption_names, load_imagecorruptions, resolve_corruptions)
from mmseg_whitebox.datasets.corruption_transform import (ImageCorruption,
                                                          corrupt_image,
                                                          image_seed)
from .benchmark import (CorruptionBenchmark, CorruptionStore,
                        build_corruption_runner, find_corruption_transforms,
                        insert_corruption_transform)
from .corruption_robustness import CorruptionOptions, run_corruption_benchmark
from .report import (corruption_summary, markdown_table, plot_corruptions,
                     table_rows)

__all__ = [
    'GROUPS', 'INSTALL_HINT', 'SEVERITIES', 'CorruptionBenchmark',
    'CorruptionOptions', 'CorruptionStore',
    'ImageCorruption',
    'build_corruption_runner', 'check_severities', 'corrupt_image',
    'corruption_names', 'corruption_summary', 'find_corruption_transforms',
    'image_seed', 'insert_corruption_transform', 'load_imagecorruptions',
    'markdown_table', 'plot_corruptions',
    'resolve_corruptions', 'run_corruption_benchmark', 'table_rows'
]
