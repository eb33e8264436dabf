"""Checks of a config, made when it is read and before anything is built
from it: what mmengine, mmseg or torch would report minutes later or as a
bare ``KeyError``/``TypeError`` becomes a
:class:`~mmseg_whitebox.utils.tool_error.ToolError` naming the file or key
and what to do. A missing optional package is an ``InputError``
(:mod:`.optional_packages`).
"""
from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import inspect
import os.path as osp
from typing import Any, Iterable, Iterator, List, Optional, Tuple

from mmseg_whitebox.utils.tool_error import ToolError
from .optional_packages import (OPTIONAL_PACKAGES, missing_compiled_op,
                                missing_package_error,
                                raise_if_missing_package)

#: the config formats mmengine reads
CONFIG_SUFFIXES = ('.py', '.json', '.yml', '.yaml')
#: model settings that count something and must be >= 1
POSITIVE_MODEL_KEYS = ('num_classes', 'embed_dims', 'num_heads', 'channels',
                       'in_channels', 'patch_size', 'head_dim')
#: how many close matches a message suggests
SUGGESTIONS = 3
#: the settings of a dataloader that mmengine's ``Runner.build_dataloader``
#: takes itself; the others go to torch's ``DataLoader``
RUNNER_DATALOADER_KEYS = ('dataset', 'sampler', 'batch_sampler',
                          'collate_fn', 'worker_init_fn',
                          'num_batch_per_epoch', 'persistent_workers',
                          'disable_subprocess_warning')


# -- the files ---------------------------------------------------------------

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


def base_files(path: str) -> List[str]:
    """The local ``_base_`` files ``path`` (a Python config) inherits from,
    directly or through other ``_base_`` files, in the order mmengine reads
    them; package configs (``mmseg::...``) and files that do not exist
    are left to mmengine."""
    found: List[str] = []
    stack = [path]
    while stack:
        current = stack.pop()
        try:
            with open(current, encoding='utf-8') as f:
                tree = ast.parse(f.read(), filename=current)
        except (OSError, UnicodeDecodeError, SyntaxError):
            continue  # check_config_file names the problem
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == '_base_'
                    for t in node.targets)):
                continue
            try:
                bases = ast.literal_eval(node.value)
            except ValueError:
                continue
            for base in [bases] if isinstance(bases, str) else bases:
                if not isinstance(base, str) or '::' in base:
                    continue
                full = osp.normpath(osp.join(osp.dirname(current), base))
                if full not in found and osp.isfile(full):
                    found.append(full)
                    if full.endswith('.py'):
                        stack.append(full)
    return found


def check_config_files(path: str) -> None:
    """:func:`check_config_file` on ``path`` and its local ``_base_``
    files."""
    check_config_file(path)
    for base in base_files(path):
        check_config_file(base)


# -- optional packages -------------------------------------------------------

def check_package_types(cfg: Any) -> None:
    """Every ``type='<package>.<Name>'`` of an optional package
    (``mmdet.PixelDecoder``) names one that is installed and whose models
    import; else :func:`missing_package_error`. Run before
    :func:`check_model_types`: without the package mmseg's classes differ
    (MaskFormerHead takes no ``in_channels``)."""
    for top in cfg:
        for key, node in config_dicts(cfg[top], top):
            name = node.get('type')
            scope = name.split('.', 1)[0] if isinstance(name, str) else ''
            if scope not in OPTIONAL_PACKAGES or '.' not in name:
                continue
            needed_by = f'{key}.type {name!r}'
            error = missing_package_error(scope, needed_by)
            if error is not None:
                raise error
            try:
                importlib.import_module(f'{scope}.models')
            except ImportError as exc:
                raise_if_missing_package(exc, needed_by)
                raise


# -- the registry types and their settings ----------------------------------

def _suggest(word: str, choices: Iterable[str]) -> str:
    """``; did you mean 'x' or 'y'?`` for the close matches, or ''."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(word, choices, SUGGESTIONS, 0.75)
    if not close:
        lower = {c.lower(): c for c in choices}
        close = [lower[word.lower()]] if word.lower() in lower else []
    if not close:
        return ''
    return '; did you mean ' + ' or '.join(repr(c) for c in close) + '?'


def _registry_names(registry: Any) -> List[str]:
    """Every name ``registry``, its parent and its children resolve."""
    names: List[str] = []
    seen = set()
    stack = [registry, getattr(registry, 'parent', None)]
    while stack:
        reg = stack.pop()
        if reg is None or id(reg) in seen:
            continue
        seen.add(id(reg))
        names += list(getattr(reg, 'module_dict', {}))
        stack += list(getattr(reg, 'children', {}).values())
    return names


def _other_registries() -> List[Any]:
    """mmseg's registries other than ``MODELS`` (task utilities, weight
    initialisers, ...): a model's settings may name their types."""
    import mmseg.registry as registries
    from mmengine.registry import Registry
    return [r for r in vars(registries).values()
            if isinstance(r, Registry) and r is not registries.MODELS]


