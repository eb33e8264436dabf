"""Which pixels each CBSA representative gathers (CBSA paper Fig. 7 style):
:class:`CBSAAttentionCapture` records the extraction attention ``A_k``
(``m x N`` per subspace) of every CBSA layer, and
:func:`draw_extraction_maps` overlays chosen representatives' maps on the
image.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from mmseg_whitebox.ops import CBSA
from mmseg_whitebox.utils.atomic import save_figure
from mmseg_whitebox.utils.distributed import unwrap_model
from mmseg_whitebox.utils.tool_error import InputError


class CBSAAttentionCapture:
    """Context manager recording each CBSA layer's extraction attention.

    ``records`` maps the operator's module name to a list (one entry per
    forward) of ``dict(attn=(B, K, m, N) tensor, hw=(H, W),
    grid_start=int)``.
    """

    def __init__(self, model: torch.nn.Module,
                 scope: str = 'decode_head') -> None:
        model = unwrap_model(model)
        prefix = f'{scope}.' if scope else ''
        self.ops = {name: m for name, m in model.named_modules()
                    if isinstance(m, CBSA) and name.startswith(prefix)}
        if not self.ops:
            raise InputError(f'no CBSA layers under {scope!r}')
        self.records: Dict[str, List[Dict[str, Any]]] = {
            name: [] for name in self.ops}

    def __enter__(self) -> 'CBSAAttentionCapture':
        for name, op in self.ops.items():
            original = op.forward
            records = self.records[name]

            def forward(x, hw, grid_start=0, return_attn=False,
                        original=original, records=records):
                out, attn = original(x, hw, grid_start, return_attn=True)
                records.append(dict(attn=attn.detach().cpu(), hw=tuple(hw),
                                    grid_start=grid_start))
                return (out, attn) if return_attn else out

            op.forward = forward  # an instance attribute shadows the method
        return self

    def __exit__(self, *exc) -> bool:
        for op in self.ops.values():
            op.__dict__.pop('forward', None)  # back to the class method
        return False


def grid_maps(attn: torch.Tensor, hw: Tuple[int, int],
              grid_start: int = 0) -> torch.Tensor:
    """``(K, m, N)`` attention -> ``(K, m, H, W)`` maps over the patch grid
    (extra tokens such as class embeddings dropped)."""
    h, w = hw
    k, m, _ = attn.shape
    return attn[:, :, grid_start:grid_start + h * w].reshape(k, m, h, w)


def draw_extraction_maps(image: np.ndarray,
                         attn: torch.Tensor,
                         hw: Tuple[int, int],
                         rep_grid: Tuple[int, int],
                         out_file: str,
                         grid_start: int = 0,
                         valid_hw: Optional[Tuple[int, int]] = None,
                         representatives: Optional[Sequence[int]] = None,
                         title: str = '') -> str:
    """Save a PNG grid of extraction maps over ``image`` (RGB uint8): a
    row per subspace, a column per representative, its pooled
    initialisation cell outlined.

    Args:
        attn: ``(K, m, N)`` for one image.
        hw: token grid of the network input.
        rep_grid: the layer's ``(rh, rw)`` grid of representatives.
        valid_hw: the tokens covering the image (default: all).
        representatives: indices to show (default: up to 6, spread).
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.patches as patches
    import matplotlib.pyplot as plt

    maps = grid_maps(attn.float(), hw, grid_start)
    k, m = maps.shape[:2]
    if representatives is None:
        representatives = sorted({int(round(i)) for i in
                                  np.linspace(0, m - 1, min(m, 6))})
    vh, vw = valid_hw or hw
    img_h, img_w = image.shape[:2]
    fig, axes = plt.subplots(k, len(representatives),
                             figsize=(2.2 * len(representatives), 2.2 * k),
                             squeeze=False)
    rh, rw = rep_grid
    for head in range(k):
        for col, rep in enumerate(representatives):
            ax = axes[head][col]
            amap = maps[head, rep, :vh, :vw][None, None]
            amap = F.interpolate(amap, size=(img_h, img_w), mode='bilinear',
                                 align_corners=False)[0, 0].numpy()
            amap = amap / max(float(amap.max()), 1e-12)
            ax.imshow(image)
            ax.imshow(amap, cmap='inferno', alpha=0.6, vmin=0, vmax=1)
            # the pooled cell this representative was initialised from
            ci, cj = divmod(rep, rw)
            cell_h, cell_w = img_h * hw[0] / vh / rh, img_w * hw[1] / vw / rw
            ax.add_patch(patches.Rectangle(
                (cj * cell_w, ci * cell_h), cell_w, cell_h, fill=False,
                edgecolor='cyan', linewidth=1))
            ax.set_xticks([])
            ax.set_yticks([])
            if head == 0:
                ax.set_title(f'rep {rep}', fontsize=8)
            if col == 0:
                ax.set_ylabel(f'subspace {head}', fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, out_file, dpi=100)
    plt.close(fig)
    return out_file
