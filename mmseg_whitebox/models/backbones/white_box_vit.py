"""White-box vision transformers as mmseg backbones: CRATE (MSSA + ISTA),
ToST (TSSA + MLP), CBT (CBSA + ISTA) and their hybrids, one class.

mmseg's ``VisionTransformer`` supplies the patch embedding (or a published
stem, ``stem_cfg``), CLS token, position embedding, ``out_indices``,
``final_norm``, ``norm_eval`` and pretrained loading; the layers are
:class:`~mmseg_whitebox.models.layers.WhiteBoxBlock` s of the decode
heads' operators. Each layer gets the token grid ``hw`` and ``grid_start``
(1 with a CLS token), so CBSA pools the patch grid only, unless
``rep_pool='leading'`` (the published classification code's ``w[:, :-1]``,
as the CBT encoder configs).
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmseg.models.backbones import VisionTransformer
from mmseg.registry import MODELS
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.checkpoint import checkpoint

from mmseg_whitebox.ops import ISTA, SubspaceAttention
from mmseg_whitebox.utils.checkpoint_checks import (added_parameters,
                                                    check_state_dict,
                                                    state_dict_of)
from ..layers import WhiteBoxBlock, keep_grad_layout

LayerCfg = Union[Dict[str, Any], Sequence[Dict[str, Any]]]
#: how a WhiteBoxViT trained from scratch is initialised (``weight_init``)
WEIGHT_INITS = ('mmseg', 'timm', 'pytorch')


def per_layer(cfg: LayerCfg, num_layers: int, name: str) -> List[Dict]:
    """One config per layer: ``cfg`` for all, or a list of ``num_layers``
    (e.g. CRATE+CBT hybrids)."""
    if isinstance(cfg, dict):
        return [cfg] * num_layers
    cfgs = list(cfg)
    if len(cfgs) != num_layers:
        raise ValueError(f'{name} lists {len(cfgs)} configs for '
                         f'{num_layers} layers; give one dict for all layers '
                         'or one per layer')
    return cfgs


CONVERTERS = ('tools/model_converters/timm2mmseg.py --to white-box (a timm '
              'or mmseg ViT, for the CBSA-adapted ViTs) or tools/'
              'model_converters/whitebox2mmseg.py (published CBT, CRATE and '
              'ToST classification checkpoints)')


def check_local_checkpoint(path: Optional[str]) -> None:
    """White-box weights are never downloaded: a missing local file is an
    error that names it and the converter that writes it."""
    if path and '://' not in path and not os.path.isfile(path):
        raise FileNotFoundError(
            f'pretrained backbone weights {path!r} do not exist. Convert '
            f'them with {CONVERTERS}, or train from scratch with '
            'model.backbone.init_cfg=None')


def check_pretrained(vit: VisionTransformer, state: Dict[str, Any],
                     source: str, allow_partial: bool = False) -> None:
    """Raise unless the converted weights ``state`` fit ``vit`` (an mmseg
    ``VisionTransformer`` or a WhiteBoxViT) as its pretrained loading
    loads them: ``pos_embed`` resized in ``state`` first; parameters the
    operators add (``added_parameters``) may be absent."""
    pos_embed = state.get('pos_embed')
    if pos_embed is not None and pos_embed.shape != vit.pos_embed.shape:
        side = int(math.sqrt(pos_embed.shape[1] - 1))
        grid = (vit.img_size[0] // vit.patch_size,
                vit.img_size[1] // vit.patch_size)
        state['pos_embed'] = vit.resize_pos_embed(pos_embed, grid,
                                                  (side, side),
                                                  vit.interpolate_mode)
    partial_flag = ('init_cfg.allow_partial=True (or convert the '
                    f'checkpoint for this architecture with {CONVERTERS})')
    bias = 'patch_embed.projection.bias'
    if bias in state and bias not in vit.state_dict():
        partial_flag = (f'model.backbone.patch_bias=True in the config ('
                        f'the checkpoint has {bias}, as timm ViTs do), or '
                        + partial_flag)
    check_state_dict(vit, state, source, allow_partial=allow_partial,
                     partial_flag=partial_flag,
                     optional=added_parameters(vit))


@MODELS.register_module()
class WhiteBoxViT(VisionTransformer):
    """A ViT whose layers are white-box blocks.

    Args:
        attn_cfg: the attention operator of every layer
            (``dict(type='CBSA', num_heads=3, head_dim=64, rep_grid=8)``),
            or a list with one per layer.
        ffn_cfg: ``dict(type='ISTA')`` (CRATE, CBT) or ``dict(type='MLP',
            mlp_ratio=4)`` (ToST, ViT), or a list with one per layer.
        stem_cfg: a registered patch embedding instead of mmseg's
            ``PatchEmbed``: ``dict(type='ConvPatchStem')`` (CBT) or
            ``dict(type='NormedPatchEmbed')`` (CRATE); ``None``: mmseg's.
        num_layers, embed_dims, drop_path_rate, norm_cfg, with_cp,
            out_indices, final_norm, with_cls_token, norm_eval: as mmseg's
            ``VisionTransformer``.
        frozen_stages: freeze the patch embedding, CLS token and position
            embedding (stage 0) and the first ``frozen_stages`` layers;
            -1 freezes nothing.
        frozen_exclude: as mmseg's (a ``**kwargs`` entry), applied once
            the layers exist, so that DDP registers only trainable ones.
        init_std: passed to the operators that take it.
        weight_init: without pretrained weights, ``'mmseg'``, ``'timm'``
            (ToST, Segmenter) or ``'pytorch'`` (CRATE, CBT); see
            :meth:`init_weights`.
        **kwargs: other ``VisionTransformer`` arguments.
    """

    def __init__(self,
                 attn_cfg: LayerCfg = dict(
                     type='CBSA', num_heads=3, head_dim=64, rep_grid=(8, 8)),
                 ffn_cfg: LayerCfg = dict(type='ISTA'),
                 stem_cfg: Optional[Dict[str, Any]] = None,
                 num_layers: int = 12,
                 embed_dims: int = 192,
                 drop_path_rate: float = 0.0,
                 norm_cfg: Optional[Dict[str, Any]] = None,
                 with_cp: bool = False,
                 out_indices: Union[int, Sequence[int]] = -1,
                 frozen_stages: int = -1,
                 init_std: float = 0.02,
                 weight_init: str = 'mmseg',
                 **kwargs) -> None:
        if weight_init not in WEIGHT_INITS:
            raise ValueError(f'weight_init must be one of {WEIGHT_INITS}, '
                             f'got {weight_init!r}')
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-6)
        # no standard layers (num_layers=0); ours follow
        super().__init__(embed_dims=embed_dims, num_layers=0,
                         out_indices=0, norm_cfg=norm_cfg, with_cp=with_cp,
                         **kwargs)
        if stem_cfg is not None:
            self.patch_embed = MODELS.build(
                dict(dict(in_channels=kwargs.get('in_channels', 3),
                          embed_dims=embed_dims, patch_size=self.patch_size),
                     **stem_cfg))
        if isinstance(out_indices, int):
            out_indices = [num_layers - 1 if out_indices == -1
                           else out_indices]
        bad = [i for i in out_indices if not 0 <= i < num_layers]
        if bad:
            raise ValueError(f'out_indices {bad} outside the {num_layers} '
                             'layers')
        self.out_indices = list(out_indices)
        rates = torch.linspace(0, drop_path_rate, num_layers).tolist()
        self.layers = nn.ModuleList(
            WhiteBoxBlock(embed_dims, attn, ffn, norm_cfg, rate, init_std)
            for attn, ffn, rate in zip(
                per_layer(attn_cfg, num_layers, 'attn_cfg'),
                per_layer(ffn_cfg, num_layers, 'ffn_cfg'), rates))
        if frozen_stages > num_layers:
            raise ValueError(f'frozen_stages={frozen_stages} exceeds the '
                             f'{num_layers} layers')
        self.frozen_stages = frozen_stages
        self.weight_init = weight_init
        self._freeze_stages()
        self._freeze()  # mmseg's ran before our stem and layers existed
        keep_grad_layout(self)  # the CLS token (layers.grad_layout)

    def init_weights(self) -> None:
        """The pretrained weights (``init_cfg`` ``Pretrained``), loaded
        strictly; else, as the released encoders draw them:

        * ``'mmseg'``: mmseg's ViT init (or another ``init_cfg``), then the
          operators' own (mmseg's would overwrite e.g. MSSA's bases);
        * ``'timm'`` (ToST; positions as Segmenter's ViT): ``Linear``
          trunc-normal 0.02 cut at +-2, zero bias, norms 1 / 0, convs at
          PyTorch's default, CLS token and positions trunc-normal 0.02,
          then the operators' own;
        * ``'pytorch'`` (CRATE, CBT): the operators' own, then ``Linear``,
          convs and norms at PyTorch's default, CLS token and positions
          N(0, 1).
        """
        if (isinstance(self.init_cfg, dict) and self.init_cfg.get('type')
                in ('Pretrained', 'Pretrained_Part')):
            self.load_pretrained(**self.init_cfg)
            return
        if self.weight_init == 'mmseg' or self.init_cfg is not None:
            super().init_weights()
            self._reset_operators(SubspaceAttention)
            return
        defaults = (nn.Conv2d, nn.LayerNorm, nn.GroupNorm, _BatchNorm)
        if self.weight_init == 'pytorch':
            self._reset_operators(SubspaceAttention, ISTA)
            defaults += (nn.Linear, )
        for module in self.modules():
            if isinstance(module, defaults):
                module.reset_parameters()
            elif isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02, a=-2.0,
                                      b=2.0)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        with torch.no_grad():
            for token in (self.cls_token, self.pos_embed):
                if self.weight_init == 'pytorch':
                    token.normal_()
                else:
                    nn.init.trunc_normal_(token, std=0.02, a=-2.0, b=2.0)
        if self.weight_init == 'timm':
            self._reset_operators(SubspaceAttention, ISTA)

    def _reset_operators(self, *types: type) -> None:
        """The operators' own published initialisation."""
        for module in self.modules():
            if isinstance(module, types):
                module.reset_parameters()

    def load_pretrained(self, checkpoint: str, type: str = 'Pretrained',
                        allow_partial: bool = False, **_) -> None:
        """Load converted weights as mmseg's ViT does, but strictly (mmseg
        would only print the keys of another architecture and train on from
        a half-initialised encoder) unless ``allow_partial=True``. The
        operators' ``added_parameters`` may be absent."""
        from mmengine.runner import CheckpointLoader
        from mmengine.runner.checkpoint import load_state_dict
        check_local_checkpoint(checkpoint)
        state = state_dict_of(CheckpointLoader.load_checkpoint(
            checkpoint, map_location='cpu', logger='current'))
        if type == 'Pretrained_Part':
            prefix = 'image_encoder.'
            state = {k[len(prefix):]: v for k, v in state.items()
                     if k.startswith(prefix)}
        check_pretrained(self, state,
                         f'pretrained backbone weights {checkpoint!r}',
                         allow_partial)
        load_state_dict(self, state, strict=False, logger='current')

    @property
    def pos_grid(self) -> Tuple[int, int]:
        """The token grid the position embedding is laid out on."""
        return (self.img_size[0] // self.patch_size,
                self.img_size[1] // self.patch_size)

    def _pos_embeding(self, patched_img: torch.Tensor,
                      hw_shape: Tuple[int, int],
                      pos_embed: torch.Tensor) -> torch.Tensor:
        """Add the position embedding, resized whenever the grid differs
        (mmseg's ViT resizes only when the token count differs)."""
        if tuple(hw_shape) != self.pos_grid:
            pos_embed = self.resize_pos_embed(pos_embed, hw_shape,
                                              self.pos_grid,
                                              self.interpolate_mode)
        return self.drop_after_pos(patched_img + pos_embed)

    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        frozen: List[nn.Module] = [self.patch_embed]
        self.cls_token.requires_grad = False
        self.pos_embed.requires_grad = False
        frozen += list(self.layers[:self.frozen_stages])
        for module in frozen:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'WhiteBoxViT':
        super().train(mode)
        self._freeze_stages()
        return self

    def _grid_output(self, x: torch.Tensor, hw: Tuple[int, int],
                     grid_start: int) -> Union[torch.Tensor, List]:
        b, _, c = x.shape
        grid = x[:, grid_start:].reshape(b, hw[0], hw[1], c)
        out = grid.permute(0, 3, 1, 2).contiguous()
        return [out, x[:, 0]] if self.output_cls_token else out

    def forward(self, inputs: torch.Tensor) -> Tuple:
        b = inputs.shape[0]
        x, hw = self.patch_embed(inputs)
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], dim=1)
        x = self._pos_embeding(x, hw, self.pos_embed)
        if not self.with_cls_token:
            x = x[:, 1:]
        if self.pre_norm:
            x = self.pre_ln(x)
        grid_start = int(self.with_cls_token)
        outs = []
        if self.out_origin:
            outs.append(self._grid_output(x, hw, grid_start))
        for i, layer in enumerate(self.layers):
            if self.with_cp and self.training and x.requires_grad:
                x = checkpoint(layer, x, hw=hw, grid_start=grid_start,
                               use_reentrant=False)
            else:
                x = layer(x, hw=hw, grid_start=grid_start)
            if i == len(self.layers) - 1 and self.final_norm:
                x = self.norm1(x)
            if i in self.out_indices:
                outs.append(self._grid_output(x, hw, grid_start))
        return tuple(outs)