def init_settings(cls: type) -> Optional[List[str]]:
    """The settings ``cls(**settings)`` takes: the keyword arguments of its
    ``__init__`` and of the base classes it passes ``**kwargs`` on to;
    None when the chain ends in a ``**kwargs`` that takes anything (as
    ``torch.nn.Module``'s)."""
    names: List[str] = []
    for klass in inspect.getmro(cls):
        init = klass.__dict__.get('__init__')
        if init is None:
            continue
        try:
            params = list(inspect.signature(init).parameters.values())
        except (TypeError, ValueError):
            return None
        names += [p.name for p in params if p.name != 'self' and p.kind in (
            p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return names  # nothing is passed on further
    return None


def required_settings(cls: type) -> List[str]:
    """The arguments without a default of ``cls``'s own ``__init__`` (a
    base class's are often given by the subclass)."""
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.name != 'self' and
            p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                p.KEYWORD_ONLY)]


def _check_built(node: Any, key: str, registry: Any) -> None:
    """Every ``dict(type=...)`` in ``node`` (at ``key``) names a type that
    ``registry`` (or another of mmseg's registries) knows, and a class of
    ``registry`` takes each of its settings."""
    if isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _check_built(value, f'{key}.{i}', registry)
        return
    if not isinstance(node, dict):
        return
    name = node.get('type')
    if isinstance(name, str):
        cls = registry.get(name)
        if cls is None and not any(r.get(name) is not None
                                   for r in _other_registries()):
            hint = _suggest(name.rsplit('.', 1)[-1],
                            _registry_names(registry))
            raise ToolError(
                f'{key}.type: unknown type {name!r}: nothing of that name '
                f'is registered in {registry.scope}::{registry.name}{hint} '
                'Fix the type in the config or in --cfg-options (names are '
                'case-sensitive; a module of your own must be imported, '
                'e.g. with custom_imports)')
        op = missing_compiled_op(cls) if isinstance(cls, type) else None
        error = op and missing_package_error(
            'mmcv._ext', f'{key}.type {name!r} (mmcv.ops.{op})')
        if error:
            raise error
        settings = init_settings(cls) if isinstance(cls, type) else None
        for setting in node:
            if settings is None or setting == 'type' or \
                    setting.startswith('_') or setting in settings:
                continue
            raise ToolError(
                f'{key}: {cls.__name__} does not take the setting '
                f'{setting!r}{_suggest(setting, settings)} Fix or remove '
                'that key in the config or in --cfg-options')
        missing = [name for name in required_settings(cls)
                   if name not in node] if isinstance(cls, type) else []
        if missing:
            raise ToolError(
                f'{key}: {cls.__name__} needs the setting(s) '
                f'{", ".join(map(repr, missing))}, which the config does '
                'not give: add them (in the config or with --cfg-options)')
    for setting, value in node.items():
        # the *_cfg settings (norm_cfg, ffn_cfg, attn_cfg, init_cfg, ...)
        # are built by the module that takes them, which adds, removes and
        # resolves settings and types of its own
        if not str(setting).endswith('_cfg'):
            _check_built(value, f'{key}.{setting}', registry)


def check_model_types(cfg: Any) -> None:
    """The model's types are registered and their classes, and the
    dataloaders, take the settings the config gives. Run after the
    config's ``custom_imports`` are imported."""
    from mmseg.registry import MODELS
    _check_built(cfg.get('model', None), 'model', MODELS)
    from torch.utils.data import DataLoader
    takes = set(init_settings(DataLoader) or ()) | set(
        RUNNER_DATALOADER_KEYS)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        settings = cfg.get(loader, None) or {}
        for setting in settings:
            if setting not in takes:
                raise ToolError(
                    f'{loader}: a dataloader does not take the setting '
                    f'{setting!r}{_suggest(setting, takes)} Fix or remove '
                    'that key in the config or in --cfg-options')


# -- the values --------------------------------------------------------------

def config_dicts(obj: Any, key: str) -> Iterator[Tuple[str, dict]]:
    """``(key, dict)`` of every dict nested in ``obj`` (lists included)."""
    if isinstance(obj, dict):
        yield key, obj
        for k, v in obj.items():
            yield from config_dicts(v, f'{key}.{k}')
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from config_dicts(v, f'{key}.{i}')


