"""timm ViT state dicts -> mmseg ``VisionTransformer`` or ``WhiteBoxViT``
keys, and the JAX ViT ``.npz`` files (the AugReg weights timm 0.4.12
downloads, which the released Segmenter, CBT and DEPICT code start from)
-> timm keys.

``WhiteBoxViT``'s MHSA and QKVCBSA layers keep timm's query/key/value and
output projections (QKVCBSA adds only its step sizes). The patch embedding
keeps its bias: configs loading converted weights set ``patch_bias=True``.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Callable, Dict, List, Mapping, Tuple, Union

import numpy as np
import torch

from mmseg_whitebox.utils.tool_error import InputError

#: (regex a whole key must match, replacement template or function)
Rules = List[Tuple[str, Union[str, Callable[[re.Match], str]]]]

# timm key (regex) -> key (template). The frame (patch embedding, CLS
# token, position embedding, final norm) is mmseg's in both backbones
FRAME: Rules = [
    (r'cls_token', 'cls_token'),
    (r'pos_embed', 'pos_embed'),
    (r'patch_embed\.proj\.(weight|bias)', r'patch_embed.projection.\1'),
    (r'norm\.(weight|bias)', r'ln1.\1'),
]
# per block: timm name (regex) -> mmseg VisionTransformer name, WhiteBoxViT
# name (with MHSA or QKVCBSA layers and an MLP); \2 is the parameter
BLOCK_NAMES = [
    (r'norm1\.(weight|bias)', r'ln1.\2', r'norm.\2'),
    (r'attn\.qkv\.(weight|bias)', r'attn.attn.in_proj_\2', r'attn.qkv.\2'),
    (r'attn\.proj\.(weight|bias)', r'attn.attn.out_proj.\2',
     r'attn.out_proj.\2'),
    (r'norm2\.(weight|bias)', r'ln2.\2', r'norm2.\2'),
    (r'mlp\.fc1\.(weight|bias)', r'ffn.layers.0.0.\2', r'ffn.layers.0.0.\2'),
    (r'mlp\.fc2\.(weight|bias)', r'ffn.layers.1.\2', r'ffn.layers.1.\2'),
]


def _block_rules(target: int) -> Rules:
    return [(r'blocks\.(\d+)\.' + names[0], r'layers.\1.' + names[target])
            for names in BLOCK_NAMES]


TIMM_TO_MMSEG: Rules = FRAME + _block_rules(1)
TIMM_TO_WHITE_BOX: Rules = FRAME + _block_rules(2)
# mmseg ViT key (regex) -> WhiteBoxViT key: the same frame and MLP
MMSEG_TO_WHITE_BOX: Rules = [
    (r'(cls_token|pos_embed|patch_embed\..*|ln1\..*|layers\.\d+\.ffn\..*)',
     r'\1'),
    (r'layers\.(\d+)\.ln1\.(weight|bias)', r'layers.\1.norm.\2'),
    (r'layers\.(\d+)\.attn\.attn\.in_proj_(weight|bias)',
     r'layers.\1.attn.qkv.\2'),
    (r'layers\.(\d+)\.attn\.attn\.out_proj\.(weight|bias)',
     r'layers.\1.attn.out_proj.\2'),
    (r'layers\.(\d+)\.ln2\.(weight|bias)', r'layers.\1.norm2.\2'),
]
#: classification parts, dropped on purpose
CLASSIFIER = re.compile(r'^(head|fc_norm|pre_logits)\.')
StateDict = Dict[str, torch.Tensor]
Conversion = Tuple['OrderedDict[str, torch.Tensor]', List[str], List[str]]


def map_keys(state_dict: StateDict, rules: Rules,
             dropped_keys: re.Pattern) -> Conversion:
    """Rename every key by the first rule whose pattern matches it whole.

    Returns the converted state dict, the keys matching ``dropped_keys``
    (dropped on purpose, e.g. a classifier), and the keys no rule maps (to
    report: a converter must never lose a weight silently).
    """
    converted: 'OrderedDict[str, torch.Tensor]' = OrderedDict()
    dropped, unmapped = [], []
    for key, value in state_dict.items():
        if dropped_keys.match(key):
            dropped.append(key)
            continue
        for pattern, template in rules:
            if re.fullmatch(pattern, key):
                converted[re.sub(pattern, template, key)] = value
                break
        else:
            unmapped.append(key)
    return converted, dropped, unmapped


def timm_vit_to_mmseg(state_dict: StateDict) -> Conversion:
    """A timm ``vit_*_patch16_*`` state dict on mmseg's ViT keys (see
    :func:`map_keys` for what is returned)."""
    return map_keys(state_dict, TIMM_TO_MMSEG, CLASSIFIER)


def vit_to_white_box(state_dict: StateDict) -> Conversion:
    """A timm ``vit_*_patch16_*`` state dict, or one on mmseg's ViT keys
    (``layers.<i>.ln1``, as mmseg's converted Segmenter checkpoints), on
    ``WhiteBoxViT`` keys with MHSA or QKVCBSA attention and an MLP (see
    :func:`map_keys`)."""
    mmseg_keys = any(k.startswith('layers.') for k in state_dict)
    rules = MMSEG_TO_WHITE_BOX if mmseg_keys else TIMM_TO_WHITE_BOX
    return map_keys(state_dict, rules, CLASSIFIER)


# ---------------------------------------------------------------- AugReg
# The JAX (Flax) ViT's names, as timm 0.4.12 reads them in _load_weights
# (timm/models/vision_transformer.py:396-472). Flax stores a Dense kernel
# as (in, out), a convolution kernel as (height, width, in, out), and the
# attention's query/key/value kernels as (width, heads, head_dim) with
# (heads, head_dim) biases and its output kernel as (heads, head_dim,
# width). A file may keep all of them under 'opt/target/' (the original
# ViT checkpoints; timm 0.4.12 checks for it, vision_transformer.py:414).
AUGREG_OPTIONAL_PREFIX = 'opt/target/'
AUGREG_FRAME = ('embedding/kernel', 'embedding/bias', 'cls',
                'Transformer/posembed_input/pos_embedding',
                'Transformer/encoder_norm/scale',
                'Transformer/encoder_norm/bias')
AUGREG_BLOCK = tuple(
    [f'LayerNorm_{n}/{p}' for n in (0, 2) for p in ('scale', 'bias')] +
    [f'MultiHeadDotProductAttention_1/{role}/{p}'
     for role in ('query', 'key', 'value', 'out')
     for p in ('kernel', 'bias')] +
    [f'MlpBlock_3/Dense_{n}/{p}' for n in (0, 1)
     for p in ('kernel', 'bias')])
#: the classifier (and the pre-logits layer of some in21k files), kept in
#: timm's names so that the ViT converters drop them as classifier
AUGREG_CLASSIFIER = {'head/kernel': 'head.weight', 'head/bias': 'head.bias',
                     'pre_logits/kernel': 'pre_logits.fc.weight',
                     'pre_logits/bias': 'pre_logits.fc.bias'}
_AUGREG_LAYER = re.compile(r'Transformer/encoderblock_(\d+)/(.+)')
#: how many missing keys an error names
SHOWN = 5


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


def _dense(kernel: np.ndarray) -> torch.Tensor:
    """A Flax Dense kernel (in, out) as a torch Linear weight (out, in)."""
    return _tensor(kernel.T)


def augreg_to_timm(arrays: Mapping[str, np.ndarray],
                   source: str = 'the .npz file') -> StateDict:
    """The arrays of a JAX ViT ``.npz`` (AugReg names) as a timm
    ``VisionTransformer`` state dict, the weights timm 0.4.12's
    ``_load_weights`` puts into its model (query, key and value stacked
    into ``qkv``). Raises ``ValueError`` naming a missing key, a key no
    ViT part reads (a hybrid, another model) or a shape that does not fit.
    """
    prefix = (AUGREG_OPTIONAL_PREFIX
              if f'{AUGREG_OPTIONAL_PREFIX}embedding/kernel' in arrays else '')
    names = {k[len(prefix):]: k for k in arrays if k.startswith(prefix)}
    # beside opt/target/, such a file may hold the optimizer's state
    foreign = [k for k in arrays if not k.startswith(prefix)
               and not (prefix and k.startswith('opt/'))]
    layers = sorted({int(m.group(1)) for m in map(_AUGREG_LAYER.fullmatch,
                                                  names) if m})
    expected = list(AUGREG_FRAME) + [
        f'Transformer/encoderblock_{i}/{part}'
        for i in range(max(layers, default=0) + 1) for part in AUGREG_BLOCK]
    missing = [prefix + k for k in expected if k not in names]
    if missing:
        more = len(missing) - SHOWN
        raise InputError(
            f'{source} has no {", ".join(map(repr, missing[:SHOWN]))}' +
            (f' (and {more} more keys)' if more > 0 else '') +
            ': it is not a complete JAX ViT checkpoint (an AugReg .npz as '
            'timm 0.4.12 reads it)')
    unknown = foreign + [names[k] for k in names if k not in expected
                         and k not in AUGREG_CLASSIFIER]
    if unknown:
        raise InputError(
            f'{len(unknown)} arrays of {source} belong to no ViT part '
            f'(a hybrid or another model?): {", ".join(sorted(unknown))}')
    w = {k: np.asarray(arrays[v]) for k, v in names.items()}

    def shaped(key: str, shape: Tuple[int, ...]) -> np.ndarray:
        if w[key].shape != shape:
            raise InputError(f'{source}: {prefix}{key} has shape '
                             f'{w[key].shape}, expected {shape}')
        return w[key]

    kernel = w['embedding/kernel']
    if kernel.ndim != 4:
        raise InputError(f'{source}: {prefix}embedding/kernel has shape '
                         f'{kernel.shape}, expected (patch, patch, '
                         'channels, width)')
    width = kernel.shape[3]
    attn = 'MultiHeadDotProductAttention_1'
    query = w[f'Transformer/encoderblock_0/{attn}/query/kernel']
    if query.ndim != 3 or query.shape[0] != width:
        raise InputError(f'{source}: {prefix}Transformer/encoderblock_0/'
                         f'{attn}/query/kernel has shape {query.shape}, '
                         f'expected ({width}, heads, head_dim)')
    heads = query.shape[1:]
    hidden = w['Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias'].shape
    tokens = w['Transformer/posembed_input/pos_embedding'].shape[1:2]
    state: StateDict = OrderedDict()
    state['cls_token'] = _tensor(shaped('cls', (1, 1, width)))
    state['pos_embed'] = _tensor(shaped(
        'Transformer/posembed_input/pos_embedding', (1, *tokens, width)))
    # (h, w, in, out) -> (out, in, h, w)
    state['patch_embed.proj.weight'] = _tensor(kernel.transpose(3, 2, 0, 1))
    state['patch_embed.proj.bias'] = _tensor(
        shaped('embedding/bias', (width, )))
    for i in layers:
        b = f'Transformer/encoderblock_{i}/'
        t = f'blocks.{i}.'
        for ln, name in (('LayerNorm_0', 'norm1'), ('LayerNorm_2', 'norm2')):
            state[f'{t}{name}.weight'] = _tensor(
                shaped(f'{b}{ln}/scale', (width, )))
            state[f'{t}{name}.bias'] = _tensor(
                shaped(f'{b}{ln}/bias', (width, )))
        qkv = ('query', 'key', 'value')
        # (width, heads, head_dim) -> (heads x head_dim, width), stacked
        state[f'{t}attn.qkv.weight'] = torch.cat([_dense(shaped(
            f'{b}{attn}/{r}/kernel', (width, *heads)).reshape(width, -1))
            for r in qkv])
        state[f'{t}attn.qkv.bias'] = torch.cat([_tensor(shaped(
            f'{b}{attn}/{r}/bias', heads).reshape(-1)) for r in qkv])
        # (heads, head_dim, width) -> (width, heads x head_dim)
        state[f'{t}attn.proj.weight'] = _dense(shaped(
            f'{b}{attn}/out/kernel', (*heads, width)).reshape(-1, width))
        state[f'{t}attn.proj.bias'] = _tensor(
            shaped(f'{b}{attn}/out/bias', (width, )))
        for n, (fc, shape) in enumerate((('fc1', (width, *hidden)),
                                         ('fc2', (*hidden, width)))):
            dense = f'{b}MlpBlock_3/Dense_{n}/'
            state[f'{t}mlp.{fc}.weight'] = _dense(
                shaped(dense + 'kernel', shape))
            state[f'{t}mlp.{fc}.bias'] = _tensor(
                shaped(dense + 'bias', shape[1:]))
    state['norm.weight'] = _tensor(
        shaped('Transformer/encoder_norm/scale', (width, )))
    state['norm.bias'] = _tensor(
        shaped('Transformer/encoder_norm/bias', (width, )))
    for key, name in AUGREG_CLASSIFIER.items():
        if key in w:
            state[name] = (_dense(w[key]) if w[key].ndim == 2
                           else _tensor(w[key]))
    return state
