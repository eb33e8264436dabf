"""Segmenter-codebase checkpoints -> this project's configs and keys.

Three published codebases share the Segmenter frame (``rstrudel/segmenter``):
an ``encoder`` (a timm-like ViT with an unused ImageNet ``head``), a
``decoder``, and a ``variant.yml`` whose ``net_kwargs`` describe the
model. The decoders, told apart by their keys:

* Segmenter mask transformer (``mask``): ``proj_dec``, ``blocks.<i>`` (the
  encoder's block), ``cls_emb``, ``proj_patch`` and ``proj_classes``
  (``d x d`` matrices applied as ``x @ P``), ``decoder_norm``,
  ``mask_norm`` -> mmseg's ``SegmenterMaskTransformerHead``;
* Segmenter linear (``linear``): ``head`` -> mmseg's ``FCNHead`` with
  ``num_convs=0`` (its 1x1 ``conv_seg``);
* DEPICT-SA / -CA (``QishuaiWen/DEPICT``; ``depict-sa``, ``depict-ca``):
  ``net`` (SA) or ``snet`` + ``cnet`` (CA) of ``layers.<i>.norm`` and
  ``layers.<i>.fn.{proj,step_size}`` (``proj`` a bare ``(K*p, d)``
  parameter), ``decoder_norm`` (SA) or ``snorm``/``cnorm`` (CA),
  ``cls_emb``, ``mask_norm`` -> :class:`MSSAHead`. The released code picks
  SA or CA by a default argument, not in ``variant.yml``: the keys decide;
* CBT (``QishuaiWen/CBSA``, ``CBSA_semantic_segmentation``; ``cbt``):
  ``net.layers.<i>.fn.{proj,step_rep,step_x,to_out}`` -> :class:`CBSAHead`
  (``step_rep`` is ``eta``, ``step_x`` is ``kappa``).

The released CBT decoder does not stop the gradient through its pooled
representatives (eq. 5, this project's default); the forward pass is the
same, and ``attn_cfg=dict(rep_stop_grad=False)`` gives its gradients.
"""
from .checkpoint import (KINDS, PublishedModel, describe, detect_decoder,
                         read_variant, segmenter_to_mmseg)
from .config import (converted_config, differences, load_strictly,
                     model_settings, nested, pick_config, released_pipeline,
                     released_scale)

__all__ = [
    'KINDS', 'PublishedModel', 'converted_config', 'describe',
    'detect_decoder', 'differences', 'load_strictly', 'model_settings',
    'nested', 'pick_config', 'read_variant', 'released_pipeline',
    'released_scale', 'segmenter_to_mmseg'
]
