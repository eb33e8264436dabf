"""Checks of what a user hands a tool, made before any model is built.

Each raises :class:`~mmseg_whitebox.cli.ToolError` (one line, exit
status 2) naming what is wrong and what to do: a config file that is empty,
not Python or not parseable; settings that cannot be (``num_classes=0``);
a device this machine does not have; an output folder that cannot be
written or an output format that cannot be; an input image that cannot be
read or is too small.
"""
from __future__ import annotations

import ast
import contextlib
import os
import os.path as osp
import tempfile
import urllib.error
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple

from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint_file
from mmseg_whitebox.utils.tool_error import ToolError

#: the config formats mmengine reads
CONFIG_SUFFIXES = ('.py', '.json', '.yml', '.yaml')
#: model settings that count something and must be >= 1
POSITIVE_MODEL_KEYS = ('num_classes', 'embed_dims', 'num_heads', 'channels',
                       'in_channels', 'patch_size', 'head_dim')
#: the fewest pixels an image the demo paints has (mmseg's visualizer
#: fails on a single pixel with an IndexError)
MIN_IMAGE_PIXELS = 2


def check_config_file(path: str) -> None:
    """``path`` is a readable, non-empty config mmengine can parse; a
    Python config is parsed here so a syntax error names its line."""
    if osp.isdir(path):
        raise ToolError(f'config {path!r} is a folder; give a config file, '
                        'e.g. configs/segmenter/<name>.py')
    suffix = osp.splitext(path)[1].lower()
    if suffix not in CONFIG_SUFFIXES:
        raise ToolError(
            f'config {path!r} is not a config file (a {suffix or "no"} '
            f'suffix; configs are {"/".join(CONFIG_SUFFIXES)}): check the '
            'order of the arguments (the config comes before the '
            'checkpoint) and pass a config, e.g. configs/segmenter/<name>.py')
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except OSError as exc:
        raise ToolError(f'cannot read config {path!r} ({exc.strerror}): '
                        'fix its permissions or copy it somewhere '
                        'readable') from exc
    if not raw.strip():
        raise ToolError(f'config {path!r} is empty: the file was not '
                        'written completely, or is the wrong file; use '
                        'a config from configs/')
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError as exc:
        raise ToolError(f'config {path!r} is not a text file (it starts '
                        f'with {raw[:8]!r}): pass a config file, not a '
                        'checkpoint or an image') from exc
    if suffix == '.py':
        try:
            ast.parse(text, filename=path)
        except SyntaxError as exc:
            line = (exc.text or '').strip()
            raise ToolError(
                f'config {path!r} is not valid Python: {exc.msg} at line '
                f'{exc.lineno}' + (f' ({line!r})' if line else '') +
                '. A config is Python (key = dict(...) lines, as in '
                'configs/); fix that line') from exc


def _dicts(obj: Any, key: str) -> Iterator[Tuple[str, dict]]:
    """``(key, dict)`` of every dict nested in ``obj`` (lists included)."""
    if isinstance(obj, dict):
        yield key, obj
        for k, v in obj.items():
            yield from _dicts(v, f'{key}.{k}')
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _dicts(v, f'{key}.{i}')


def check_config_values(cfg: Any) -> None:
    """The config has a model, and its counts and sizes can be: a
    ``num_classes``, width or head count below 1 (or not a number) fails
    deep inside torch, or later (``num_classes=0``), otherwise."""
    model = cfg.get('model', None)
    if not isinstance(model, dict) or 'type' not in model:
        raise ToolError(
            f'config {getattr(cfg, "filename", None)!r} defines no model '
            '(model=dict(type=...)): it is not '
            'a model config, or an _base_ file is missing; pass a config '
            'from configs/<model>/')
    for key, node in _dicts(model, 'model'):
        for name in POSITIVE_MODEL_KEYS:
            value = node.get(name, None)
            if value is None:  # not set, or the module's default
                continue
            if isinstance(value, (list, tuple)):  # e.g. per-stage widths
                values = list(value)
            else:
                values = [value]
            bad = [v for v in values if isinstance(v, bool) or
                   not isinstance(v, int) or v < 1]
            if bad:
                raise ToolError(
                    f'{key}.{name}={value!r} is impossible: it must be a '
                    'whole number >= 1 (num_classes: the number of classes '
                    'the dataset has, e.g. 150 for ADE20K); fix it in the '
                    'config or in --cfg-options')
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        settings = cfg.get(loader, None) or {}
        size = settings.get('batch_size', 1)
        workers = settings.get('num_workers', 0)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ToolError(f'{loader}.batch_size={size!r} is impossible: '
                            'it must be a whole number >= 1')
        if isinstance(workers, bool) or not isinstance(workers, int) or \
                workers < 0:
            raise ToolError(f'{loader}.num_workers={workers!r} is '
                            'impossible: it must be a whole number >= 0')


