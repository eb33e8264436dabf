"""Reading foreign state dicts and writing converted ones, for the weight
converters in ``tools/model_converters/``.

Foreign checkpoints are read weights-only (a ``.pth`` that needs full
unpickling is refused, never executed), from ``.safetensors``, or from a
JAX ViT ``.npz`` (numpy with ``allow_pickle=False``: plain arrays only).
"""
from __future__ import annotations

import os.path as osp
import zipfile
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from mmseg_whitebox.engine.model_index import resources_root
from mmseg_whitebox.converters import segmenter as sc
from mmseg_whitebox.converters.vit import augreg_to_timm
from mmseg_whitebox.models.backbones.white_box_vit import check_pretrained
from mmseg_whitebox.utils.atomic import check_not_input, save_torch, write_text
from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint_file
from mmseg_whitebox.utils.tool_error import InputError

StateDict = Dict[str, torch.Tensor]
Converter = Callable[[StateDict], Tuple[StateDict, List[str], List[str]]]


def read_npz(path: str) -> Dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file, read with ``allow_pickle=False``;
    ``ValueError`` saying what is wrong with the file."""
    if osp.getsize(path) == 0:
        raise InputError(f'{path!r} is empty (0 bytes): the download or '
                         'copy was interrupted. Download it again')
    if not zipfile.is_zipfile(path):
        raise InputError(f'{path!r} is not a .npz archive (a zip of numpy '
                         'arrays): it is truncated or of another format. '
                         'Download it again')
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except Exception as exc:  # BadZipFile, ValueError (pickled objects)
        raise InputError(f'{path!r} cannot be read as plain numpy arrays '
                         f'({type(exc).__name__}: {exc})') from exc


def read_state_dict(path: str) -> StateDict:
    """The tensors of ``path`` (``.pth``/``.pt`` read weights-only and
    unwrapped from ``state_dict``/``model``, ``.safetensors``, or a JAX
    ViT ``.npz`` on timm's keys); ``ValueError`` saying what is wrong."""
    if not osp.isfile(path):
        raise InputError(f'{path!r} does not exist')
    if path.endswith('.npz'):
        return augreg_to_timm(read_npz(path), path)
    if path.endswith('.safetensors'):
        from safetensors.torch import load_file
        try:
            return load_file(path)
        except Exception as exc:  # SafetensorError, OSError
            raise InputError(
                f'{path!r} is not a complete safetensors file ({exc}): it '
                'is truncated or of another format. Download it again'
            ) from exc
    check_checkpoint_file(path)  # empty, truncated, text: said so
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as exc:  # torch raises many kinds for a foreign file
        raise InputError(
            f'{path!r} cannot be read weights-only as a torch state dict '
            f'({type(exc).__name__}: {exc})') from exc
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(
                checkpoint.get(key), dict):
            checkpoint = checkpoint[key]
    if not isinstance(checkpoint, dict):
        raise InputError(f'{path!r} holds a {type(checkpoint).__name__}, '
                         'not a state dict')
    return checkpoint


def check_tensors(state: StateDict, path: str) -> None:
    """A state dict to convert holds tensors (an empty one would be
    written as an empty checkpoint)."""
    if not any(isinstance(v, torch.Tensor) for v in state.values()):
        raise InputError(f'{path!r} holds no tensors: it is not a model\'s '
                         'weights (an empty or foreign state dict); nothing '
                         'was written')


def convert_file(src: str, dst: str, convert: Converter,
                 config: Optional[str] = None) -> str:
    """Convert the state dict in ``src`` and save it to ``dst`` as
    ``dict(state_dict=...)`` (what a ``Pretrained`` ``init_cfg`` reads).
    Unmappable keys, or with ``config`` a result that does not fit its
    backbone (:func:`check_fits_backbone`), stop it before anything is
    written (``ValueError``). Returns a one-line summary."""
    check_not_input(dst, [src, config], 'DST')
    state = read_state_dict(src)
    check_tensors(state, src)
    converted, dropped, unmapped = convert(state)
    if unmapped:
        raise InputError(f'{len(unmapped)} keys of {src} cannot be mapped '
                         f'(is it the right kind of checkpoint?): '
                         f'{", ".join(unmapped)}')
    if config is not None:
        check_fits_backbone(dict(converted), config)
    check_tensors(converted, src)
    save_torch(dict(state_dict=converted), dst)
    return (f'wrote {dst}: {len(converted)} tensors' +
            (f'; dropped the classifier ({", ".join(dropped)})'
             if dropped else ''))


def check_fits_backbone(state: StateDict, config: str) -> None:
    """Raise unless converted weights fit the backbone of ``config``
    strictly (as WhiteBoxViT's pretrained loading does)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    if not osp.isfile(config):
        raise InputError(f'config {config!r} does not exist')
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    backbone = MODELS.build(dict(cfg.model.backbone, init_cfg=None))
    check_pretrained(backbone, state, f'the converted weights (for '
                     f'{config})')


def _dataset_meta(cfg: Any, num_classes: int) -> dict:
    """The config's dataset classes and palette, if there are as many
    classes as the checkpoint predicts (what ``init_model`` shows)."""
    from mmseg.registry import DATASETS
    try:
        dataset = cfg.test_dataloader.dataset
        # the project's CheckedSegDataset wraps mmseg's dataset_type
        meta = DATASETS.get(dataset.get('dataset_type',
                                        dataset.type)).METAINFO
    except (AttributeError, KeyError):  # no dataset, or an unknown type
        return {}
    if len(meta.get('classes', ())) != num_classes:
        return {}
    return dict(classes=list(meta['classes']),
                palette=[list(c) for c in meta['palette']])


def convert_segmenter_file(src: str, dst: str,
                           variant: Optional[str] = None,
                           config: Optional[str] = None,
                           out_config: Optional[str] = None,
                           released_gradients: bool = False
                           ) -> Dict[str, Any]:
    """A published Segmenter-codebase checkpoint (``variant.yml`` beside it
    unless given) as an mmseg segmentor: the weights to ``dst``, and to
    ``out_config`` (default: ``dst`` with ``.py``) a config inheriting
    ``config`` (default: this project's for the model) with what the
    checkpoint needs. Nothing is written unless every key maps and loads
    strictly (``ValueError``). Returns what was done."""
    explicit_variant = variant is not None
    variant = variant or osp.join(osp.dirname(osp.abspath(src)),
                                  'variant.yml')
    out_config = out_config or osp.splitext(dst)[0] + '.py'
    check_not_input(dst, [src, variant, config], 'DST')
    check_not_input(out_config, [src, variant, config, dst], '--out-config')
    state = read_state_dict(src)
    net = (sc.read_variant(variant)
           if explicit_variant or osp.isfile(variant) else None)
    model = sc.describe(state, net)
    converted, dropped, unmapped = sc.segmenter_to_mmseg(state, model.kind)
    if unmapped:
        raise InputError(
            f'{len(unmapped)} keys of {src} cannot be mapped onto the '
            f'{model.kind} model: {", ".join(unmapped)}' +
            ('; distilled DeiT encoders (dist_token) have no counterpart '
             "in mmseg's VisionTransformer"
             if 'encoder.dist_token' in unmapped else ''))
    if released_gradients and model.kind != 'cbt':
        raise InputError('--released-gradients is for CBT checkpoints')
    config = config or sc.pick_config(
        model, osp.join(resources_root() or '', 'configs'))
    if not osp.isfile(config):
        raise InputError(f'config {config!r} does not exist')
    cfg, overrides, config_text = sc.converted_config(model, config,
                                                      released_gradients)
    sc.load_strictly(cfg.model.to_dict(), converted)
    meta = dict(converted_from=osp.basename(src), decoder=model.kind,
                config=osp.abspath(config), overrides=overrides,
                variant=net or {},
                dataset_meta=_dataset_meta(cfg, model.n_cls))
    if not meta['dataset_meta']:
        del meta['dataset_meta']
    save_torch(dict(state_dict=converted, meta=meta), dst)
    write_text(out_config,
               f'# {model.kind} checkpoint {osp.basename(src)}, converted '
               'by tools/model_converters/segmenter2mmseg.py\n' +
               config_text)
    return dict(kind=model.kind, dst=dst, tensors=len(converted),
                dropped=dropped, config=config, out_config=out_config,
                overrides=list(overrides), notes=list(model.notes))
