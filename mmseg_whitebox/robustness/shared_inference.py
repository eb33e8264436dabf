"""What each setting of a shared-encoder sweep computes after the encoder:
mmseg's prediction, without its fresh full-size maps.

mmseg's ``slide_inference`` and ``postprocess_result`` allocate several
full-size class maps per window and image, which dominate a setting's
time. :class:`HeadInference` resizes each window's logits into one reused
buffer, adds them in place into one reused map at the network's input
resolution, and takes the argmax straight from it when the label has that
size (a same-size bilinear resize returns finite values unchanged);
otherwise, or with non-finite logits, it resizes the whole map as mmseg
does. The predictions are mmseg's bit for bit
(``tests/test_shared_encoder_sweep.py``); only what ``IoUMetric`` reads is
produced, and :func:`fast_path_unsupported` says when the sweep needs
mmseg's own inference instead.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from mmseg_whitebox.engine.hooks import count_nonfinite
from mmseg_whitebox.ops.precision import autocast_dtype
from mmseg_whitebox.utils.windows import slide_windows

Window = Tuple[int, int, int, int]  # y1, y2, x1, x2


def fast_path_unsupported(model: nn.Module, evaluator: Any) -> Optional[str]:
    """Why :class:`HeadInference` cannot stand in for ``model``'s own
    inference (``None`` if it can): it needs mmseg's ``EncoderDecoder``
    inference (slide or whole) with two classes or more, and only
    ``IoUMetric`` metrics."""
    from mmseg.evaluation import IoUMetric
    from mmseg.models.segmentors import EncoderDecoder

    from mmseg_whitebox.models.segmentors import BoundedMemoryEncoderDecoder
    cls = type(model)
    for name in ('predict', 'inference', 'slide_inference',
                 'whole_inference', 'encode_decode'):
        if getattr(cls, name, None) is not getattr(EncoderDecoder, name):
            return f'{cls.__name__} has its own {name}'
    if cls.postprocess_result not in (
            EncoderDecoder.postprocess_result,
            BoundedMemoryEncoderDecoder.postprocess_result):
        return f'{cls.__name__} has its own postprocess_result'
    if model.out_channels < 2:
        return 'one output channel (a thresholded sigmoid)'
    if model.test_cfg.get('mode', 'whole') not in ('slide', 'whole'):
        return f'test mode {model.test_cfg.get("mode")!r}'
    metrics = getattr(evaluator, 'metrics', None) or []
    others = [type(m).__name__ for m in metrics
              if not isinstance(m, IoUMetric)]
    if not metrics or others:
        return f'metrics other than IoUMetric: {others}'
    return None


def _argmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(0, keepdim=True)``, by ``torch.max`` (the same
    indices; faster on a CPU)."""
    return torch.max(logits, dim=0, keepdim=True).indices


class HeadInference:
    """mmseg's prediction of the segmentor ``model`` (only read) with
    other decode heads on the same encoder features; reuses its maps
    across calls."""

    def __init__(self, model: nn.Module) -> None:
        from mmseg_whitebox.models.segmentors import \
            BoundedMemoryEncoderDecoder
        self.model = model
        self.bounded = isinstance(model, BoundedMemoryEncoderDecoder)
        self._buffers: dict = {}

    def windows(self, inputs: torch.Tensor) -> List[Optional[Window]]:
        """The windows the encoder runs on (``[None]``: whole image)."""
        if self.model.test_cfg.get('mode', 'whole') != 'slide':
            return [None]
        test_cfg = self.model.test_cfg
        return slide_windows(tuple(inputs.shape[2:]), test_cfg['crop_size'],
                             test_cfg['stride'])

    def _reused(self, name: str, shape: Tuple[int, ...],
                like: torch.Tensor) -> torch.Tensor:
        """A buffer kept across calls: fresh pages for a map of every
        class cost a CPU more than filling them."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape or buf.dtype != like.dtype \
                or buf.device != like.device:
            buf = self._buffers[name] = like.new_empty(shape)
        return buf

    def _window_logits(self, head: nn.Module, feats: Any,
                       metas: List[dict]) -> torch.Tensor:
        """``head.predict`` of one window; for mmseg's own ``predict``
        outside autocast, the resize writes into a reused buffer."""
        from mmseg.models.decode_heads.decode_head import BaseDecodeHead
        cls = type(head)
        device = self.model.data_preprocessor.device.type
        if cls.predict is not BaseDecodeHead.predict or \
                cls.predict_by_feat is not BaseDecodeHead.predict_by_feat or \
                autocast_dtype(device) is not None:
            # (autocast computes the resize in float32, its out= variant
            # in the head's dtype)
            return head.predict(feats, metas, self.model.test_cfg)
        small = head.forward(feats)
        size = list(metas[0]['img_shape'])
        out = self._reused('window', (*small.shape[:2], *size), small)
        return torch.ops.aten.upsample_bilinear2d.out(
            small, size, head.align_corners, None, None, out=out)

    def seg_logits(self, head: nn.Module, inputs: torch.Tensor,
                   metas: Sequence[dict], windows: List[Optional[Window]],
                   features: Sequence[Any]) -> torch.Tensor:
        """What mmseg's ``inference`` returns with ``head`` as the decode
        head, from each window's encoder ``features`` (in a map that the
        next call overwrites)."""
        test_cfg = self.model.test_cfg
        if windows == [None]:  # whole_inference: encode_decode
            return head.predict(features[0], list(metas), test_cfg)
        batch, _, height, width = inputs.shape
        canvas = self._reused(
            'canvas', (batch, self.model.out_channels, height, width),
            inputs).zero_()
        count = inputs.new_zeros((batch, 1, height, width))
        metas = [dict(m) for m in metas]
        for (y1, y2, x1, x2), feats in zip(windows, features):
            metas[0]['img_shape'] = inputs[:, :, y1:y2, x1:x2].shape[2:]
            canvas[:, :, y1:y2, x1:x2] += self._window_logits(head, feats,
                                                              metas)
            count[:, :, y1:y2, x1:x2] += 1
        return canvas.div_(count)

    def predictions(self, seg_logits: torch.Tensor,
                    samples: Sequence[Any]) -> List[Tuple[torch.Tensor,
                                                          int, int]]:
        """Per sample: mmseg's ``pred_sem_seg`` data, and the non-finite
        and total values of the ``seg_logits`` mmseg would keep."""
        from mmseg_whitebox.models.segmentors import resize_argmax_tiled
        _, _, height, width = seg_logits.shape
        align = self.model.align_corners
        out = []
        for i, sample in enumerate(samples):
            meta = sample.metainfo
            left, right, top, bottom = meta.get(
                'img_padding_size', meta.get('padding_size', [0] * 4))
            logits = seg_logits[i:i + 1, :, top:height - bottom,
                                left:width - right]
            if meta.get('flip', None):
                logits = logits.flip(
                    dims=(3, ) if meta.get('flip_direction') == 'horizontal'
                    else (2, ))
            size = tuple(meta['ori_shape'][:2])
            if self.bounded:
                pred = resize_argmax_tiled(logits[0], size, align,
                                           tile_bytes=self.model.tile_bytes)
                out.append((pred, count_nonfinite(logits), logits.numel()))
                continue
            bad = count_nonfinite(logits)
            if size == tuple(logits.shape[2:]) and not bad:
                out.append((_argmax(logits[0]), 0, logits.numel()))
                continue
            full = F.interpolate(logits, size=meta['ori_shape'],
                                 mode='bilinear', align_corners=align)[0]
            out.append((full.argmax(dim=0, keepdim=True),
                        count_nonfinite(full), full.numel()))
        return out
