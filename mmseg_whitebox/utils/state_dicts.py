"""Reading foreign state dicts and writing converted ones, for the weight
converters in ``tools/model_converters/``.

Foreign checkpoints are read weights-only (a ``.pth`` that needs full
unpickling is refused, never executed) or from ``.safetensors``.
"""
from __future__ import annotations

import os.path as osp
from typing import Callable, Dict, List, Optional, Tuple

import torch

from mmseg_whitebox.models.backbones.white_box_vit import check_pretrained
from mmseg_whitebox.utils.atomic import check_not_input, save_torch
from mmseg_whitebox.utils.checkpoint_checks import check_checkpoint_file

StateDict = Dict[str, torch.Tensor]
Converter = Callable[[StateDict], Tuple[StateDict, List[str], List[str]]]


def read_state_dict(path: str) -> StateDict:
    """The tensors of ``path`` (``.pth``/``.pt`` read weights-only, or
    ``.safetensors``); a checkpoint that wraps them under ``state_dict``
    or ``model`` is unwrapped. Raises ``ValueError`` saying what is
    wrong with the file."""
    if not osp.isfile(path):
        raise ValueError(f'{path!r} does not exist')
    if path.endswith('.safetensors'):
        from safetensors.torch import load_file
        try:
            return load_file(path)
        except Exception as exc:  # SafetensorError, OSError
            raise ValueError(
                f'{path!r} is not a complete safetensors file ({exc}): it '
                'is truncated or of another format. Download it again')
    check_checkpoint_file(path)  # empty, truncated, text: said so
    try:
        checkpoint = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as exc:  # torch raises many kinds for a foreign file
        raise ValueError(f'{path!r} cannot be read weights-only as a torch '
                         f'state dict ({type(exc).__name__}: {exc})') from exc
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint, dict) and isinstance(
                checkpoint.get(key), dict):
            checkpoint = checkpoint[key]
    if not isinstance(checkpoint, dict):
        raise ValueError(f'{path!r} holds a {type(checkpoint).__name__}, '
                         'not a state dict')
    return checkpoint


def check_tensors(state: StateDict, path: str) -> None:
    """A state dict to convert holds tensors (an empty one would be
    written as an empty checkpoint)."""
    if not any(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f'{path!r} holds no tensors: it is not a model\'s '
                         'weights (an empty or foreign state dict); nothing '
                         'was written')


def convert_file(src: str, dst: str, convert: Converter,
                 config: Optional[str] = None) -> str:
    """Convert the state dict in ``src`` and save it to ``dst`` as a
    weights-only checkpoint (``dict(state_dict=...)``, what
    ``init_cfg=dict(type='Pretrained', checkpoint=dst)`` reads). A key
    ``convert`` cannot map stops the conversion before anything is
    written (``ValueError`` listing them); so does, with ``config``, a
    result that does not fit that config's backbone exactly (see
    :func:`check_fits_backbone`). Returns a one-line summary."""
    check_not_input(dst, [src, config], 'DST')
    state = read_state_dict(src)
    check_tensors(state, src)
    converted, dropped, unmapped = convert(state)
    if unmapped:
        raise ValueError(f'{len(unmapped)} keys of {src} cannot be mapped '
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
    """Raise unless converted backbone weights fit the backbone of the
    mmseg ``config`` that is to load them (strictly, as WhiteBoxViT's
    pretrained loading does)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS
    if not osp.isfile(config):
        raise ValueError(f'config {config!r} does not exist')
    cfg = Config.fromfile(config)
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    backbone = MODELS.build(dict(cfg.model.backbone, init_cfg=None))
    check_pretrained(backbone, state, f'the converted weights (for '
                     f'{config})')
