"""The TSSA head: ToST's operator in the Segmenter/DEPICT decoder frame."""
from __future__ import annotations

from typing import Any, Dict, Optional

from mmseg.registry import MODELS

from .mask_classification_head import JointTokenHead

TSSA_DEFAULTS = dict(type='TSSA', num_heads=3, head_dim=100,
                     out_proj='linear')


@MODELS.register_module()
class TSSAHead(JointTokenHead):
    """``num_layers`` pre-norm residual TSSA layers (no MLP) over patch
    tokens and class embeddings, then the mask frame.

    Args:
        num_layers: decoder depth.
        attn_cfg: the TSSA operator, over the defaults (3 heads x 100).
    """

    def __init__(self,
                 num_layers: int = 3,
                 attn_cfg: Optional[Dict[str, Any]] = None,
                 **kwargs) -> None:
        attn_cfg = {**TSSA_DEFAULTS, **(attn_cfg or {})}
        super().__init__(num_layers=num_layers, attn_cfg=attn_cfg, **kwargs)
