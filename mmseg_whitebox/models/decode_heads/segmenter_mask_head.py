"""mmseg's Segmenter mask head, initialised as the released decoder.

mmseg's ``SegmenterMaskTransformerHead`` computes what the released
``MaskTransformer`` computes (``rstrudel/segmenter`` at 20d1bfa,
``segm/model/decoder.py``) but draws its projections trunc-normal 0.02
and leaves the attention input projection at xavier-uniform. The released
decoder draws ``proj_patch`` and ``proj_classes`` as
``d_model ** -0.5 * randn`` (decoder.py:57,67-68), every ``nn.Linear``
(``qkv`` included) trunc-normal 0.02 cut at +-2 with zero bias, LayerNorms
1 / 0, ``cls_emb`` trunc-normal 0.02 (decoder.py:64,73-74, utils.py:12-19).

:class:`SegmenterMaskTransformerHeadReleasedInit` is mmseg's head with that
initialisation; its modules and state-dict keys are mmseg's, so mmseg's and
converted released checkpoints load unchanged. Its class embeddings get
their gradient in their own layout
(:func:`~mmseg_whitebox.models.layers.keep_grad_layout`).
"""
from __future__ import annotations

import torch.nn as nn
from mmseg.models.decode_heads import SegmenterMaskTransformerHead
from mmseg.registry import MODELS

from ..layers import keep_grad_layout


@MODELS.register_module()
class SegmenterMaskTransformerHeadReleasedInit(SegmenterMaskTransformerHead):
    """``SegmenterMaskTransformerHead`` (same arguments, same keys) whose
    ``init_weights`` draws the released decoder's distributions."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        keep_grad_layout(self)

    def init_weights(self) -> None:
        # mmseg's is the released one but for the three below
        super().init_weights()
        for module in self.modules():
            if isinstance(module, nn.MultiheadAttention):
                for name in ('in_proj_weight', 'q_proj_weight',
                             'k_proj_weight', 'v_proj_weight'):
                    weight = getattr(module, name, None)
                    if weight is not None:
                        nn.init.trunc_normal_(weight, std=self.init_std,
                                              a=-2.0, b=2.0)
                if module.in_proj_bias is not None:
                    nn.init.zeros_(module.in_proj_bias)
        # mmseg's Linear holds the transposed matrix: the same i.i.d. draw
        scale = self.patch_proj.in_features**-0.5
        nn.init.normal_(self.patch_proj.weight, std=scale)
        nn.init.normal_(self.classes_proj.weight, std=scale)
