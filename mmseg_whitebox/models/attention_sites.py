"""Where a model's attention layers are, and what "their update" means.

An *attention site* is one attention module the registry
(:mod:`.attention_registry`) knows, meeting a residual stream ``x``. For
every attention class alike it defines:

* the **parameters of the attention** (what ``decoder-attention`` and
  ``encoder-attention`` perturb): the operator's, but its norms and its
  entry's exclusions (docs/robustness.md);
* the **ablation**: the update set to zero, the rest untouched;
* the **usage ratio**: ``||update||_F / ||x||_F`` per image.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.per_image import gather_images
from .attention_registry import NORM_TYPES, AttentionEntry, attention_entry

#: class names that look like attention (an unregistered one is refused)
ATTENTION_LIKE = re.compile(r'attn|attention|msa', re.IGNORECASE)


@dataclass
class AttentionSite:
    """One attention module meeting a residual stream.

    Attributes:
        name: module name of the attention operator, e.g.
            ``decode_head.layers.0.attn``.
        kind: the registered class the entry belongs to (its name).
        entry: the registry entry (convention, parameters, batch axis).
        attention: the operator; its parameters (see
            :meth:`named_parameters`) are the site's.
        block: the module whose first input is the residual stream.
        output: the module whose output is the update (``inside``: the
            identity plus the update).
        index: position among the sites of its scope (0-based).
    """

    name: str
    kind: str
    entry: AttentionEntry
    attention: nn.Module
    block: nn.Module
    output: nn.Module
    index: int

    @property
    def convention(self) -> str:
        return self.entry.convention

    @property
    def owner(self) -> str:
        """The registered module's name (its submodules are the site's)."""
        suffix = f'.{self.entry.operator}' if self.entry.operator else ''
        return self.name.removesuffix(suffix)

    def named_parameters(self) -> List[Tuple[str, nn.Parameter]]:
        """The parameters that count as the attention: the operator's,
        without normalisation layers and the entry's exclusions."""
        norms = {id(p) for m in self.attention.modules()
                 if isinstance(m, NORM_TYPES) for p in m.parameters()}
        return [(f'{self.name}.{n}', p)
                for n, p in self.attention.named_parameters()
                if id(p) not in norms
                and not any(re.search(x, n) for x in self.entry.exclude)]


def _in_scope(name: str, scope: str) -> bool:
    return not scope or name == scope or name.startswith(scope + '.')


def _site(model: nn.Module, name: str, module: nn.Module,
          entry: AttentionEntry, index: int) -> AttentionSite:
    operator = module.get_submodule(entry.operator)
    block = module
    if entry.stream == 'parent':
        block = model.get_submodule(name.rpartition('.')[0])
    output = module.get_submodule(entry.output) if entry.output else operator
    full = f'{name}.{entry.operator}' if entry.operator else name
    return AttentionSite(full, type(module).__name__, entry, operator, block,
                         output, index)


def find_attention_sites(model: nn.Module,
                         scope: str = 'decode_head') -> List[AttentionSite]:
    """All attention sites under the module named ``scope`` (``''`` for the
    whole model), in module order (a registered module inside another
    site is part of that site)."""
    model = unwrap_model(model)
    sites: List[AttentionSite] = []
    for name, module in model.named_modules():
        if not _in_scope(name, scope) or any(
                _in_scope(name, s.owner) for s in sites):
            continue
        entry = attention_entry(module)
        if entry is not None:
            sites.append(_site(model, name, module, entry, len(sites)))
    return sites


def unregistered_attention(model: nn.Module, scope: str = '',
                           sites: Optional[List[AttentionSite]] = None
                           ) -> List[Tuple[str, str]]:
    """``(name, class)`` of the modules under ``scope`` whose class name
    looks like attention (:data:`ATTENTION_LIKE`) but that no site holds
    or contains: attention the evaluator would miss."""
    model = unwrap_model(model)
    if sites is None:
        sites = find_attention_sites(model, scope)
    owners = [s.owner for s in sites]
    found = []
    for name, module in model.named_modules():
        cls = type(module).__name__
        if (not name or not _in_scope(name, scope)
                or not ATTENTION_LIKE.search(cls)
                or any(_in_scope(name, o) or _in_scope(o, name)
                       for o in owners)):
            continue
        if not any(_in_scope(name, n) for n, _ in found):
            found.append((name, cls))
    return found


def _rows(t: torch.Tensor, axis: int) -> torch.Tensor:
    """Per row of ``axis``, the sum of squares of ``t`` (float64)."""
    t = t.detach().double().movedim(axis, 0)
    return t.reshape(t.shape[0], -1).pow(2).sum(1)


