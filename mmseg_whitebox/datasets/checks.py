"""Checks of segmentation data that fail loudly, naming the file and the fix.

mmseg accepts bad data quietly or fails far from the cause (an empty split
in ``np.concatenate``, an RGB label as an ``IndexError``, out-of-range
labels as a lower mIoU, a truncated PNG without its name). Two registered
pieces catch these where they arise, raising :class:`InputError`:
``CheckedSegDataset`` (the split's image/label pairs at build time, an
unreadable file named per sample) and ``CheckSegSample`` (each label map).
"""
from __future__ import annotations

import functools
import os.path as osp
from typing import Any, Dict, Iterable, List, Optional

import numpy as np
from mmengine import fileio
from mmengine.dataset.base_dataset import Compose
from mmseg.registry import DATASETS, TRANSFORMS

from mmseg_whitebox.utils.tool_error import InputError

#: how many offending files an error message lists
SHOWN = 3


def _listing(items: List[str], total: Optional[int] = None) -> str:
    total = len(items) if total is None else total
    shown = ', '.join(repr(x) for x in items[:SHOWN])
    more = f' and {total - SHOWN} more' if total > SHOWN else ''
    return shown + more


def _is_local(path: Optional[str], dataset: Any) -> bool:
    return bool(path) and '://' not in path and not getattr(
        dataset, 'backend_args', None)


def _list_files(folder: str, suffix: str) -> List[str]:
    return list(fileio.list_dir_or_file(folder, list_dir=False,
                                        suffix=suffix, recursive=True))


def check_split(dataset: Any, data_list: List[dict]) -> None:
    """The split ``data_list`` of ``dataset`` is not empty and its images
    and labels come in pairs."""
    img_dir = dataset.data_prefix.get('img_path', None)
    ann_dir = dataset.data_prefix.get('seg_map_path', None)
    ann_file = getattr(dataset, 'ann_file', '') or ''
    root = getattr(dataset, 'data_root', None)
    if not data_list:
        where = (f'the split file {ann_file!r} lists no samples'
                 if ann_file and not osp.isdir(ann_file) else
                 f'{img_dir!r} holds no *{dataset.img_suffix} images')
        raise InputError(
            f'empty dataset split: {where} (data_root={root!r}). Check '
            'data_root and data_prefix.img_path (e.g. --cfg-options '
            'train_dataloader.dataset.data_root=DIR) and img_suffix, or '
            'generate/download the dataset first')
    if not _is_local(ann_dir, dataset):
        return
    if not osp.isdir(ann_dir):
        raise InputError(
            f'label folder {ann_dir!r} does not exist (data_root={root!r}, '
            'data_prefix.seg_map_path): every image needs a label map there; '
            'fix data_prefix.seg_map_path or add the labels')
    labels = set(_list_files(ann_dir, dataset.seg_map_suffix))
    expected: Dict[str, str] = {
        osp.relpath(d['seg_map_path'], ann_dir): d['img_path']
        for d in data_list if 'seg_map_path' in d}
    missing = [k for k in sorted(expected) if k not in labels]
    if missing:
        images = [expected[k] for k in missing]
        raise InputError(
            f'{len(missing)} image(s) have no label: {_listing(images)} '
            f'(expected {osp.join(ann_dir, missing[0])!r}). Add the missing '
            'label maps, remove those images, or fix data_prefix.'
            f'seg_map_path / seg_map_suffix ({dataset.seg_map_suffix!r})')
    if ann_file and not osp.isdir(ann_file):
        images = set(osp.relpath(d['img_path'], img_dir) for d in data_list)
        present = set(_list_files(img_dir, dataset.img_suffix))
        absent = sorted(images - present)
        if absent:
            raise InputError(
                f'{len(absent)} image(s) listed in {ann_file!r} do not '
                f'exist in {img_dir!r}: {_listing(absent)}. Add them or '
                'remove them from the split file')
        return
    stray = sorted(labels - set(expected))
    if stray:
        raise InputError(
            f'{len(stray)} label(s) in {ann_dir!r} have no image in '
            f'{img_dir!r}: {_listing(stray)} (mmseg would skip them '
            'silently). Add the images (*' + dataset.img_suffix + ') or '
            'remove the stray labels')


