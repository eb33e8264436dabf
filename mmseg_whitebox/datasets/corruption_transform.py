"""Corrupting one image, and :class:`ImageCorruption`, the transform that
does it inside mmseg's test pipeline, deterministically per image."""
from __future__ import annotations

import contextlib
import os.path as osp
import warnings
import zlib
from typing import Any, Dict, Iterator, Optional

import numpy as np
from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

from mmseg_whitebox.utils.tool_error import InputError

from .corruption_library import (GROUPS, check_severities,
                                 load_imagecorruptions, resolve_corruptions)


def image_seed(seed: int, corruption: str, key: str) -> int:
    """The per-image seed: stable across runs, processes and machines."""
    return zlib.crc32(f'{seed}|{corruption}|{key}'.encode()) & 0x7fffffff


@contextlib.contextmanager
def _numpy_seed(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (the library's only randomness) for
    the block, restoring its state after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def corrupt_image(img: np.ndarray, corruption: str, severity: int,
                  seed: int = 0, channel_order: str = 'bgr') -> np.ndarray:
    """``img`` (H x W x 3 in ``channel_order``, or H x W; uint8 or float
    in 0..255) corrupted, with the same shape, dtype and channel order;
    the random parts drawn from ``seed``."""
    lib = load_imagecorruptions()
    if img.ndim not in (2, 3) or (img.ndim == 3 and img.shape[2] not in (1,
                                                                         3)):
        raise InputError(
            f'image corruptions take H x W x 3 or gray images, got shape '
            f'{tuple(img.shape)}')
    if min(img.shape[:2]) < 32:
        raise InputError(
            f'image corruptions need images of at least 32 x 32 pixels, got '
            f'{img.shape[0]} x {img.shape[1]}')
    dtype, shape = img.dtype, img.shape
    u8 = img if dtype == np.uint8 else np.clip(np.rint(img), 0,
                                               255).astype(np.uint8)
    gray = u8.ndim == 2 or u8.shape[2] == 1
    if gray:
        rgb = np.repeat(u8.reshape(shape[:2] + (1, )), 3, axis=2)
    else:
        rgb = u8[..., ::-1] if channel_order == 'bgr' else u8
    with _numpy_seed(seed), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        out = lib.corrupt(np.ascontiguousarray(rgb),
                          corruption_name=corruption, severity=severity)
    if out.shape[:2] != shape[:2]:
        raise InputError(
            f'{corruption} changed the image size from {shape[:2]} to '
            f'{out.shape[:2]}')
    if gray:
        out = np.rint(out.astype(np.float32) @ np.array(
            [0.299, 0.587, 0.114], np.float32)).clip(0, 255).astype(np.uint8)
        out = out.reshape(shape)
    elif channel_order == 'bgr':
        out = out[..., ::-1]
    return np.ascontiguousarray(out).astype(dtype, copy=False)


@TRANSFORMS.register_module()
class ImageCorruption(BaseTransform):
    """Corrupt ``results['img']`` with an ImageNet-C corruption (see module
    docstring); put it right after ``LoadImageFromFile``.

    Args:
        corruption: a name of :func:`corruption_names`; None leaves the
            image as it is (the clean reference).
        severity: 1..5.
        seed: base seed; each image's seed is derived from it, the
            corruption and the image's file name.
        channel_order: of the loaded image (mmcv loads ``'bgr'``).

    Required keys: ``img``; ``img_path`` (or ``sample_idx``) for the seed.
    Modified keys: ``img``.
    """

    def __init__(self,
                 corruption: Optional[str] = None,
                 severity: int = 1,
                 seed: int = 0,
                 channel_order: str = 'bgr') -> None:
        if channel_order not in ('bgr', 'rgb'):
            raise InputError(
                f"channel_order must be 'bgr' or 'rgb', got {channel_order!r}")
        self.channel_order = channel_order
        self.seed = int(seed)
        self.set(corruption, severity)

    def set(self, corruption: Optional[str], severity: int = 1) -> None:
        """Switch to another corruption and severity (checked)."""
        if corruption is not None:
            resolve_corruptions([corruption])
            if corruption in GROUPS:
                raise InputError(
                    f'ImageCorruption takes one corruption name, not the '
                    f'group {corruption!r}')
        self.severity = check_severities([severity])[0]
        self.corruption = corruption

    def image_key(self, results: Dict[str, Any]) -> str:
        path = results.get('img_path')
        if path:
            return osp.basename(str(path))
        return str(results.get('sample_idx', ''))

    def transform(self, results: Dict[str, Any]) -> Dict[str, Any]:
        if self.corruption is None:
            return results
        seed = image_seed(self.seed, self.corruption,
                          self.image_key(results))
        results['img'] = corrupt_image(results['img'], self.corruption,
                                       self.severity, seed,
                                       self.channel_order)
        return results

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}(corruption={self.corruption!r}, '
                f'severity={self.severity}, seed={self.seed})')
