"""Input corruptions: the ImageNet-C corruptions (Hendrycks & Dietterich,
ICLR 2019) inside mmseg's test pipeline, and the corruption benchmark's
summary (mPC, rPC, as mmdetection's ``tools/analysis_tools/
test_robustness.py``).

The corruptions are those of the ``imagecorruptions`` package (the
``corruptions`` extra: ``pip install 'mmseg-whitebox[corruptions]'``), the
same definitions mmdetection's benchmark uses; nothing here re-implements
them. Its last release (1.1.2) calls three APIs that newer libraries
removed; :func:`load_imagecorruptions` maps them to their replacements in
that module's namespace only (nothing global is patched):

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
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import json
import math
import os
import os.path as osp
import sys
import time
import types
import warnings
import zlib
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

SEVERITIES = (1, 2, 3, 4, 5)
#: corruption groups of ``imagecorruptions.get_corruption_names``; the
#: 15 ImageNet-C benchmark corruptions are ``benchmark``
GROUPS = ('benchmark', 'all', 'noise', 'blur', 'weather', 'digital',
          'validation')
INSTALL_HINT = ("install the corruptions extra: pip install -e "
                "'.[corruptions]' (or pip install imagecorruptions==1.1.2 "
                "scikit-image)")


class CorruptionError(ValueError):
    """Bad corruption settings (name, severity) or an image the corruptions
    cannot take."""


# -- the library and its adapter -------------------------------------------
class _Namespace(types.ModuleType):
    """A module seen through a few replaced attributes (the rest are the
    module's own): lets one module call a renamed API without patching the
    library for everyone."""

    def __init__(self, base: types.ModuleType, **overrides: Any) -> None:
        super().__init__(base.__name__, getattr(base, '__doc__', None))
        self._base = base
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def _resource_filename(package: str, name: str) -> str:
    """``pkg_resources.resource_filename`` for a file inside a package."""
    return osp.normpath(osp.join(osp.dirname(sys.modules[package].__file__),
                                 name))


@contextlib.contextmanager
def _pkg_resources_fallback() -> Iterator[None]:
    """Provide ``pkg_resources.resource_filename`` while the library is
    imported when setuptools no longer ships ``pkg_resources``; removed
    again afterwards."""
    if importlib.util.find_spec('pkg_resources') is not None:
        yield
        return
    stub = types.ModuleType('pkg_resources')
    stub.resource_filename = _resource_filename
    sys.modules['pkg_resources'] = stub
    try:
        yield
    finally:
        if sys.modules.get('pkg_resources') is stub:
            del sys.modules['pkg_resources']


def _adapt(module: types.ModuleType) -> None:
    """Map the removed APIs ``imagecorruptions.corruptions`` calls to their
    replacements in that module's namespace (see module docstring)."""
    import skimage
    import skimage.filters
    import skimage.util

    gaussian = skimage.filters.gaussian
    if 'multichannel' not in inspect.signature(gaussian).parameters:

        @functools.wraps(gaussian)
        def gaussian_compat(image, *args, multichannel=None, **kwargs):
            if multichannel is not None:
                kwargs.setdefault('channel_axis',
                                  -1 if multichannel else None)
            return gaussian(image, *args, **kwargs)

        module.gaussian = gaussian_compat
    if not hasattr(np, 'float_'):
        module.np = _Namespace(np, float_=np.float64)
    random_noise = skimage.util.random_noise
    params = inspect.signature(random_noise).parameters
    key = 'rng' if 'rng' in params else 'seed' if 'seed' in params else None
    if key is not None:

        @functools.wraps(random_noise)
        def seeded_random_noise(image, *args, **kwargs):
            kwargs.setdefault(key, int(np.random.randint(2**31 - 1)))
            return random_noise(image, *args, **kwargs)

        module.sk = _Namespace(skimage, util=_Namespace(
            skimage.util, random_noise=seeded_random_noise))


@functools.lru_cache(maxsize=None)
def load_imagecorruptions() -> types.ModuleType:
    """The ``imagecorruptions`` package, adapted to this environment.

    Raises:
        ImportError: with install instructions, when it is missing.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # deprecated scipy namespaces
            with _pkg_resources_fallback():
                import imagecorruptions
                from imagecorruptions import corruptions
    except ImportError as exc:
        raise ImportError(f'image corruptions need the imagecorruptions '
                          f'package ({exc}); {INSTALL_HINT}') from exc
    _adapt(corruptions)
    return imagecorruptions


def corruption_names(group: str = 'all') -> List[str]:
    """The corruption names of a group of :data:`GROUPS` (``benchmark``:
    the 15 of the ImageNet-C benchmark; ``validation``: its 4 held-out
    ones; ``all``: both)."""
    if group not in GROUPS:
        raise CorruptionError(f'unknown corruption group {group!r}; groups: '
                              + ', '.join(GROUPS))
    lib = load_imagecorruptions()
    return list(lib.get_corruption_names(
        'common' if group == 'benchmark' else group))


def resolve_corruptions(names: Sequence[str]) -> List[str]:
    """Corruption names (and group names, expanded) in order, without
    repeats.

    Raises:
        CorruptionError: naming the unknown ones and listing the valid
            names and groups.
    """
    valid = corruption_names('all')
    out: List[str] = []
    unknown = []
    for name in names:
        if name in GROUPS:
            expanded = corruption_names(name)
        elif name in valid:
            expanded = [name]
        else:
            unknown.append(name)
            continue
        out += [n for n in expanded if n not in out]
    if unknown:
        raise CorruptionError(
            f'unknown corruption(s): {", ".join(map(repr, unknown))}; valid '
            f'names: {", ".join(valid)}; or groups: {", ".join(GROUPS)}')
    if not out:
        raise CorruptionError('no corruptions given')
    return out


def check_severities(severities: Sequence[Any]) -> List[int]:
    """Severities as sorted unique ints in 1..5.

    Raises:
        CorruptionError: for anything else.
    """
    bad = [s for s in severities
           if isinstance(s, bool) or not isinstance(s, (int, np.integer))
           or s not in SEVERITIES]
    if bad or not severities:
        raise CorruptionError(
            'severities must be integers in 1..5 (ImageNet-C levels), got '
            f'{list(severities)!r}')
    return sorted({int(s) for s in severities})


def image_seed(seed: int, corruption: str, key: str) -> int:
    """The per-image seed: stable across runs, processes and machines."""
    return zlib.crc32(f'{seed}|{corruption}|{key}'.encode()) & 0x7fffffff


@contextlib.contextmanager
def _numpy_seed(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (the library's only randomness) for
    the block; the previous state is restored, so nothing else is
    disturbed."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def corrupt_image(img: np.ndarray, corruption: str, severity: int,
                  seed: int = 0, channel_order: str = 'bgr') -> np.ndarray:
    """``img`` (H x W x 3 in ``channel_order``, or H x W; uint8 or float
    in 0..255) corrupted, with the same shape, dtype and channel order;
    the random parts drawn from ``seed``."""
    lib = load_imagecorruptions()
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (1,
                                                                         3)):
        raise CorruptionError(
            f'image corruptions take H x W x 3 or gray images, got shape '
            f'{tuple(img.shape)}')
    if min(img.shape[:2]) < 32:
        raise CorruptionError(
            f'image corruptions need images of at least 32 x 32 pixels, got '
            f'{img.shape[0]} x {img.shape[1]}')
    dtype, shape = img.dtype, img.shape
    u8 = img if dtype == np.uint8 else np.clip(np.rint(img), 0,
                                               255).astype(np.uint8)
    gray = u8.ndim == 2 or u8.shape[2] == 1
    if gray:
        rgb = np.repeat(u8.reshape(shape[:2] + (1, )), 3, axis=2)
    else:
        rgb = u8[..., ::-1] if channel_order == 'bgr' else u8
    with _numpy_seed(seed), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        out = lib.corrupt(np.ascontiguousarray(rgb),
                          corruption_name=corruption, severity=severity)
    if out.shape[:2] != shape[:2]:
        raise CorruptionError(
            f'{corruption} changed the image size from {shape[:2]} to '
            f'{out.shape[:2]}')
    if gray:
        out = np.rint(out.astype(np.float32) @ np.array(
            [0.299, 0.587, 0.114], np.float32)).clip(0, 255).astype(np.uint8)
        out = out.reshape(shape)
    elif channel_order == 'bgr':
        out = out[..., ::-1]
    return np.ascontiguousarray(out).astype(dtype, copy=False)


@TRANSFORMS.register_module()
class ImageCorruption(BaseTransform):
    """Corrupt ``results['img']`` with an ImageNet-C corruption (see module
    docstring); put it right after ``LoadImageFromFile``.

    Args:
        corruption: a name of :func:`corruption_names`; None leaves the
            image as it is (the clean reference).
        severity: 1..5.
        seed: base seed; each image's seed is derived from it, the
            corruption and the image's file name.
        channel_order: of the loaded image (mmcv loads ``'bgr'``).

    Required keys: ``img``; ``img_path`` (or ``sample_idx``) for the seed.
    Modified keys: ``img``.
    """

    def __init__(self,
                 corruption: Optional[str] = None,
                 severity: int = 1,
                 seed: int = 0,
                 channel_order: str = 'bgr') -> None:
        if channel_order not in ('bgr', 'rgb'):
            raise CorruptionError(
                f"channel_order must be 'bgr' or 'rgb', got {channel_order!r}")
        self.channel_order = channel_order
        self.seed = int(seed)
        self.set(corruption, severity)

    def set(self, corruption: Optional[str], severity: int = 1) -> None:
        """Switch to another corruption and severity (checked)."""
        if corruption is not None:
            resolve_corruptions([corruption])
            if corruption in GROUPS:
                raise CorruptionError(
                    f'ImageCorruption takes one corruption name, not the '
                    f'group {corruption!r}')
        self.severity = check_severities([severity])[0]
        self.corruption = corruption

    def image_key(self, results: Dict[str, Any]) -> str:
        path = results.get('img_path')
        if path:
            return osp.basename(str(path))
        return str(results.get('sample_idx', ''))

    def transform(self, results: Dict[str, Any]) -> Dict[str, Any]:
        if self.corruption is None:
            return results
        seed = image_seed(self.seed, self.corruption,
                          self.image_key(results))
        results['img'] = corrupt_image(results['img'], self.corruption,
                                       self.severity, seed,
                                       self.channel_order)
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(corruption={self.corruption!r}, '
                f'severity={self.severity}, seed={self.seed})')


# -- the benchmark's numbers ------------------------------------------------
def corruption_summary(clean: Optional[float],
                       results: Dict[str, Dict[Any, float]],
                       corruptions: Optional[Sequence[str]] = None,
                       severities: Optional[Sequence[int]] = None
                       ) -> Dict[str, Any]:
    """mPC and rPC of one metric (as mmdetection's benchmark).

    ``results[corruption][severity]`` is the metric under that corruption
    (severity keys int or str). Over the grid ``corruptions`` x
    ``severities`` (default: what ``results`` holds)::

        mPC = 1 / (|C| |S|) * sum_c sum_s P(c, s)
        rPC = mPC / P_clean

    Also per corruption the mean over severities and per severity the
    mean over corruptions. With points of the grid missing the means are
    over those present and ``complete`` is False.
    """
    if corruptions is None:
        corruptions = list(results)
    if severities is None:
        severities = sorted({int(s) for per in results.values()
                             for s in per})
    values: Dict[str, Dict[int, float]] = {}
    for c in corruptions:
        per = {int(s): float(v) for s, v in results.get(c, {}).items()}
        values[c] = {s: per[s] for s in severities if s in per}
    points = [v for per in values.values() for v in per.values()]
    mpc = sum(points) / len(points) if points else None
    rpc = mpc / clean if mpc is not None and clean else None
    per_corruption = {c: (sum(per.values()) / len(per) if per else None)
                      for c, per in values.items()}
    per_severity = {}
    for s in severities:
        vals = [per[s] for per in values.values() if s in per]
        per_severity[s] = sum(vals) / len(vals) if vals else None
    return dict(clean=clean, mPC=mpc, rPC=rpc,
                per_corruption=per_corruption, per_severity=per_severity,
                evaluated=len(points),
                expected=len(corruptions) * len(severities),
                complete=len(points) == len(corruptions) * len(severities))


def _fmt(value: Optional[float], digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '-'
    return f'{value:.{digits}f}'


def table_rows(summary: Dict[str, Any],
               results: Dict[str, Dict[Any, float]],
               severities: Sequence[int]) -> List[Dict[str, Any]]:
    """One row per corruption (columns: severity 1..5 and their mean),
    then the mean over corruptions (its mean is mPC) and the clean
    reference; numbers as floats (None where missing)."""
    rows = []
    for c, mean in summary['per_corruption'].items():
        per = {int(s): v for s, v in results.get(c, {}).items()}
        rows.append(dict(corruption=c,
                         **{f'severity {s}': per.get(s) for s in severities},
                         mean=mean))
    rows.append(dict(corruption='mean (mPC)',
                     **{f'severity {s}': summary['per_severity'].get(s)
                        for s in severities}, mean=summary['mPC']))
    rows.append(dict(corruption='clean',
                     **{f'severity {s}': None for s in severities},
                     mean=summary['clean']))
    return rows


def markdown_table(summary: Dict[str, Any],
                   results: Dict[str, Dict[Any, float]],
                   severities: Sequence[int],
                   metric: str = 'mIoU') -> str:
    """The table of :func:`table_rows` in Markdown, with mPC and rPC
    below it."""
    rows = table_rows(summary, results, severities)
    head = ['corruption'] + [f'severity {s}' for s in severities] + ['mean']
    lines = [f'{metric} under corruption',
             '',
             '| ' + ' | '.join(head) + ' |',
             '|' + '---|' + '---:|' * (len(head) - 1)]
    for r in rows:
        lines.append('| ' + ' | '.join([r['corruption']] + [
            _fmt(r[k]) for k in head[1:]]) + ' |')
    rpc = summary['rPC']
    lines += ['',
              f'clean {metric}: {_fmt(summary["clean"])}; mPC: '
              f'{_fmt(summary["mPC"])}; rPC: '
              + ('-' if rpc is None else f'{rpc:.4f} ({100 * rpc:.1f}%)')
              + ('' if summary['complete'] else
                 f' (partial: {summary["evaluated"]} of '
                 f'{summary["expected"]} corruption/severity points)')]
    return '\n'.join(lines) + '\n'


def plot_corruptions(summary: Dict[str, Any],
                     results: Dict[str, Dict[Any, float]],
                     severities: Sequence[int], out_file: str,
                     title: Optional[str] = None,
                     metric: str = 'mIoU') -> str:
    """``metric`` against severity, one line per corruption, with the mean
    over corruptions per severity, the mPC and the clean value as
    horizontal lines; returns ``out_file``."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    cmap = plt.get_cmap('tab20')
    for i, c in enumerate(summary['per_corruption']):
        per = {int(s): v for s, v in results.get(c, {}).items()}
        xs = [s for s in severities if s in per]
        if xs:
            ax.plot(xs, [per[s] for s in xs], 'o-', color=cmap(i % 20),
                    linewidth=1, markersize=3, label=c)
    xs = [s for s in severities if summary['per_severity'].get(s) is not None]
    if xs:
        ax.plot(xs, [summary['per_severity'][s] for s in xs], 's-',
                color='black', linewidth=2.5, label='mean over corruptions')
    if summary['mPC'] is not None:
        ax.axhline(summary['mPC'], color='black', linestyle='-.',
                   linewidth=1.5, label=f'mPC {summary["mPC"]:.2f}')
    if summary['clean'] is not None:
        rpc = summary['rPC']
        ax.axhline(summary['clean'], color='gray', linestyle='--',
                   linewidth=1.5, label=f'clean {summary["clean"]:.2f}'
                   + ('' if rpc is None else f' (rPC {100 * rpc:.1f}%)'))
    ax.set_xticks(list(severities))
    ax.set_xlabel('severity')
    ax.set_ylabel(metric)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.set_title(title or f'{metric} under input corruptions')
    ax.legend(fontsize=7, loc='center left', bbox_to_anchor=(1.01, 0.5))
    fig.savefig(out_file, dpi=120, bbox_inches='tight')
    plt.close(fig)
    return out_file


# -- the benchmark: pipeline, results and the evaluation loop ----------------
def _type_name(step: Any) -> str:
    t = step.get('type', '') if isinstance(step, dict) else ''
    name = t if isinstance(t, str) else getattr(t, '__name__', '')
    return name.rsplit('.', 1)[-1]


def _pipelines(dataset: Any) -> Iterator[list]:
    """The ``pipeline`` lists of a dataset config (wrappers unpacked)."""
    from mmseg_whitebox.utils.cli import dataset_configs
    for ds in dataset_configs(dataset):
        if 'pipeline' in ds:
            yield ds['pipeline']


def insert_corruption_transform(cfg: Any, seed: int = 0,
                                loader: str = 'test_dataloader') -> int:
    """Put ``ImageCorruption(corruption=None, seed=seed)`` right after
    ``LoadImageFromFile`` in every pipeline of ``cfg[loader]``'s
    dataset; returns how many were inserted. Persistent dataloader workers
    are switched off, so that workers see the corruption switched between
    evaluations.

    Raises:
        CorruptionError: a pipeline without ``LoadImageFromFile``, or one
            that already has an ``ImageCorruption``.
    """
    loader_cfg = cfg.get(loader, None)
    if not loader_cfg or 'dataset' not in loader_cfg:
        raise CorruptionError(f'the config has no {loader} with a dataset')
    n = 0
    for pipeline in _pipelines(loader_cfg['dataset']):
        names = [_type_name(step) for step in pipeline]
        if 'ImageCorruption' in names:
            raise CorruptionError(
                f'the {loader} pipeline already has an ImageCorruption; '
                'remove it: the benchmark inserts its own')
        if 'LoadImageFromFile' not in names:
            raise CorruptionError(
                f'the {loader} pipeline has no LoadImageFromFile to put the '
                f'corruption after (its steps: {", ".join(names)})')
        pipeline.insert(names.index('LoadImageFromFile') + 1,
                        dict(type='ImageCorruption', corruption=None,
                             seed=seed))
        n += 1
    if not n:
        raise CorruptionError(f'the {loader} dataset has no pipeline')
    loader_cfg['persistent_workers'] = False
    return n


def find_corruption_transforms(obj: Any) -> List[ImageCorruption]:
    """The :class:`ImageCorruption` instances in a built dataset (or
    dataloader, wrapper, pipeline)."""
    found: List[ImageCorruption] = []
    seen = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if o is None or id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, ImageCorruption):
            found.append(o)
            continue
        if isinstance(o, (list, tuple)):
            stack.extend(o)
            continue
        for attr in ('dataset', 'datasets', 'pipeline', 'transforms'):
            stack.append(getattr(o, attr, None))
    return found


class CorruptionStore:
    """``results.json`` (setup, clean metrics, ``results[corruption]
    [severity]`` metrics, summary), ``results.csv`` (one row per
    evaluation), ``table.md`` and ``table.csv`` (corruption x severity) in
    one folder, rewritten atomically after every evaluation, so an
    interrupted benchmark loses at most the evaluation in progress.

    ``setup`` keys in :attr:`MUST_MATCH` must equal those of a folder
    being resumed; the grid (corruptions, severities) may change, and the
    summary is over the grid asked for last.
    """

    MUST_MATCH = ('config', 'checkpoint', 'seed', 'cfg_options', 'metric')

    def __init__(self, out_dir: Optional[str], setup: Dict[str, Any],
                 resume: bool = False) -> None:
        self.check_out_dir(out_dir, resume)
        self.out_dir = out_dir
        self.json_path = osp.join(out_dir, 'results.json') if out_dir else None
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
        setup = json.loads(json.dumps(setup))  # compared as stored
        if self.json_path and osp.isfile(self.json_path):
            with open(self.json_path) as f:
                data = json.load(f)
            old = data.get('setup', {})
            diff = [k for k in self.MUST_MATCH
                    if k in setup and k in old and old[k] != setup[k]]
            if diff:
                raise CorruptionError(
                    f'cannot resume {out_dir}: it was made with different '
                    'settings (' + '; '.join(
                        f'{k}: {old[k]!r} there, {setup[k]!r} now'
                        for k in diff) + ')')
            data['setup'].update(setup)
            self.data = data
        else:
            self.data = dict(setup=setup, clean=None, results={})

    @staticmethod
    def check_out_dir(out_dir: Optional[str], resume: bool = False) -> None:
        """Raise :class:`FileExistsError` if ``out_dir`` holds results and
        ``resume`` is off (a tool calls it before building a model)."""
        if (out_dir and not resume
                and osp.isfile(osp.join(out_dir, 'results.json'))):
            raise FileExistsError(
                f'{out_dir} already holds corruption results; pass --resume '
                'to continue them, or choose another output folder (--out)')

    @property
    def metric(self) -> str:
        return self.data['setup'].get('metric', 'mIoU')

    @property
    def corruptions(self) -> List[str]:
        return list(self.data['setup'].get('corruptions') or
                    self.data['results'])

    @property
    def severities(self) -> List[int]:
        return list(self.data['setup'].get('severities') or SEVERITIES)

    def get(self, corruption: str, severity: int) -> Optional[Dict]:
        return self.data['results'].get(corruption, {}).get(str(severity))

    def set_clean(self, metrics: Dict[str, float]) -> None:
        self.data['clean'] = dict(metrics)
        self.save()

    def add(self, corruption: str, severity: int,
            metrics: Dict[str, float]) -> None:
        self.data['results'].setdefault(corruption, {})[str(severity)] = \
            dict(metrics)
        self.save()

    def values(self) -> Dict[str, Dict[int, float]]:
        """``{corruption: {severity: metric}}`` of the requested grid."""
        metric = self.metric
        out = {}
        for c in self.corruptions:
            per = self.data['results'].get(c, {})
            out[c] = {int(s): m[metric] for s, m in per.items()
                      if int(s) in self.severities and metric in m}
        return out

    def summary(self) -> Dict[str, Any]:
        clean = (self.data.get('clean') or {}).get(self.metric)
        return corruption_summary(clean, self.values(), self.corruptions,
                                  self.severities)

    def save(self) -> None:
        from .sweep import _atomic_csv, _atomic_json
        summary = self.summary()
        self.data['summary'] = dict(
            summary, per_severity={str(s): v for s, v in
                                   summary['per_severity'].items()})
        if self.out_dir is None:
            return
        _atomic_json(self.json_path, self.data)
        rows = []
        clean = self.data.get('clean')
        if clean:
            rows.append(dict(corruption='clean', severity=0, **clean))
        for c in self.corruptions:
            for s in self.severities:
                m = self.get(c, s)
                if m is not None:
                    rows.append(dict(corruption=c, severity=s, **m))
        fields = ['corruption', 'severity', 'mIoU', 'aAcc', 'mAcc',
                  'seconds']
        extra = sorted({k for r in rows for k in r} - set(fields))
        _atomic_csv(osp.join(self.out_dir, 'results.csv'), fields + extra,
                    rows)
        values = self.values()
        table = table_rows(summary, values, self.severities)
        _atomic_csv(osp.join(self.out_dir, 'table.csv'), list(table[0]),
                    table)
        text = markdown_table(summary, values, self.severities, self.metric)
        tmp = osp.join(self.out_dir, 'table.md.tmp')
        with open(tmp, 'w') as f:
            f.write(text)
        os.replace(tmp, osp.join(self.out_dir, 'table.md'))

    def plot(self, title: Optional[str] = None) -> str:
        """``corruption_robustness.png`` in the folder."""
        return plot_corruptions(self.summary(), self.values(),
                                self.severities,
                                osp.join(self.out_dir,
                                         'corruption_robustness.png'),
                                title, self.metric)


class CorruptionBenchmark:
    """Clean, then every (corruption, severity) of the grid not in
    ``store`` yet: switch the pipeline's :class:`ImageCorruption`
    transforms, ``evaluate()`` (e.g. a
    :class:`~.evaluation.RunnerEvaluation`), save.

    Args:
        evaluate: returns the test metrics (with ``store.metric``).
        transforms: the pipeline's :class:`ImageCorruption` instances
            (:func:`find_corruption_transforms`).
        store: where results go; its setup names the grid.
        on_progress: called with a status line after each evaluation.
    """

    KEEP = ('mIoU', 'aAcc', 'mAcc')

    def __init__(self, evaluate: Any, transforms: Sequence[ImageCorruption],
                 store: CorruptionStore,
                 on_progress: Optional[Any] = None) -> None:
        if not transforms:
            raise CorruptionError(
                'no ImageCorruption in the test pipeline (see '
                'insert_corruption_transform)')
        self.evaluate = evaluate
        self.transforms = list(transforms)
        self.store = store
        self.on_progress = on_progress or (lambda status: None)

    def pending(self) -> List[tuple]:
        """``(corruption, severity)`` still to evaluate, ``(None, 0)`` for
        clean, in order."""
        todo = [] if self.store.data.get('clean') else [(None, 0)]
        todo += [(c, s) for c in self.store.corruptions
                 for s in self.store.severities
                 if self.store.get(c, s) is None]
        return todo

    def _set(self, corruption: Optional[str], severity: int) -> None:
        for t in self.transforms:
            t.set(corruption, max(severity, 1))

    def _evaluate(self) -> Dict[str, float]:
        start = time.time()
        metrics = self.evaluate()
        metric = self.store.metric
        if metric not in metrics:
            raise CorruptionError(
                f'the test evaluator reports {sorted(metrics)}, not '
                f'{metric!r}; use IoUMetric with iou_metrics=[\'mIoU\']')
        out = {k: float(metrics[k]) for k in self.KEEP if k in metrics}
        out[metric] = float(metrics[metric])
        out['seconds'] = time.time() - start
        return out

    def run(self) -> Dict[str, Any]:
        todo = self.pending()
        try:
            for i, (c, s) in enumerate(todo, 1):
                self._set(c, s)
                metrics = self._evaluate()
                if c is None:
                    self.store.set_clean(metrics)
                    label = 'clean'
                else:
                    self.store.add(c, s, metrics)
                    label = f'{c} severity {s}'
                self.on_progress(
                    f'[{i}/{len(todo)}] {label}: {self.store.metric} '
                    f'{metrics[self.store.metric]:.2f} '
                    f'({metrics["seconds"]:.1f} s)')
        finally:
            self._set(None, 1)
        return self.store.data


def build_corruption_runner(config: str, checkpoint: str,
                            cfg_options: Optional[dict] = None,
                            work_dir: Optional[str] = None,
                            seed: int = 0) -> Any:
    """A Runner set up as ``tools/test.py`` sets it up (as
    :func:`~.evaluation.build_test_runner`), with :class:`ImageCorruption`
    inserted after ``LoadImageFromFile`` in the test pipeline."""
    import argparse

    from mmengine.runner import Runner

    from mmseg_whitebox.utils.cli import (check_checkpoint, check_data_roots,
                                          load_config)
    check_checkpoint(checkpoint)
    args = argparse.Namespace(config=config, cfg_options=cfg_options,
                              work_dir=work_dir, launcher='none')
    cfg = load_config(args)
    cfg.load_from = checkpoint
    check_data_roots(cfg, ('test_dataloader', ))
    insert_corruption_transform(cfg, seed)
    return Runner.from_cfg(cfg)
