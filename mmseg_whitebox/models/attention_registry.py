"""Which modules are attention, and how each one meets its residual stream.

The noise evaluator perturbs, removes and measures *attention sites*
(:mod:`.attention_sites`); this registry says, per attention class (the
most derived registered class wins), what those mean for it:

``inside``
    the module returns ``identity + update`` (mmcv ``MultiheadAttention``,
    SegFormer's, ``NonLocal2d``, DANet's ``PAM``/``CAM``); removed, it
    returns its identity.
``outside``
    the module returns the update, a block adds it:
    ``x + drop_path(scale * attn(norm(x)))`` (Swin, BEiT with ``gamma_1``
    as ``scale``, Twins, this project's blocks); stream = the block's
    first input; removed, the update is zero.
``context``
    the output is a context the head concatenates with (or adds to) its
    input (``SelfAttentionBlock`` of ISA, ANN, OCR; ``EMAModule``); stream
    = the module's first input; removed, the context is zero.

User classes declare theirs with :func:`register_attention`
(docs/extending.md).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional, Tuple, Type, Union

import torch.nn as nn

CONVENTIONS = ('inside', 'outside', 'context')

#: per parameter group, a pattern on the parameter's name inside the
#: attention operator; the first match is its group (robustness.groups)
DEFAULT_ROLES: Tuple[Tuple[str, str], ...] = (
    ('qkv', r'(^|\.)(in_proj_weight|[qkv]_proj_weight|qkv\.weight|'
            r'(query|key|value)_project\..*weight|(g|theta|phi)\.conv\.weight|'
            r'conv_mask\.conv\.weight)$'),
    ('out-proj', r'(^|\.)(out_proj\.weight|proj\.weight|conv_out\.conv\.weight|'
                 r'(out|output)_project\..*weight)$'),
    ('scales', r'(^|\.)(gamma\.scale|gamma_\d)$'),
    ('biases', r'(^|\.)(bias|in_proj_bias|bias_[kv]|[qv]_bias)$'),
)
#: this project's operators (robustness.groups documents the groups)
WHITE_BOX_ROLES: Tuple[Tuple[str, str], ...] = (
    ('bases', r'^proj\.weight$'),
    ('qkv', r'^qkv\.weight$'),
    ('step-sizes', r'^(eta|kappa|step_size|temp)$'),
    ('out-proj', r'^out_proj\.weight$'),
    ('biases', r'(^|\.)bias$'),
)
#: normalisation layers inside an attention module are not the attention
NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)

Identity = Callable[[Tuple[Any, ...], Dict[str, Any]], Any]
BatchAxis = Union[int, Callable[[nn.Module], int]]


def first_input(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """The identity of modules computing ``x + update(x)``."""
    return args[0]


def mmcv_mha_identity(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """mmcv ``MultiheadAttention(query, key, value, identity, ...)``: the
    identity argument, else the query."""
    identity = kwargs.get('identity', args[3] if len(args) > 3 else None)
    if identity is None:
        identity = kwargs['query'] if 'query' in kwargs else args[0]
    return identity


def segformer_identity(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """mmseg ``EfficientMultiheadAttention(x, hw_shape, identity=None)``."""
    identity = kwargs.get('identity', args[2] if len(args) > 2 else None)
    return args[0] if identity is None else identity


def mmcv_batch_axis(module: nn.Module) -> int:
    """mmcv attention: (batch, tokens, C) if ``batch_first`` else
    (tokens, batch, C)."""
    return 0 if getattr(module, 'batch_first', False) else 1


@dataclass(frozen=True)
class AttentionEntry:
    """How one attention class meets its residual stream.

    Attributes:
        convention: ``inside``, ``outside`` or ``context`` (module doc).
        operator: the attention operator inside the registered module
            (a submodule path; ``''`` the module itself): the site's name
            and its parameters are the operator's.
        output: the submodule whose output is the update (``outside``,
            ``context``; ``''``: the operator).
        stream: ``'parent'`` (the module that contains the registered
            module takes the stream as its first input) or ``'self'``
            (the registered module does).
        scale: ``outside``: an attribute of the stream's module that
            multiplies the output (BEiT's layer scale ``gamma_1``).
        identity: ``inside``: the identity, from the call's arguments.
        batch_axis: the images' axis of the stream and the update (or a
            function of the module giving it); a window or group axis
            folded into it, images outermost, is summed per image.
        exclude: patterns on parameter names inside the operator that do
            not count as the attention (beside normalisation layers).
        roles: parameter groups (see :data:`DEFAULT_ROLES`).
    """

    convention: str
    operator: str = ''
    output: str = ''
    stream: str = 'self'
    scale: Optional[str] = None
    identity: Identity = first_input
    batch_axis: BatchAxis = 0
    exclude: Tuple[str, ...] = ()
    roles: Tuple[Tuple[str, str], ...] = DEFAULT_ROLES

    def __post_init__(self) -> None:
        if self.convention not in CONVENTIONS:
            raise ValueError(f'convention {self.convention!r}: choose one '
                             f'of {CONVENTIONS}')
        if self.stream not in ('self', 'parent'):
            raise ValueError(f"stream {self.stream!r}: 'self' or 'parent'")
        if self.convention == 'inside' and (self.output or self.scale):
            raise ValueError("an 'inside' attention returns identity + "
                             'update itself: no output or scale')

    def axis(self, module: nn.Module) -> int:
        return (self.batch_axis(module) if callable(self.batch_axis)
                else self.batch_axis)


_ENTRIES: Dict[Union[type, str], AttentionEntry] = {}
_resolved = False


def register_attention(convention: str, **options: Any
                       ) -> Callable[[Type[nn.Module]], Type[nn.Module]]:
    """Class decorator declaring an attention class's convention
    (:class:`AttentionEntry` fields as keywords); subclasses inherit it::

        @register_attention('outside', stream='parent')
        @MODELS.register_module()
        class MyAttention(nn.Module): ...
    """
    entry = AttentionEntry(convention, **options)

    def register(cls: Type[nn.Module]) -> Type[nn.Module]:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise TypeError(f'register_attention decorates an nn.Module '
                            f'class, not {cls!r}')
        _ENTRIES[cls] = entry
        return cls

    return register


def _resolve() -> None:
    """Import the classes registered by name (other libraries' classes,
    those a stack lacks skipped), once."""
    global _resolved
    if _resolved:
        return
    for key in [k for k in _ENTRIES if isinstance(k, str)]:
        module, _, name = key.rpartition('.')
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        _ENTRIES.setdefault(cls, _ENTRIES[key])
    _resolved = True


def attention_entry(module: nn.Module) -> Optional[AttentionEntry]:
    """The entry of the most derived registered class of ``module``."""
    _resolve()
    for cls in type(module).__mro__:
        if cls in _ENTRIES:
            return _ENTRIES[cls]
    return None


def registered_classes() -> Dict[type, AttentionEntry]:
    """Every registered class and its entry (imported ones)."""
    _resolve()
    return {k: v for k, v in _ENTRIES.items() if isinstance(k, type)}


# Other libraries' attention, by import path (subclasses inherit: mmcv's
# MHA is SegFormer's base, SelfAttentionBlock that of ISA, ANN, OCR, PAM)
_MMCV_MHA = AttentionEntry('inside', identity=mmcv_mha_identity,
                           batch_axis=mmcv_batch_axis)
_OUTSIDE = dict(convention='outside', stream='parent')
_BUILTIN = {
    'mmcv.cnn.bricks.transformer.MultiheadAttention': _MMCV_MHA,
    # not the spatial-reduction conv `sr` (it shapes the keys, like a
    # patch embedding)
    'mmseg.models.backbones.mit.EfficientMultiheadAttention': replace(
        _MMCV_MHA, identity=segformer_identity, batch_axis=0,
        exclude=(r'^sr\.',)),
    # SegFormer's attention called with identity 0: the block adds the
    # residual
    'mmseg.models.backbones.twins.GlobalSubsampledAttention': AttentionEntry(
        exclude=(r'^sr\.',), **_OUTSIDE),
    'mmseg.models.backbones.twins.LocallyGroupedSelfAttention':
        AttentionEntry(**_OUTSIDE),
    # not the relative-position bias tables (a position prior)
    'mmseg.models.backbones.swin.ShiftWindowMSA': AttentionEntry(
        exclude=(r'relative_position_bias_table$',), **_OUTSIDE),
    # the block's layer scale gamma_1 is in the update, not perturbed
    'mmseg.models.backbones.beit.BEiTAttention': AttentionEntry(
        scale='gamma_1', exclude=(r'relative_position_bias_table$',),
        **_OUTSIDE),
    'mmcv.cnn.bricks.non_local._NonLocalNd': AttentionEntry('inside'),
    'mmseg.models.utils.self_attention_block.SelfAttentionBlock':
        AttentionEntry('context'),
    # PAM and CAM: their learned residual scale gamma counts (CAM's only
    # parameter)
    'mmseg.models.decode_heads.da_head.PAM': AttentionEntry('inside'),
    'mmseg.models.decode_heads.da_head.CAM': AttentionEntry('inside'),
    # the context before the bottleneck that fuses it with the pixels
    'mmseg.models.decode_heads.ocr_head.ObjectAttentionBlock':
        AttentionEntry('context', output='out_project',
                       exclude=(r'^bottleneck\.',)),
    # no parameters: its bases are a buffer (a moving average)
    'mmseg.models.decode_heads.ema_head.EMAModule': AttentionEntry('context'),
}
_ENTRIES.update(_BUILTIN)