def _add_update_hook(site: AttentionSite,
                     fn: Optional[Callable[[torch.Tensor, torch.Tensor],
                                           None]] = None,
                     remove: bool = False) -> List[Any]:
    """Call ``fn(residual_stream, update)`` on every forward of the site,
    and/or (``remove``) make its update zero. Returns the hook handles."""
    entry = site.entry
    if entry.convention == 'inside':

        def inside_hook(module, args, kwargs, output):
            identity = entry.identity(args, kwargs)
            if fn is not None:
                fn(identity, output - identity)
            return identity if remove else None

        return [site.output.register_forward_hook(inside_hook,
                                                  with_kwargs=True)]

    stash: List[torch.Tensor] = []

    def stream_hook(module, args):
        stash.append(args[0])

    def output_hook(module, args, output):
        stream = stash.pop()
        if fn is not None:
            scale = (getattr(site.block, entry.scale) if entry.scale
                     else 1)
            fn(stream, scale * output)
        return torch.zeros_like(output) if remove else None

    return [site.block.register_forward_pre_hook(stream_hook),
            site.output.register_forward_hook(output_hook)]


class _UpdateHooks:
    """Update hooks owned by one context manager: leaving it removes its
    own hooks only, so contexts on the same sites nest."""

    def __init__(self, sites: List[AttentionSite]) -> None:
        self.sites = sites
        self._handles: List[Any] = []

    def _hook(self, site: AttentionSite, fn: Optional[Callable] = None,
              remove: bool = False) -> None:
        self._handles += _add_update_hook(site, fn, remove)

    def __exit__(self, *exc) -> bool:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        return False


class AttentionAblation(_UpdateHooks):
    """Context manager: the selected sites' updates are zero, so each
    passes its stream through (a context attention gives a zero
    context)."""

    def __init__(self, sites: List[AttentionSite]) -> None:
        if not sites:
            raise ValueError('no attention sites to ablate')
        super().__init__(sites)

    def __enter__(self) -> 'AttentionAblation':
        for site in self.sites:
            self._hook(site, remove=True)
        return self


class AttentionUsage(_UpdateHooks):
    """Context manager recording ``||update||_F / ||x||_F`` per site while
    the model runs.

    Without a ``model``, :attr:`ratios` holds one ratio per row of each
    call's batch axis. Given the ``model`` (the segmentor, or its
    distributed wrapper), each call's rows are summed per image of the
    forward's batch, one ratio per image and call, so that :meth:`summary`
    can gather a distributed evaluation's images over ranks.
    """

    def __init__(self, sites: List[AttentionSite],
                 model: Optional[nn.Module] = None) -> None:
        super().__init__(sites)
        self.ratios: Dict[str, List[float]] = {s.name: [] for s in sites}
        self.model = model
        #: per site, the ratios of each image of finished forward calls
        self.per_image: Dict[str, List[List[float]]] = {
            s.name: [] for s in sites}
        #: per site, each call's squared norms per row (update, stream)
        self._calls: Dict[str, List[Tuple[torch.Tensor, torch.Tensor]]] = {
            s.name: [] for s in sites}

    def __enter__(self) -> 'AttentionUsage':
        for site in self.sites:

            def record(x, update, site=site):
                axis = site.entry.axis(site.attention)
                num, den = _rows(update, axis), _rows(x, axis)
                self.ratios[site.name].extend(
                    (num.sqrt() / den.sqrt().clamp_min(1e-12)).tolist())
                self._calls[site.name].append((num, den))

            self._hook(site, record)
        if self.model is not None:
            self._handles.append(unwrap_model(self.model)
                                 .register_forward_hook(self._end_batch))
        return self

    def _end_batch(self, module: nn.Module, args: Any, output: Any) -> None:
        """After a forward call of the model: its ratios, per image."""
        if not isinstance(output, (list, tuple)) or not output:
            return
        images = len(output)
        for site in self.sites:
            calls, self._calls[site.name] = self._calls[site.name], []
            per_call = [self._per_image(site, num, den, images)
                        for num, den in calls]
            self.per_image[site.name].extend(
                [float(c[i]) for c in per_call] for i in range(images))

    @staticmethod
    def _per_image(site: AttentionSite, num: torch.Tensor,
                   den: torch.Tensor, images: int) -> torch.Tensor:
        if num.numel() % images:
            raise RuntimeError(
                f'attention site {site.name} ({site.kind}) gave '
                f'{num.numel()} rows for a batch of {images} images: its '
                'registry entry has the wrong batch_axis')
        num, den = num.view(images, -1).sum(1), den.view(images, -1).sum(1)
        return num.sqrt() / den.sqrt().clamp_min(1e-12)

    def summary(self, num_images: Optional[int] = None
                ) -> List[Dict[str, Any]]:
        """Per site: the number of ratios (``images``) and their mean, min
        and max. With a ``model``, over every rank (a collective), the
        padding beyond ``num_images`` dropped."""
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
                convention=site.convention,
                images=int(values.numel()),
                ratio_mean=float(values.mean()),
                ratio_min=float(values.min()),
                ratio_max=float(values.max())))
        return rows