def check_config_values(cfg: Any) -> None:
    """The config has a model whose counts and sizes are whole numbers
    >= 1, and dataloaders whose batch sizes and worker counts can be."""
    model = cfg.get('model', None)
    if not isinstance(model, dict) or 'type' not in model:
        raise ToolError(
            f'config {getattr(cfg, "filename", None)!r} defines no model '
            '(model=dict(type=...)): it is not '
            'a model config, or an _base_ file is missing; pass a config '
            'from configs/<model>/')
    for key, node in config_dicts(model, 'model'):
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


# -- datasets, downloads, schedules, test-time augmentation -----------------

def dataset_configs(dataset: Any,
                    key: str = 'dataset') -> Iterable[Tuple[str, Any]]:
    """``(key, config)`` of ``dataset`` and every dataset it wraps
    (ConcatDataset, RepeatDataset, ...), e.g. ``'dataset.datasets.1'``."""
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
                    f'synthetic_ade20k.py {parent}{variant}`')
        raise ToolError(f'{key.split(".")[0]}: dataset folder {root!r} does '
                        f'not exist; {hint}')


def check_param_schedulers(cfg: Any) -> None:
    """Every scheduler ends after it begins, with the recipe for a shorter
    schedule."""
    schedulers = cfg.get('param_scheduler', None) or []
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    max_iters = (cfg.get('train_cfg', None) or {}).get('max_iters')
    for i, sched in enumerate(schedulers):
        begin, end = sched.get('begin', 0), sched.get('end', None)
        if end is None or end > begin:
            continue
        recipe = ''
        if len(schedulers) == 2 and max_iters:
            warm = max(1, min(schedulers[0].get('end', 1), max_iters // 2))
            recipe = (
                f' For a {max_iters}-iteration run with a warm-up of '
                f'{warm}: --cfg-options param_scheduler.0.end={warm} '
                f'param_scheduler.1.begin={warm} param_scheduler.1.end='
                f'{max_iters}')
        raise ToolError(
            f'param_scheduler[{i}] ({sched.get("type")}) has begin={begin} '
            f'and end={end}, but end must be larger than begin. When '
            'shortening a schedule, move the warm-up end and the next '
            'scheduler\'s begin below the new length too.' + recipe)


def _heads(model: Any) -> Iterator[tuple]:
    for key in ('decode_head', 'auxiliary_head'):
        heads = model.get(key, None) if model else None
        if isinstance(heads, dict):
            heads = [heads]
        for j, head in enumerate(heads or []):
            name = f'model.{key}' + (f'.{j}' if len(heads) > 1 else '')
            yield name, head


def num_classes_problem(cfg: Any) -> Optional[str]:
    """The explanation when a head has ``num_classes=1`` (mmseg's softmax
    cross-entropy over one class: loss 0, zero gradients), else None."""
    for name, head in _heads(cfg.get('model', None)):
        if head.get('num_classes') == 1:
            return (
                f'{name}.num_classes=1: with one class mmseg\'s softmax '
                'cross-entropy is 0 for every pixel, so the gradients are '
                'zero, nothing is learnt and every pixel is predicted as '
                'class 0. For binary (object/background) segmentation use '
                'num_classes=2, or mmseg\'s sigmoid recipe: num_classes=2, '
                'out_channels=1, loss_decode=dict(type=\'CrossEntropyLoss\', '
                'use_sigmoid=True) and a threshold (e.g. threshold=0.5)')
    return None


def check_tta(cfg: Any) -> None:
    """``--tta`` needs ``tta_pipeline`` and ``tta_model`` in the config,
    and a segmentor that keeps full-resolution logits."""
    missing = [k for k in ('tta_pipeline', 'tta_model')
               if not cfg.get(k, None)]
    if missing:
        raise ToolError(
            f'--tta needs {" and ".join(missing)} in the config (as in '
            'configs/_base_/datasets/ade20k.py and configs/_base_/'
            'default_runtime.py); add them or test without --tta')
    model_type = str(cfg.get('model', {}).get('type', ''))
    if model_type.rsplit('.', 1)[-1] == 'BoundedMemoryEncoderDecoder':
        raise ToolError(
            '--tta averages full-resolution logits, which '
            'BoundedMemoryEncoderDecoder does not keep (its seg_logits stay '
            'at the network resolution): test with --tta and model.type='
            'EncoderDecoder, or without --tta')