def _checked_load_data_list(dataset: Any) -> List[dict]:
    img_dir = dataset.data_prefix.get('img_path', None)
    ann_file = getattr(dataset, 'ann_file', '') or ''
    if (_is_local(img_dir, dataset) and not ann_file
            and not osp.isdir(img_dir)):
        raise InputError(
            f'image folder {img_dir!r} does not exist (data_root='
            f'{getattr(dataset, "data_root", None)!r}, data_prefix.img_path)'
            ': fix data_root/data_prefix or generate/download the dataset')
    data_list = type(dataset).load_data_list(dataset)
    check_split(dataset, data_list)
    return data_list


def _is_read_error(transform: Any, exc: BaseException) -> bool:
    if isinstance(exc, (OSError, EOFError)):
        return True
    if isinstance(exc, AssertionError):  # mmcv: 'failed to load image'
        return 'failed to load' in str(exc)
    return type(transform).__name__.startswith('Load')


class FileNamingCompose(Compose):
    """mmengine's ``Compose`` naming the sample's file when a loading
    transform cannot read it."""

    def __call__(self, data: dict) -> Optional[dict]:
        for t in self.transforms:
            try:
                data = t(data)
            except InputError:
                raise
            except Exception as exc:
                if not _is_read_error(t, exc):
                    raise
                raise InputError(unreadable_message(data, exc)) \
                    from exc
            if data is None:
                return None
        return data


def unreadable_message(data: dict, exc: BaseException) -> str:
    """The message for a sample (``data``, at the failing transform) whose
    image or label cannot be read."""
    is_image = 'img' not in data
    path = data.get('img_path') if is_image else data.get('seg_map_path')
    kind = 'image' if is_image else 'label'
    other = 'its label' if is_image else 'its image'
    what = ('an image file (JPEG/PNG)' if is_image else
            'a single-channel PNG label map')
    reason = (str(exc).strip().splitlines() or [''])[0]
    return (f'cannot read {kind} {path!r} ({type(exc).__name__}: {reason}): '
            'the file is missing, empty, truncated or not an image. Replace '
            f'it with {what}, or remove it and {other} from the split')


def _walk_transforms(transforms: Iterable[Any]) -> Iterable[Any]:
    for t in transforms:
        yield t
        if isinstance(getattr(t, 'transforms', None), list):
            yield from _walk_transforms(t.transforms)
        for sub in getattr(t, 'subroutines', None) or []:
            yield from _walk_transforms(getattr(sub, 'transforms', []))


def configure_sample_checks(dataset: Any) -> None:
    """Tell every :class:`CheckSegSample` in ``dataset``'s pipeline the
    dataset's number of classes and ignore index (unless set)."""
    classes = (getattr(dataset, 'metainfo', None) or {}).get('classes')
    for t in _walk_transforms(dataset.pipeline.transforms):
        if isinstance(t, CheckSegSample):
            if t.num_classes is None and classes:
                t.num_classes = len(classes)
            if t.ignore_index is None:
                t.ignore_index = getattr(dataset, 'ignore_index', 255)


@DATASETS.register_module(name='CheckedSegDataset')
def checked_seg_dataset(dataset_type: str, check_pairs: bool = True,
                        **kwargs: Any) -> Any:
    """Build mmseg's ``dataset_type`` from ``kwargs`` and return *that*
    dataset (so ``dataset.data_root=...`` overrides keep working), with
    the split checked at build (``check_pairs``), unreadable files named
    per sample and the pipeline's :class:`CheckSegSample` configured."""
    lazy = kwargs.pop('lazy_init', False)
    dataset = DATASETS.build(dict(type=dataset_type, lazy_init=True,
                                  **kwargs))
    dataset.pipeline = FileNamingCompose(dataset.pipeline.transforms)
    configure_sample_checks(dataset)
    if check_pairs:
        # an instance attribute so the checks see the dataset's own list;
        # removed once used, the dataset then pickles as mmseg's own
        dataset.load_data_list = functools.partial(_checked_load_data_list,
                                                   dataset)
    if not lazy:
        dataset.full_init()
        dataset.__dict__.pop('load_data_list', None)
    return dataset


