"""mmseg's Segmenter mask head, initialised as the released decoder.

mmseg's ``SegmenterMaskTransformerHead`` computes what the released
``MaskTransformer`` computes (``rstrudel/segmenter`` at 20d1bfa,
``segm/model/decoder.py:37-102``), but starts from another point: its
``init_weights`` draws the patch and class projections trunc-normal with
std 0.02 and leaves the attention input projections at
``nn.MultiheadAttention``'s xavier-uniform (std 0.051 at ViT-T). The
released decoder draws

* ``proj_patch``, ``proj_classes``: ``d_model ** -0.5 * randn``
  (decoder.py:57,67-68; std 0.072 at ViT-T, 0.036 at ViT-B);
* every ``nn.Linear`` -- the blocks' ``qkv`` and ``proj``, the MLP's
  ``fc1``/``fc2``, ``proj_dec`` -- trunc-normal std 0.02 (timm's
  ``trunc_normal_``, cut at +-2 absolute), biases 0; every LayerNorm weight
  1, bias 0 (decoder.py:73 ``self.apply(init_weights)``, utils.py:12-19;
  blocks.py:47,49,19,23);
* ``cls_emb``: trunc-normal std 0.02 (decoder.py:64,74).

:class:`SegmenterMaskTransformerHeadReleasedInit` is mmseg's head with that
initialisation; its modules and state-dict keys are mmseg's, so mmseg's
checkpoints and converted released ones load into it unchanged. Its class
embeddings get their gradient in their own layout
(:func:`~mmseg_whitebox.models.layers.keep_grad_layout`; mmseg's forward
would hand them a slice of the tokens' gradient at one image per process).
"""
from __future__ import annotations

import torch.nn as nn
from mmseg.models.decode_heads import SegmenterMaskTransformerHead
from mmseg.registry import MODELS

from ..layers import keep_grad_layout


@MODELS.register_module()
class SegmenterMaskTransformerHeadReleasedInit(SegmenterMaskTransformerHead):
    """``SegmenterMaskTransformerHead`` (same arguments, same keys) whose
    ``init_weights`` (what mmengine's runner calls through
    ``model.init_weights()``) draws the released decoder's distributions
    (module docstring)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        keep_grad_layout(self)

    def init_weights(self) -> None:
        # mmseg's: cls_emb and every nn.Linear (dec_proj, the FFNs, the
        # attention out_proj, patch/class projections) trunc-normal
        # init_std = 0.02 with zero biases, LayerNorms 1 / 0 -- the
        # released utils.py:12-19 and decoder.py:74 for all but the two
        # projections and the attention input projection
        super().init_weights()
        for module in self.modules():
            if isinstance(module, nn.MultiheadAttention):
                # the released qkv is an nn.Linear(d, 3d): trunc-normal
                # 0.02, bias 0 (blocks.py:47; utils.py:13-16)
                for name in ('in_proj_weight', 'q_proj_weight',
                             'k_proj_weight', 'v_proj_weight'):
                    weight = getattr(module, name, None)
                    if weight is not None:
                        nn.init.trunc_normal_(weight, std=self.init_std,
                                              a=-2.0, b=2.0)
                if module.in_proj_bias is not None:
                    nn.init.zeros_(module.in_proj_bias)
        # scale * randn with scale = d_model ** -0.5 (decoder.py:57,67-68);
        # mmseg's Linear holds the transposed matrix, the same i.i.d. draw
        scale = self.patch_proj.in_features**-0.5
        nn.init.normal_(self.patch_proj.weight, std=scale)
        nn.init.normal_(self.classes_proj.weight, std=scale)