def check_device(device: Optional[str]) -> None:
    """``device`` (``cpu``, ``cuda``, ``cuda:N``) exists on this machine."""
    if device is None:
        return
    import torch
    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise ToolError(f'unknown device {device!r}: use cpu, cuda or '
                        'cuda:N') from exc
    if parsed.type != 'cuda':
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = parsed.index or 0
    if index >= count:
        have = f'{count} CUDA device(s)' if count else 'no CUDA device'
        raise ToolError(f'--device {device}: this machine has {have}; use '
                        '--device cpu (or leave --device out) or run on a '
                        'machine with that GPU')


def check_writable_folder(folder: str, option: str,
                          label: Optional[str] = None) -> None:
    """``folder`` exists or can be created, and a file can be written in it
    (checked by writing one): ``option`` names where it was given,
    ``label`` what the folder is (default: ``option`` and the folder)."""
    label = label or f'{option} {folder!r}'
    path = osp.abspath(folder or '.')
    probe = path
    while not osp.exists(probe):
        probe = osp.dirname(probe)
    if not osp.isdir(probe):
        raise ToolError(f'{label} cannot be created: {probe!r} is a file. '
                        f'Choose another {option}')
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ToolError(
            f'{label} is not writable ({exc.strerror or exc}). Choose a '
            f'writable place with {option} or fix the folder\'s '
            'permissions') from exc


def check_output_file(path: str, option: str,
                      suffixes: Optional[Sequence[str]] = None,
                      image: bool = False) -> None:
    """``path`` can be written: not a folder, its folder writable, its
    type one of ``suffixes`` or (``image``) one OpenCV writes."""
    if osp.isdir(path):
        raise ToolError(f'{option} {path!r} is a folder; give a file name')
    suffix = osp.splitext(path)[1].lower()
    if suffixes is not None and suffix not in suffixes:
        raise ToolError(f'{option} {path!r}: unknown output format '
                        f'{suffix or "(no suffix)"}; name it '
                        f'{" or ".join("*" + s for s in suffixes)}')
    if image:
        import cv2
        if not suffix or not cv2.haveImageWriter(path):
            raise ToolError(f'{option} {path!r}: OpenCV cannot write '
                            f'{suffix or "files without a suffix"}; name it '
                            '*.png or *.jpg')
    folder = osp.dirname(path) or '.'
    check_writable_folder(folder, option,
                          f'the folder {folder!r} of {option} {path!r}')


