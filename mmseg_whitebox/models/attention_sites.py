"""Where a model's attention layers are, and what "their update" means.

An *attention site* is one attention layer inside a residual stream
``x <- x + update(x)``. Three things hang on that definition, for every
head type alike:

* the **parameters of the attention layer** (what ``decoder-attention``
  perturbs): the attention operator's own parameters, and nothing else --
  not the LayerNorm before it, not an MLP after it, not class embeddings;
* the **ablation**: the layer's residual update set to zero, so the layer
  passes ``x`` through unchanged (the rest of the network is untouched);
* the **usage ratio**: ``||update||_F / ||x||_F`` per image, how much the
  layer changes the residual stream it is added to.

Per head type:

``mmseg_whitebox`` heads (``CBSAHead``, ``MSSAHead`` SA/CA, ``TSSAHead``)
    each ``PreNormResidual`` block (:mod:`mmseg_whitebox.models.layers`),
    ``x + attn(LayerNorm(x))``. Parameters: the operator ``attn`` -- the
    bases ``proj`` (U), the output projection ``out_proj`` if any (CBSA and
    TSSA default; not in the tied/rigorous variants), the step sizes
    (``eta``, ``kappa`` of CBSA, ``step_size`` of MSSA) and TSSA's
    ``temp``. The ``CrossPreNormResidual`` blocks of ``MSSAHead(mode='ca')``
    are sites too (their residual stream is the class queries).
mmseg's ``SegmenterMaskTransformerHead`` (and mmseg's ViT encoder layers)
    the ``attn`` (mmcv ``MultiheadAttention``) of each transformer layer,
    which adds its own identity: parameters are the query/key/value
    in-projection weights and biases and the output projection weight and
    bias; update = output - identity. The FFN, norms, ``dec_proj``,
    patch/class projections and class embeddings are not attention.
mmseg's ``FCNHead`` (the linear decoder)
    has no attention sites.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from mmcv.cnn.bricks.transformer import MultiheadAttention

from mmseg_whitebox.models.layers import PreNormResidual
from mmseg_whitebox.utils.per_image import gather_images

KIND_RESIDUAL_BLOCK = 'pre-norm residual (mmseg_whitebox)'
KIND_MMCV_MHA = 'MultiheadAttention with identity (mmcv)'


@dataclass
class AttentionSite:
    """One attention layer in a residual stream.

    Attributes:
        name: module name of the attention operator, e.g.
            ``decode_head.layers.0.attn``.
        kind: which residual convention applies (see module docstring).
        attention: the operator; its parameters are the layer's.
        block: the module whose input is the residual stream.
        index: position among the sites of its scope (0-based).
    """

    name: str
    kind: str
    attention: nn.Module
    block: nn.Module
    index: int

    def named_parameters(self) -> List[Tuple[str, nn.Parameter]]:
        return [(f'{self.name}.{n}', p)
                for n, p in self.attention.named_parameters()]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside DDP/MMDistributedDataParallel wrappers."""
    return getattr(model, 'module', model)


def find_attention_sites(model: nn.Module,
                         scope: str = 'decode_head') -> List[AttentionSite]:
    """All attention sites under the module named ``scope`` (``''`` for the
    whole model), in module order."""
    model = unwrap_model(model)
    sites: List[AttentionSite] = []
    prefix = f'{scope}.' if scope else ''
    for name, module in model.named_modules():
        if scope and not (name == scope or name.startswith(prefix)):
            continue
        if any(name.startswith(s.name + '.') or name == s.name
               for s in sites):
            continue
        if isinstance(module, PreNormResidual):
            sites.append(AttentionSite(f'{name}.attn', KIND_RESIDUAL_BLOCK,
                                       module.attn, module, len(sites)))
        elif isinstance(module, MultiheadAttention):
            sites.append(AttentionSite(name, KIND_MMCV_MHA, module, module,
                                       len(sites)))
    return sites


def _mha_identity(args: Tuple, kwargs: Dict) -> torch.Tensor:
    """The identity an mmcv MultiheadAttention call adds its output to."""
    identity = kwargs.get('identity')
    if identity is None and len(args) > 3:
        identity = args[3]
    if identity is None:  # mmcv: identity defaults to the query
        identity = kwargs['query'] if 'query' in kwargs else args[0]
    return identity