@TRANSFORMS.register_module()
class CheckSegSample:
    """Check the label map a sample just loaded (put it right after
    ``LoadAnnotations``): single channel, its image's size, values in
    ``[0, num_classes)`` or ``ignore_index``, no 16-bit value above 255.

    Args:
        num_classes: number of classes; None: the dataset's (set by
            ``CheckedSegDataset``), or no range check when used alone.
        ignore_index: the label value that is ignored; None: the dataset's
            (255 in mmseg).
    """

    def __init__(self, num_classes: Optional[int] = None,
                 ignore_index: Optional[int] = None) -> None:
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def __call__(self, results: dict) -> dict:
        seg = results.get('gt_seg_map', None)
        if seg is None:
            return results
        label = results.get('seg_map_path')
        image = results.get('img_path')
        if seg.ndim != 2:
            channels = seg.shape[-1] if seg.ndim == 3 else seg.shape
            raise InputError(
                f'label {label!r} has {channels} channels (a colour/RGB '
                'image?), but a label must be a single-channel map of class '
                'indices (8-bit grey or palette PNG). Convert its colours to '
                'class indices (e.g. with mmseg\'s converter for this '
                'dataset) and save it as a one-channel PNG')
        ori = results.get('ori_shape')
        if ori is not None and tuple(seg.shape) != tuple(ori[:2]):
            raise InputError(
                f'label {label!r} is {seg.shape[0]}x{seg.shape[1]} but its '
                f'image {image!r} is {ori[0]}x{ori[1]} (height x width). A '
                'label must have its image\'s size: re-export it at that '
                'size (nearest-neighbour, never interpolating class '
                'indices) or fix the image/label pairing')
        self._check_bit_depth(label)
        self._check_range(seg, label, results.get('reduce_zero_label'))
        return results

    @staticmethod
    def _check_bit_depth(label: Any) -> None:
        """mmseg casts labels to 8 bits (in a 16-bit PNG class 258 becomes
        2); only a file whose header says it is deeper is read again."""
        if not isinstance(label, str) or not osp.isfile(label):
            return
        from PIL import Image
        with Image.open(label) as image:
            if image.mode in ('1', 'L', 'P'):
                return
            values = np.unique(np.asarray(image))
        wide = [int(v) for v in values if v > 255 or v < 0]
        if wide:
            raise InputError(
                f'label {label!r} is a {image.mode} image with values '
                f'{wide[:5]}{" ..." if len(wide) > 5 else ""} outside '
                '0..255: mmseg reads labels as 8 bits, so they would '
                f'silently become {[v % 256 for v in wide[:5]]}. Store '
                'class indices 0..255 in an 8-bit (L or P) PNG; mmseg '
                'cannot train or evaluate more than 255 classes')

    def _check_range(self, seg: np.ndarray, label: Any,
                     reduced: Optional[bool]) -> None:
        n, ignore = self.num_classes, self.ignore_index
        if n is None or seg.size == 0 or int(seg.max()) < n:
            return
        if seg.dtype == np.uint8:
            counts = np.bincount(seg.ravel(), minlength=256)
            values = np.nonzero(counts)[0]
        else:
            values = np.unique(seg)
        bad = [int(v) for v in values if v >= n and v != ignore]
        if not bad:
            return
        in_file = (' (file values ' + ', '.join(str(v + 1) for v in bad[:5])
                   + ' before reduce_zero_label)') if reduced else ''
        raise InputError(
            f'label {label!r} has values {bad[:5]}{in_file} outside the '
            f'{n} classes 0..{n - 1} and the ignore index {ignore}: they '
            'would be left out of the metrics silently (or fail training '
            'with "Target out of bounds"). Fix those pixels, set them to '
            f'the ignore index to ignore them, or use a dataset/classes '
            'setting with enough classes')

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(num_classes={self.num_classes}, '
                f'ignore_index={self.ignore_index})')
