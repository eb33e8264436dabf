"""Which images a tool reads and where their pictures go (the image demo
and the ONNX inference tool): an image file or a folder's images, one
output path per image, and the lock of that output."""
from __future__ import annotations

import os
import os.path as osp
from typing import List, Optional, Sequence

from mmseg_whitebox.utils.atomic import check_not_input
from mmseg_whitebox.utils.input_checks import (check_output_file,
                                               check_writable_folder)
from mmseg_whitebox.utils.run_lock import (RunLock, lock_folder,
                                           lock_output_file)
from mmseg_whitebox.utils.tool_error import ToolError

#: file endings read as images in a folder (as mmcv reads them)
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff',
                    '.webp')


def list_images(path: str) -> List[str]:
    """``[path]`` for an image file, else a folder's images (sorted, not
    recursive); :class:`ToolError` if none."""
    if osp.isfile(path):
        return [path]
    if not osp.isdir(path):
        raise ToolError(f'image or folder {path!r} does not exist')
    images = sorted(
        osp.join(path, name) for name in os.listdir(path)
        if name.lower().endswith(IMAGE_EXTENSIONS)
        and osp.isfile(osp.join(path, name)))
    if not images:
        raise ToolError(f'folder {path!r} has no images '
                        f'({", ".join(IMAGE_EXTENSIONS)})')
    return images


def output_paths(images: Sequence[str], source: str,
                 out_file: Optional[str] = None,
                 out_dir: Optional[str] = None) -> List[str]:
    """Where each image's overlay goes: ``out_file`` for a single image,
    else ``out_dir/<image name>.png`` (the extension kept in the name when
    two images share a stem)."""
    if out_file and out_dir:
        raise ToolError('give either --out-file or --out, not both')
    if osp.isdir(source) and out_file:
        raise ToolError(f'{source!r} is a folder: write its overlays with '
                        '--out DIR instead of --out-file')
    if out_file:
        if osp.isdir(out_file):
            raise ToolError(f'--out-file {out_file!r} is a folder; give a '
                            'file name (or use --out)')
        check_not_input(out_file, images, '--out-file')
        check_output_file(out_file, '--out-file', image=True)
        return [out_file]
    if not out_dir:
        raise ToolError('give --out-file FILE (one image) or --out DIR '
                        'for the overlays')
    if osp.exists(out_dir) and not osp.isdir(out_dir):
        raise ToolError(f'--out {out_dir!r} is a file, not a folder')
    check_writable_folder(out_dir, '--out')
    stems = [osp.splitext(osp.basename(p))[0] for p in images]
    names = [osp.basename(p).replace('.', '_') if stems.count(s) > 1 else s
             for p, s in zip(images, stems)]
    outputs = [osp.join(out_dir, f'{name}.png') for name in names]
    for out in outputs:
        check_not_input(out, images, '--out')
    return outputs


def check_opacity(opacity: float) -> float:
    if not 0 < opacity <= 1:
        raise ToolError(f'--opacity must be in (0, 1], got {opacity}')
    return opacity


def lock_outputs(out_file: Optional[str] = None,
                 out_dir: Optional[str] = None) -> RunLock:
    """The lock of ``out_dir``, else of ``out_file``: two runs never paint
    into the same output."""
    if out_dir:
        return lock_folder(out_dir, '--out')
    return lock_output_file(out_file, '--out-file')
