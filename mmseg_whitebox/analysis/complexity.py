"""FLOPs and parameters with mmengine's complexity analysis, attention
counted: of a decode head (:func:`decode_head_complexity`) and of a whole
segmentor, per module (:func:`model_complexity`,
``tools/analysis_tools/get_flops.py``).

mmengine's ``FlopAnalyzer`` (one fused multiply-add is one flop) has no
handles for ``aten::scaled_dot_product_attention`` and ``aten::baddbmm``,
which the white-box operators use, and would count them as free:
:func:`flop_analyzer` adds them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import get_shape
from mmengine.analysis.print_helper import complexity_stats_table
from mmengine.config import Config


def sdpa_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """Multiply-adds of ``softmax(q k^T) v`` for jit values q, k, v."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    *batch, lq, e = q
    lk, ev = k[-2], v[-1]
    n = 1
    for s in batch:
        n *= s
    return n * lq * lk * (e + ev)


def baddbmm_flop_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """Multiply-adds of ``input + b1 @ b2`` (the addition is free, as in
    mmengine's ``addmm``)."""
    b, n, c = get_shape(inputs[1])
    d = get_shape(inputs[2])[-1]
    return b * n * c * d


def flop_analyzer(model: nn.Module, inputs: Tuple) -> FlopAnalyzer:
    """mmengine's FlopAnalyzer with attention counted, quiet about the
    elementwise ops it ignores."""
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.set_op_handle('aten::scaled_dot_product_attention',
                           sdpa_flop_jit)
    analyzer.set_op_handle('aten::baddbmm', baddbmm_flop_jit)
    analyzer.set_op_handle('aten::baddbmm_', baddbmm_flop_jit)  # in place
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    return analyzer


class _HeadOnFeatures(nn.Module):
    """A decode head called on feature maps, traceable on its own."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, *features: torch.Tensor) -> Any:
        return self.head(list(features))


def decode_head_complexity(
        head: nn.Module, feature: Union[torch.Tensor, Sequence[torch.Tensor]]
) -> Tuple[int, int]:
    """``(flops, params)`` of a decode head on a ``(B, C, H, W)`` feature
    map or a list of them (e.g. mmseg's ANNHead); params exclude the
    loss."""
    features = (feature, ) if isinstance(feature, torch.Tensor) else \
        tuple(feature)
    was_training = head.training
    head.eval()
    try:
        with torch.no_grad():
            flops = flop_analyzer(_HeadOnFeatures(head), features).total()
    finally:
        head.train(was_training)
    params = sum(p.numel() for name, p in head.named_parameters()
                 if not name.startswith('loss_'))
    return int(flops), int(params)


@dataclass
class ModelComplexity:
    """FLOPs (multiply-adds) and parameters of one segmentor forward."""
    shape: Tuple[int, int]
    flops: int
    params: int
    #: per module (``''`` is the whole model), as mmengine's ``by_module``
    flops_by_module: Dict[str, int] = field(default_factory=dict)
    params_by_module: Dict[str, int] = field(default_factory=dict)
    table: str = ''

    def module(self, name: str) -> Tuple[int, int]:
        """``(flops, params)`` of the submodule ``name`` (e.g.
        ``'decode_head'``); zeros when the model has no such module."""
        return (int(self.flops_by_module.get(name, 0)),
                int(self.params_by_module.get(name, 0)))

    def summary(self) -> str:
        """The totals, as mmseg's get_flops prints them."""
        head_flops, head_params = self.module('decode_head')
        enc_flops, enc_params = self.module('backbone')
        h, w = self.shape
        return '\n'.join([
            f'Input shape: (1, 3, {h}, {w})',
            f'Flops: {self.flops / 1e9:.4g} GFLOPs '
            '(1 multiply-add = 1 flop, attention products counted)',
            f'Params: {self.params / 1e6:.4g} M',
            f'Encoder: {enc_flops / 1e9:.4g} GFLOPs, '
            f'{enc_params / 1e6:.4g} M params',
            f'Decode head: {head_flops / 1e9:.4g} GFLOPs, '
            f'{head_params / 1e6:.4g} M params',
        ])

    def to_dict(self) -> dict:
        head_flops, head_params = self.module('decode_head')
        enc_flops, enc_params = self.module('backbone')
        return dict(shape=list(self.shape), flops=self.flops,
                    params=self.params, encoder_flops=enc_flops,
                    encoder_params=enc_params, decode_head_flops=head_flops,
                    decode_head_params=head_params)


class _InferenceForward(nn.Module):
    """The segmentor's ``mode='tensor'`` forward with the head called as a
    module (mmseg calls ``decode_head.forward``, which hides the head's
    products from the per-module attribution)."""

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, '_segmentor', segmentor)
        for name, child in segmentor.named_children():
            self.add_module(name, child)

    def forward(self, image: torch.Tensor):
        return self.decode_head(self._segmentor.extract_feat(image))


def build_segmentor(cfg: Config) -> nn.Module:
    """The config's segmentor in eval mode, uninitialised (FLOPs need no
    weights) and nothing downloaded."""
    from mmengine.registry import init_default_scope
    from mmseg.registry import MODELS

    cfg = cfg.copy()
    cfg.model.pretrained = None
    cfg.model.train_cfg = None
    if 'backbone' in cfg.model and 'init_cfg' in cfg.model.backbone:
        cfg.model.backbone.init_cfg = None
    init_default_scope(cfg.get('default_scope', 'mmseg'))
    model = MODELS.build(cfg.model)
    return model.eval()


def default_shape(cfg: Config) -> Tuple[int, int]:
    """The config's crop size (data preprocessor ``size``, else the
    sliding-window crop), else 512x512."""
    model = cfg.model
    size = (model.get('data_preprocessor') or {}).get('size')
    if not size:
        size = (model.get('test_cfg') or {}).get('crop_size')
    if not size:
        return (512, 512)
    return (int(size[0]), int(size[1]))


def model_complexity(model: nn.Module, shape: Sequence[int],
                     max_depth: int = 3) -> ModelComplexity:
    """FLOPs and parameters of ``model``'s inference forward on one
    ``3 x H x W`` image, whole and per module (``max_depth`` levels in
    the table)."""
    h, w = (int(s) for s in shape)
    device = next(model.parameters()).device
    image = torch.zeros(1, 3, h, w, device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            analyzer = flop_analyzer(_InferenceForward(model), (image, ))
            analyzer.tracer_warnings('none')
            by_module = dict(analyzer.by_module())
            table = complexity_stats_table(
                analyzer, max_depth=max_depth, show_param_shapes=False)
    finally:
        model.train(was_training)
    params = dict(parameter_count(_InferenceForward(model)))
    return ModelComplexity(
        shape=(h, w), flops=int(by_module.get('', 0)),
        params=int(params.get('', 0)), flops_by_module=by_module,
        params_by_module=params, table=table)


def config_complexity(cfg: Config,
                      shape: Optional[Sequence[int]] = None,
                      max_depth: int = 3) -> ModelComplexity:
    """:func:`model_complexity` of a config's segmentor at ``shape``
    (default: :func:`default_shape`)."""
    model = build_segmentor(cfg)
    return model_complexity(model, shape or default_shape(cfg), max_depth)
