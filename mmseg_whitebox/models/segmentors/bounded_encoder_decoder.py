"""An ``EncoderDecoder`` whose test-time memory does not grow with the
original image size.

mmseg's ``postprocess_result`` resizes the logits of every class to the
original size before the argmax (one 4000x3000 image, 150 classes: a 7.2
GB float map, kept as ``seg_logits``). :class:`BoundedMemoryEncoderDecoder`
makes the same prediction from the logits at the network's resolution,
resizing and taking the argmax a band of rows at a time. Differences
(docs/deployment.md): ``pred_sem_seg`` is the same up to rounding of
near-ties (below 1e-4 of the pixels); ``seg_logits`` stays at the network's
input resolution (after padding removal and flip), which mmseg's metric,
visualisation hook and inferencer do not read; ``--tta`` needs mmseg's
``EncoderDecoder``. Its training loss is mmseg's unless ``loss_band_rows``
is set.
"""
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from mmengine.structures import PixelData
from mmseg.registry import MODELS
from mmseg.structures import SegDataSample
from torch import Tensor

from .banded_loss_encoder_decoder import BandedLossEncoderDecoder

#: default size of the float buffers of one band of output rows
DEFAULT_TILE_BYTES = 64 * 1024 ** 2


def _source_index(in_size: int, out_size: int, align_corners: bool,
                  start: int, stop: int) -> Tuple[Tensor, Tensor, Tensor]:
    """``(i0, i1, lambda1)`` of output indices ``start..stop-1`` along one
    axis, as PyTorch's CPU ``upsample_bilinear2d`` computes them."""
    dst = torch.arange(start, stop, dtype=torch.float32)
    if align_corners:
        scale = (torch.tensor(in_size - 1, dtype=torch.float32) /
                 (out_size - 1)) if out_size > 1 else torch.tensor(0.)
        src = scale * dst
    else:
        scale = torch.tensor(in_size, dtype=torch.float32) / out_size
        src = (scale * (dst + 0.5) - 0.5).clamp_min(0)
    i0 = src.floor().long().clamp_max(in_size - 1)
    lam = (src - i0.float()).clamp(0, 1)
    i1 = (i0 + 1).clamp_max(in_size - 1)
    return i0, i1, lam


def resize_argmax_tiled(logits: Tensor,
                        size: Tuple[int, int],
                        align_corners: bool = False,
                        threshold: Optional[float] = None,
                        tile_bytes: int = DEFAULT_TILE_BYTES) -> Tensor:
    """``resize(logits[None], size, mode='bilinear')[0].argmax(0,
    keepdim=True)`` of ``(C, h, w)`` logits (C == 1: ``sigmoid >
    threshold`` as float), up to rounding, in bands of rows that take
    ``tile_bytes`` of float buffers."""
    if logits.dim() != 3:
        raise ValueError('logits must be (classes, height, width), got '
                         f'shape {tuple(logits.shape)}')
    channels, in_h, in_w = logits.shape
    out_h, out_w = (int(s) for s in size)
    if channels == 1 and threshold is None:
        raise ValueError('one output channel needs the decode head\'s '
                         'threshold (sigmoid > threshold)')
    pred = torch.empty((1, out_h, out_w), device=logits.device,
                       dtype=torch.long if channels > 1 else logits.dtype)
    row_bytes = max(1, channels * out_w * logits.element_size())
    rows = max(1, min(out_h, tile_bytes // row_bytes))
    for start in range(0, out_h, rows):
        stop = min(out_h, start + rows)
        if out_h == in_h:
            band = logits[:, start:stop]
        else:
            i0, i1, lam = _source_index(in_h, out_h, align_corners, start,
                                        stop)
            i0, i1 = i0.to(logits.device), i1.to(logits.device)
            lam = lam.to(logits)[None, :, None]
            band = (logits.index_select(1, i0) * (1 - lam) +
                    logits.index_select(1, i1) * lam)
        if out_w != in_w:
            # a 1-d linear resize of every row
            band = F.interpolate(
                band.reshape(1, -1, in_w), size=out_w, mode='linear',
                align_corners=align_corners).reshape(channels, -1, out_w)
        if channels > 1:
            pred[0, start:stop] = band.argmax(dim=0)
        else:
            pred[0, start:stop] = (band[0].sigmoid() > threshold).to(pred)
        del band
    return pred


@MODELS.register_module()
class BoundedMemoryEncoderDecoder(BandedLossEncoderDecoder):
    """``EncoderDecoder`` that predicts large images without
    full-resolution float logits.

    Args:
        tile_bytes: float buffers of one band of output rows.
        loss_band_rows: as ``BandedLossEncoderDecoder`` (default ``None``:
            mmseg's loss).
    """

    def __init__(self, *args, tile_bytes: int = DEFAULT_TILE_BYTES,
                 loss_band_rows: Optional[int] = None, **kwargs) -> None:
        super().__init__(*args, loss_band_rows=loss_band_rows, **kwargs)
        if int(tile_bytes) <= 0:
            raise ValueError(f'tile_bytes must be positive, got {tile_bytes}')
        self.tile_bytes = int(tile_bytes)

    def postprocess_result(self,
                           seg_logits: Tensor,
                           data_samples: Optional[List[SegDataSample]] = None
                           ) -> List[SegDataSample]:
        """``pred_sem_seg`` at the original size, ``seg_logits`` at the
        network's input size (without padding, flipped back)."""
        if data_samples is None:  # mmseg resizes nothing in this case
            return super().postprocess_result(seg_logits, data_samples)
        channels, height, width = seg_logits.shape[1:]
        threshold = (self.decode_head.threshold if channels == 1 else None)
        for i, sample in enumerate(data_samples):
            meta = sample.metainfo
            left, right, top, bottom = meta.get(
                'img_padding_size', meta.get('padding_size', [0] * 4))
            logits = seg_logits[i, :, top:height - bottom,
                                left:width - right]
            if meta.get('flip', None):
                direction = meta.get('flip_direction', None)
                if direction not in ('horizontal', 'vertical'):
                    raise ValueError('flip_direction must be horizontal or '
                                     f'vertical, got {direction!r}')
                logits = logits.flip(dims=(2, ) if direction == 'horizontal'
                                     else (1, ))
            pred = resize_argmax_tiled(logits, meta['ori_shape'][:2],
                                       self.align_corners, threshold,
                                       self.tile_bytes)
            if channels == 1:  # as mmseg: probabilities for one channel
                logits = logits.sigmoid()
            sample.set_data({
                'seg_logits': PixelData(data=logits.contiguous()),
                'pred_sem_seg': PixelData(data=pred)
            })
        return data_samples
