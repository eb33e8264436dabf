"""Checks of the devices, folders, output files and images a user hands a
tool, made before any model is built; each raises a
:class:`~mmseg_whitebox.utils.tool_error.ToolError` naming what is wrong
and what to do.
"""
from __future__ import annotations

import os
import os.path as osp
import tempfile
from typing import Optional, Sequence, Tuple

from mmseg_whitebox.utils.tool_error import ToolError

#: the fewest pixels an image the demo paints has (mmseg's visualizer
#: fails on a single pixel with an IndexError)
MIN_IMAGE_PIXELS = 2


def check_device(device: Optional[str]) -> None:
    """``device`` (``cpu``, ``cuda``, ``cuda:N``) exists on this machine."""
    if device is None:
        return
    import torch
    try:
        parsed = torch.device(device)
    except RuntimeError as exc:
        raise ToolError(f'unknown device {device!r}: use cpu, cuda or '
                        'cuda:N') from exc
    if parsed.type != 'cuda':
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = parsed.index or 0
    if index >= count:
        from .device import cuda_seen
        have = f'{count} CUDA device(s)' if count else 'no CUDA device'
        raise ToolError(f'--device {device}: this machine has {have} '
                        f'({cuda_seen()}); use --device cpu or run on a '
                        'machine with that GPU')


def check_writable_folder(folder: str, option: str,
                          label: Optional[str] = None) -> None:
    """``folder`` exists or can be created and a file can be written in it;
    ``option`` names where it was given, ``label`` what it is."""
    label = label or f'{option} {folder!r}'
    path = osp.abspath(folder or '.')
    probe = path
    while not osp.exists(probe):
        probe = osp.dirname(probe)
    if not osp.isdir(probe):
        raise ToolError(f'{label} cannot be created: {probe!r} is a file. '
                        f'Choose another {option}')
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise ToolError(
            f'{label} is not writable ({exc.strerror or exc}). Choose a '
            f'writable place with {option} or fix the folder\'s '
            'permissions') from exc


def check_output_file(path: str, option: str,
                      suffixes: Optional[Sequence[str]] = None,
                      image: bool = False) -> None:
    """``path`` can be written: not a folder, its folder writable, its
    type one of ``suffixes`` or (``image``) one OpenCV writes."""
    if osp.isdir(path):
        raise ToolError(f'{option} {path!r} is a folder; give a file name')
    suffix = osp.splitext(path)[1].lower()
    if suffixes is not None and suffix not in suffixes:
        raise ToolError(f'{option} {path!r}: unknown output format '
                        f'{suffix or "(no suffix)"}; name it '
                        f'{" or ".join("*" + s for s in suffixes)}')
    if image:
        import cv2
        if not suffix or not cv2.haveImageWriter(path):
            raise ToolError(f'{option} {path!r}: OpenCV cannot write '
                            f'{suffix or "files without a suffix"}; name it '
                            '*.png or *.jpg')
    folder = osp.dirname(path) or '.'
    check_writable_folder(folder, option,
                          f'the folder {folder!r} of {option} {path!r}')


def check_image_file(path: str) -> Tuple[int, int]:
    """``(height, width)`` of the image ``path`` (its header read by
    Pillow), of at least :data:`MIN_IMAGE_PIXELS` pixels."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ToolError(f'{path!r} is not an image (or is damaged): '
                        f'{type(exc).__name__}. Give a JPEG or PNG image, or '
                        'a folder of them') from exc
    if height * width < MIN_IMAGE_PIXELS:
        raise ToolError(f'image {path!r} is {height}x{width} pixels: too '
                        f'small to paint (at least {MIN_IMAGE_PIXELS} '
                        'pixels); give a real image')
    return height, width