def _add_update_hook(site: AttentionSite,
                     fn: Callable[[torch.Tensor, torch.Tensor],
                                  Optional[torch.Tensor]]) -> List[Any]:
    """Call ``fn(residual_stream, update)`` on every forward of the site;
    if it returns a tensor, that becomes the site's new update. Returns
    the hook handles."""
    if site.kind == KIND_MMCV_MHA:

        def mha_hook(module, args, kwargs, output):
            identity = _mha_identity(args, kwargs)
            new = fn(identity, output - identity)
            return None if new is None else identity + new

        return [site.attention.register_forward_hook(mha_hook,
                                                     with_kwargs=True)]

    stash: Dict[str, torch.Tensor] = {}

    def block_pre_hook(module, args):
        stash['x'] = args[0]

    def attn_hook(module, args, output):
        return fn(stash.pop('x'), output)

    return [site.block.register_forward_pre_hook(block_pre_hook),
            site.attention.register_forward_hook(attn_hook)]


class _UpdateHooks:
    """Update hooks owned by one context manager: leaving it removes its
    own hooks only, so contexts on the same sites nest."""

    def __init__(self, sites: List[AttentionSite]) -> None:
        self.sites = sites
        self._handles: List[Any] = []

    def _hook(self, site: AttentionSite, fn: Callable) -> None:
        self._handles += _add_update_hook(site, fn)

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return False


class AttentionAblation(_UpdateHooks):
    """Context manager: the selected sites' residual updates are zero, so
    each such layer passes its input through (``x <- x``)."""

    def __init__(self, sites: List[AttentionSite]) -> None:
        if not sites:
            raise ValueError('no attention sites to ablate')
        super().__init__(sites)

    def __enter__(self) -> 'AttentionAblation':
        for site in self.sites:
            self._hook(site, lambda x, update: torch.zeros_like(update))
        return self


class AttentionUsage(_UpdateHooks):
    """Context manager recording ``||update||_F / ||x||_F`` per image and
    site while the model runs. ``x`` is the residual stream entering the
    layer (patch and class tokens), the update is what the attention adds.

    After the block, :meth:`summary` gives per-site mean/min/max ratios.
    Given the ``model`` whose forward calls run the sites (the segmentor,
    or its distributed wrapper), the ratios are also kept per image (one
    forward call is a batch of images; each site call within it, a
    sliding window included, holds one row per image of the batch), so
    that :meth:`summary` can put a distributed evaluation's images
    together over ranks.
    """

    def __init__(self, sites: List[AttentionSite],
                 model: Optional[nn.Module] = None) -> None:
        super().__init__(sites)
        self.ratios: Dict[str, List[float]] = {s.name: [] for s in sites}
        self.model = model
        #: per site, the ratios of each image of finished forward calls
        self.per_image: Dict[str, List[List[float]]] = {
            s.name: [] for s in sites}
        self._batch_start = {s.name: 0 for s in sites}

    def __enter__(self) -> 'AttentionUsage':
        for site in self.sites:
            values = self.ratios[site.name]

            def record(x, update, values=values):
                dims = tuple(range(1, x.dim()))
                num = update.detach().float().pow(2).sum(dims).sqrt()
                den = x.detach().float().pow(2).sum(dims).sqrt()
                values.extend((num / den.clamp_min(1e-12)).tolist())
                return None

            self._hook(site, record)
        if self.model is not None:
            module = getattr(self.model, 'module', self.model)
            self._handles.append(
                module.register_forward_hook(self._end_batch))
        return self

    def _end_batch(self, module: nn.Module, args: Any, output: Any) -> None:
        """After a forward call of the model: its ratios, per image."""
        if not isinstance(output, (list, tuple)) or not output:
            return
        images = len(output)
        for site in self.sites:
            values = self.ratios[site.name]
            batch = values[self._batch_start[site.name]:]
            self._batch_start[site.name] = len(values)
            self.per_image[site.name].extend(
                batch[i::images] for i in range(images))

    def summary(self, num_images: Optional[int] = None
                ) -> List[Dict[str, Any]]:
        """Per site: the number of ratios (``images``; one per image and
        window) and their mean, min and max. With a ``model``, over every
        rank of a distributed run (a collective: every rank calls it),
        the padding of the data set's ``num_images`` images dropped
        (:func:`~mmseg_whitebox.utils.per_image.gather_images`)."""
        rows = []
        for site in self.sites:
            if self.model is None:
                ratios = self.ratios[site.name]
            else:
                ratios = [r for image in gather_images(
                    self.per_image[site.name], num_images) for r in image]
            values = torch.tensor(ratios, dtype=torch.float64)
            if values.numel() == 0:
                continue
            rows.append(dict(
                layer=site.index, site=site.name, kind=site.kind,
                images=int(values.numel()),
                ratio_mean=float(values.mean()),
                ratio_min=float(values.min()),
                ratio_max=float(values.max())))
        return rows
