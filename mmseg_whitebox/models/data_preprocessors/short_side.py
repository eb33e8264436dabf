"""Segmenter's test-time upsampling of small images, as a data
preprocessor.

Segmenter's evaluation (``rstrudel/segmenter``, ``segm/model/utils.py``,
``inference`` and ``resize``) upsamples every normalised test image whose
short side is below the sliding window to a short side of exactly the
window (bilinear; the long side scaled by the same ratio and truncated),
so that the window never sees a smaller image. It matters where the test
pipeline's resize leaves images smaller than the window: ViT-L's 640
window after ADE20K's 512 test resize, or very wide images whose long side
the resize caps. mmseg's slide inference would instead run the model on
the smaller image. The result is resized back to the original image size
by the segmentor, as mmseg always does. Every published config uses it
with ``test_short_side`` set to its sliding window (released
``segm/model/utils.py:92-104``, called for every test image at ``:164``);
the views of the multi-scale test (``--tta``) go through it too, as the
released ``--multiscale`` views do.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F
from mmseg.models.data_preprocessor import SegDataPreProcessor
from mmseg.registry import MODELS


def upsample_short_side(images: torch.Tensor,
                        short_side: int) -> torch.Tensor:
    """``(B, C, H, W)`` images with ``min(H, W) < short_side`` upsampled
    bilinearly (``align_corners=False``) to a short side of
    ``short_side`` and a long side of ``int(long / short * short_side)``;
    others are returned as they are."""
    h, w = images.shape[-2:]
    if min(h, w) >= short_side:
        return images
    if h < w:
        size = (short_side, int(w / h * short_side))
    else:
        size = (int(h / w * short_side), short_side)
    return F.interpolate(images, size, mode='bilinear', align_corners=False)


@MODELS.register_module()
class ShortSideDataPreProcessor(SegDataPreProcessor):
    """mmseg's ``SegDataPreProcessor``, then, at test time only, Segmenter's
    upsampling of normalised images whose short side is below
    ``test_short_side`` (see the module doc; ``None``: never).

    Args:
        test_short_side: the smallest short side a test image may have (the
            sliding window's size).
        **kwargs: ``SegDataPreProcessor``'s arguments.
    """

    def __init__(self,
                 *args: Any,
                 test_short_side: Optional[int] = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.test_short_side = test_short_side

    def forward(self, data: dict, training: bool = False) -> Dict[str, Any]:
        data = super().forward(data, training)
        if not training and self.test_short_side:
            data['inputs'] = upsample_short_side(data['inputs'],
                                                 self.test_short_side)
        return data
