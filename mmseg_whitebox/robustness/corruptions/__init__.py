"""Input corruptions: the ImageNet-C corruptions (Hendrycks & Dietterich,
ICLR 2019) inside mmseg's test pipeline, and the corruption benchmark's
summary (mPC, rPC, as mmdetection's ``tools/analysis_tools/
test_robustness.py``).

The corruptions are those of the ``imagecorruptions`` package (the
``corruptions`` extra: ``pip install 'mmseg-whitebox[corruptions]'``), the
same definitions mmdetection's benchmark uses; nothing here re-implements
them. Its last release (1.1.2) calls three APIs that newer libraries
removed; :func:`load_imagecorruptions` maps them to their replacements in
that module's namespace only
(:mod:`mmseg_whitebox.compat.imagecorruptions`):

* ``pkg_resources.resource_filename`` (gone from recent setuptools, e.g.
  84): the frost images are found next to the module;
* ``skimage.filters.gaussian(multichannel=True)`` (removed from
  scikit-image: ``channel_axis=-1``, the fix upstream merged but never
  released);
* ``numpy.float_`` (NumPy 2: ``numpy.float64``).

One more change makes the corruptions reproducible: scikit-image's
``random_noise`` (impulse noise) no longer follows ``numpy.random.seed``,
so it gets a seed drawn from the seeded global generator.

:class:`ImageCorruption` (registered in mmseg's ``TRANSFORMS``) corrupts
``results['img']`` after ``LoadImageFromFile``, deterministically per image:
the seed is a hash of ``seed``, the corruption and the image file name (not
the severity, so every severity of a corruption draws the same random
numbers and a curve over severity shows the severity, not the draw).
Labels are not touched.

Modules: :mod:`mmseg_whitebox.datasets.corruption_library` (the
library, names, severities), :mod:`mmseg_whitebox.datasets.corruption_transform`
(:func:`corrupt_image`, :class:`ImageCorruption`), :mod:`.report` (mPC, rPC, table, plot) and :mod:`.benchmark` (the pipeline
change, the resumable store and the evaluation loop).
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