def check_image_file(path: str) -> Tuple[int, int]:
    """``path`` is an image Pillow can read, of at least
    :data:`MIN_IMAGE_PIXELS` pixels; its ``(height, width)``. Reads the
    header only."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ToolError(f'{path!r} is not an image (or is damaged): '
                        f'{type(exc).__name__}. Give a JPEG or PNG image, or '
                        'a folder of them') from exc
    if height * width < MIN_IMAGE_PIXELS:
        raise ToolError(f'image {path!r} is {height}x{width} pixels: too '
                        f'small to paint (at least {MIN_IMAGE_PIXELS} '
                        'pixels); give a real image')
    return height, width


def dataset_configs(dataset: Any,
                    key: str = 'dataset') -> Iterable[Tuple[str, Any]]:
    """``(key, config)`` of every dataset config in ``dataset`` (at
    ``key``): the wrappers (ConcatDataset, RepeatDataset, ...) and the real
    datasets they wrap, e.g. ``('dataset.datasets.1', ...)``."""
    stack = [(key, dataset)]
    while stack:
        key, ds = stack.pop()
        yield key, ds
        if 'datasets' in ds:
            stack.extend((f'{key}.datasets.{i}', d)
                         for i, d in enumerate(ds['datasets']))
        elif 'dataset' in ds:
            stack.append((f'{key}.dataset', ds['dataset']))


def _dataloader_roots(cfg: Any, names: Iterable[str]):
    """``(data_root key, data_root)`` of the real datasets of loaders."""
    for name in names:
        loader = cfg.get(name, None)
        if not loader:
            continue
        for key, ds in dataset_configs(loader.get('dataset', {}),
                                       f'{name}.dataset'):
            wrapper = 'datasets' in ds or 'dataset' in ds
            if not wrapper and ds.get('data_root'):
                yield f'{key}.data_root', ds['data_root']


def check_data_roots(cfg: Any, loaders: Iterable[str]) -> None:
    """Fail early, with advice, when a dataset folder is missing."""
    for key, root in _dataloader_roots(cfg, loaders):
        if osp.isdir(root):
            continue
        hint = ('download and convert the dataset as described in the '
                'README ("Training on real ADE20K") or set '
                f'--cfg-options {key}=...')
        if 'synthetic' in root:
            parent = osp.dirname(osp.normpath(root))
            variant = ' --variant context' if 'context' in root else ''
            hint = ('generate it with `python tools/dataset_converters/'
                    f'synthetic_ade20k.py --data-root {parent}{variant}`')
        raise ToolError(f'{key.split(".")[0]}: dataset folder {root!r} does '
                        f'not exist; {hint}')


def check_checkpoint(path: Optional[str]) -> None:
    """A local checkpoint exists and is a complete torch file (empty,
    truncated and text files are named as such, before a model is
    built)."""
    if path and '://' not in path and not osp.isfile(path):
        raise ToolError(f'checkpoint {path!r} does not exist')
    if path:
        check_checkpoint_file(path)


def check_work_dir(work_dir: str) -> None:
    """The work dir can be created and written to (mmengine would fail with
    a raw ``NotADirectoryError``/``PermissionError`` later): logs and
    checkpoints go there."""
    check_writable_folder(work_dir, '--work-dir', f'work dir {work_dir!r}')


def pretrained_urls(cfg: Any) -> List[str]:
    """The http(s) URLs a config downloads weights from."""
    urls = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            for value in obj.values():
                walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                walk(value)
        elif isinstance(obj, str) and obj.startswith(('http://',
                                                      'https://')):
            if obj not in urls:
                urls.append(obj)

    walk(cfg.get('model', None))
    walk(cfg.get('load_from', None))
    return urls


def download_error_message(cfg: Any, exc: BaseException) -> str:
    """What to say when fetching a config's pretrained weights failed."""
    urls = pretrained_urls(cfg)
    reason = getattr(exc, 'reason', exc)
    where = ', '.join(urls) if urls else 'a URL in the config'
    return (
        f'could not download the pretrained weights {where} ({reason}): '
        'is this machine offline, or behind a proxy/firewall? Download the '
        'file elsewhere (and '
        'convert it if needed, e.g. tools/model_converters/timm2mmseg.py for '
        'timm ViTs), then point the config at the local copy: --cfg-options '
        'model.pretrained=/path/to/weights.pth (or model.backbone.init_cfg.'
        'checkpoint=... where the config sets init_cfg), or put it in '
        "torch's cache (~/.cache/torch/hub/checkpoints/); "
        'model.pretrained=None trains from scratch')


@contextlib.contextmanager
def reported_errors(cfg: Any) -> Iterator[None]:
    """A failed download of the config's pretrained weights (offline, a
    proxy) as a :class:`ToolError` that says what to do; the data and
    checkpoint checks raise their own typed errors."""
    try:
        yield
    except urllib.error.URLError as exc:
        raise ToolError(download_error_message(cfg, exc)) from exc
