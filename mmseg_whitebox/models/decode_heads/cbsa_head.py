"""The CBSA head: the CBT decoder (CBSA paper, Sec. 4.2)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from mmseg.registry import MODELS

from .mask_classification_head import JointTokenHead

CBSA_DEFAULTS = dict(type='CBSA', num_heads=3, head_dim=100,
                     rep_grid=(10, 10), out_proj='linear')


@MODELS.register_module()
class CBSAHead(JointTokenHead):
    """Contract-and-Broadcast Transformer decoder.

    ``num_layers`` pre-norm residual CBSA layers (no MLP) over the patch
    tokens and the appended class embeddings, then the mask frame.
    Representatives are pooled from the patch grid only; the class tokens
    take part in extraction and receive the broadcast.

    Args:
        num_layers: decoder depth (published: 3).
        attn_cfg: the CBSA operator (:class:`~mmseg_whitebox.ops.CBSA`);
            published at ViT-T: 3 heads x 100 dims, a 10x10 grid of
            representatives, ``out_proj='linear'`` (CBT) or ``'tied'``
            (the rigorous CBT-dagger, no output linear).
        **kwargs: :class:`MaskClassificationHead` / ``BaseDecodeHead``
            arguments (``in_channels``, ``channels``, ``num_classes``, ...).
    """

    def __init__(self,
                 num_layers: int = 3,
                 attn_cfg: Optional[Dict[str, Any]] = None,
                 **kwargs) -> None:
        attn_cfg = {**CBSA_DEFAULTS, **(attn_cfg or {})}
        super().__init__(num_layers=num_layers, attn_cfg=attn_cfg, **kwargs)
