"""Decoder FLOPs and parameters with mmengine's complexity analysis.

mmengine's ``FlopAnalyzer`` (fvcore-style: one fused multiply-add counts as
one flop) has no handles for ``aten::scaled_dot_product_attention`` and
``aten::baddbmm`` (or its in-place ``baddbmm_``), which the white-box
operators use, so it would silently count those products as free.
:func:`flop_analyzer` adds these handles (attention: ``B*h*Lq*Lk*(E+Ev)``
multiply-adds, its two matrix products; ``baddbmm``: the batched product,
as ``bmm``) and otherwise leaves mmengine's counting as it is.
"""
from __future__ import annotations

from typing import Any, List, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer
from mmengine.analysis.jit_handles import get_shape


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
    """mmengine's FlopAnalyzer with attention counted; quiet about the
    elementwise ops it ignores (norms, softmax, additions)."""
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.set_op_handle('aten::scaled_dot_product_attention',
                           sdpa_flop_jit)
    analyzer.set_op_handle('aten::baddbmm', baddbmm_flop_jit)
    analyzer.set_op_handle('aten::baddbmm_', baddbmm_flop_jit)  # in place
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    return analyzer


class _HeadOnFeatures(nn.Module):
    """Calls a decode head on the encoder's feature maps (what it sees in
    an EncoderDecoder), so it can be traced on its own."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, *features: torch.Tensor) -> Any:
        return self.head(list(features))


def decode_head_complexity(
        head: nn.Module, feature: Union[torch.Tensor, Sequence[torch.Tensor]]
) -> Tuple[int, int]:
    """``(flops, params)`` of a decode head on a ``(B, C, H, W)`` encoder
    feature map, or on the list of them the head is given (a head that
    reads several levels: mmseg's ANNHead); flops are fused multiply-adds,
    params exclude the loss."""
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
