"""Pre-norm residual blocks around an attention operator:
``x + drop_path(attn(norm(x)))``. The operator returns the update, so a
forward hook on the block's ``attn`` sees it (ablation, usage ratios).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import DropPath

from mmseg_whitebox.ops import ISTA
from ..attention_registry import WHITE_BOX_ROLES, register_attention
from .builder import build_attention, build_feedforward

AttnCfg = Union[Dict[str, Any], nn.Module]


@register_attention('outside', operator='attn', roles=WHITE_BOX_ROLES)
class PreNormResidual(nn.Module):
    """``x + drop_path(attn(norm(x), **kwargs))``.

    Args:
        dim: token width.
        attn_cfg: the operator, a config (``dim`` and ``init_std`` filled
            in) or a built module.
        norm_cfg: the norm before the operator (default LayerNorm).
        drop_path_rate: stochastic depth on the update.
        init_std: passed to operators that take it.
    """

    def __init__(self,
                 dim: int,
                 attn_cfg: AttnCfg,
                 norm_cfg: Optional[Dict[str, Any]] = None,
                 drop_path_rate: float = 0.0,
                 init_std: float = 0.02) -> None:
        super().__init__()
        self.norm = build_norm_layer(norm_cfg or dict(type='LN'), dim)[1]
        self.attn = build_attention(attn_cfg, dim=dim, init_std=init_std)
        self.drop_path = (DropPath(drop_path_rate)
                          if drop_path_rate > 0 else nn.Identity())

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return x + self.drop_path(self.attn(self.norm(x), **kwargs))


class CrossPreNormResidual(PreNormResidual):
    """``query + drop_path(attn(query, norm(x)))`` (DEPICT-CA): the keys
    and values are normalised, the queries are not, as published."""

    def forward(self, query: torch.Tensor,  # type: ignore[override]
                x: torch.Tensor) -> torch.Tensor:
        return query + self.drop_path(self.attn(query, self.norm(x)))


class WhiteBoxBlock(PreNormResidual):
    """One encoder layer: the attention step of :class:`PreNormResidual`,
    then a feed-forward step on ``norm2(x)``:

    * ISTA (CRATE eq. 17, CBT): ``x = ista(norm2(x))``, no residual;
    * an MLP (ToST, ViT): ``x = x + drop_path(mlp(norm2(x)))``.

    Args:
        dim, attn_cfg, norm_cfg, drop_path_rate, init_std: see
            :class:`PreNormResidual`.
        ffn_cfg: ``dict(type='ISTA', ...)`` or ``dict(type='MLP',
            mlp_ratio=4, act_cfg=dict(type='GELU'))`` (mmcv's ``FFN``).
    """

    def __init__(self,
                 dim: int,
                 attn_cfg: AttnCfg,
                 ffn_cfg: Dict[str, Any],
                 norm_cfg: Optional[Dict[str, Any]] = None,
                 drop_path_rate: float = 0.0,
                 init_std: float = 0.02) -> None:
        super().__init__(dim, attn_cfg, norm_cfg, drop_path_rate, init_std)
        self.norm2 = build_norm_layer(norm_cfg or dict(type='LN'), dim)[1]
        self.ffn = build_feedforward(ffn_cfg, dim)

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        x = super().forward(x, **kwargs)
        if isinstance(self.ffn, ISTA):
            return self.ffn(self.norm2(x))
        return x + self.drop_path(self.ffn(self.norm2(x)))
