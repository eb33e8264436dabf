"""Segmenter's test-time upsampling of small images, as a data
preprocessor.

Segmenter's evaluation (``segm/model/utils.py:92-104``, for every test
image at ``:164``) upsamples each normalised test image whose short side
is below the sliding window to exactly the window (bilinear), so the
window never sees a smaller image, where mmseg's slide inference would run
on it (ViT-L's 640 window after ADE20K's 512 resize, very wide images).
Every published config sets ``test_short_side`` to its window; ``--tta``
views go through it too, as the released ``--multiscale`` ones.
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
    bilinearly to that short side (long side ``int(long / short *
    short_side)``); others as they are."""
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
    """mmseg's ``SegDataPreProcessor``, then, at test time, Segmenter's
    upsampling of small images.

    Args:
        test_short_side: the smallest short side of a test image (the
            sliding window's size); ``None``: never upsample.
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
