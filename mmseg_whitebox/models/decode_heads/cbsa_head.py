"""The CBSA head: the CBT decoder (CBSA paper, Sec. 4.2)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from mmseg.registry import MODELS

from .mask_classification_head import JointTokenHead

CBSA_DEFAULTS = dict(type='CBSA', num_heads=3, head_dim=100,
                     rep_grid=(10, 10), out_proj='linear')


@MODELS.register_module()
class CBSAHead(JointTokenHead):
    """Contract-and-Broadcast Transformer decoder: ``num_layers``
    pre-norm residual CBSA layers (no MLP) over patch tokens and class
    embeddings, then the mask frame.

    Args:
        num_layers: decoder depth (published: 3).
        attn_cfg: the CBSA operator, over the published defaults
            (``out_proj='tied'``: CBT-dagger).
        **kwargs: :class:`MaskClassificationHead` arguments.
    """

    def __init__(self,
                 num_layers: int = 3,
                 attn_cfg: Optional[Dict[str, Any]] = None,
                 **kwargs) -> None:
        attn_cfg = {**CBSA_DEFAULTS, **(attn_cfg or {})}
        super().__init__(num_layers=num_layers, attn_cfg=attn_cfg, **kwargs)
