"""A small, learnable, synthetic dataset in the real ADE20K folder layout.

So that tests and demos run the real mmseg ``ADE20KDataset``, pipeline and
``IoUMetric`` where ADE20K cannot be downloaded, this module writes::

    ROOT/ADEChallengeData2016/
        images/{training,validation}/ADE_{train,val}_%08d.jpg   RGB JPEG
        annotations/{training,validation}/ADE_..._%08d.png      uint8 labels
        synthetic_meta.json                                    how it was made

with the ADE20K label convention: 0 = "other" (ignored; mmseg's
``reduce_zero_label=True`` maps it to 255), ``1..150`` = the ADE20K classes
(png value = class index + 1). Every image is a function of
``(seed, split, index)`` only, so the same arguments give the same bytes.

Two variants:

``appearance``
    Random shapes on a textured background ("wall"); a shape's class is
    decided by its colour *and* its texture (a colour x texture grid, so
    neither cue alone suffices), the rest is nuisance.

``context``
    Pixels alone cannot decide the class: appearance ``i`` is class
    ``A_i`` or ``B_i`` by the image's *theme*, the look of one landmark
    (class "signboard") anywhere in the image, so labelling a shape needs
    global mixing such as attention.
"""
from __future__ import annotations

import json
import math
import os
import os.path as osp
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np
from PIL import Image

from mmseg_whitebox.utils.atomic import read_json
from mmseg_whitebox.utils.tool_error import InputError

ADE_DIRNAME = 'ADEChallengeData2016'
SPLITS = {'training': 'train', 'validation': 'val'}
META_FILENAME = 'synthetic_meta.json'
#: what to do with a damaged ``synthetic_meta.json``
_REGENERATE = ('Generate the dataset again into a new folder, or pass '
               '--overwrite')
VARIANTS = ('appearance', 'context')

# Hues 45 degrees apart, so moderate hue jitter (PhotoMetricDistortion's
# hue_delta) never maps one class colour onto another.
_HUES = (0, 180, 90, 270, 45, 225, 135, 315)
TEXTURES = ('hstripes', 'dots', 'vstripes', 'checker', 'diagonal', 'solid')
SHAPES = ('rectangle', 'ellipse', 'triangle')

BACKGROUND_CLASS = 0  # ADE "wall"
LANDMARK_CLASS = 43  # ADE "signboard"


def _ade_class_names() -> Tuple[str, ...]:
    from mmseg.datasets import ADE20KDataset
    return tuple(ADE20KDataset.METAINFO['classes'])


@dataclass
class SyntheticADE20KSpec:
    """Everything that determines the generated dataset."""

    variant: str = 'appearance'
    num_classes: int = 8
    num_train: int = 400
    num_val: int = 50
    image_size: Tuple[int, int] = (128, 128)  # (height, width), at most
    size_jitter: float = 0.25  # each image is 1-jitter .. 1 times image_size
    min_shapes: int = 2
    max_shapes: int = 5
    ignore_prob: float = 0.3  # chance of an ignored ("other") blob per image
    noise_std: float = 6.0
    seed: int = 0
    foreground_classes: Optional[List[int]] = field(default=None)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise InputError(f'variant must be one of {VARIANTS}, '
                             f'got {self.variant!r}')
        max_classes = len(_HUES) * len(TEXTURES)
        if not 2 <= self.num_classes <= max_classes:
            raise InputError(
                f'num_classes must be in [2, {max_classes}] (distinct '
                f'colour x texture combinations), got {self.num_classes}')
        if self.variant == 'context' and self.num_classes % 2:
            raise InputError('the context variant needs an even num_classes '
                             '(two classes per appearance)')
        if self.num_train < 1 or self.num_val < 1:
            raise InputError('num_train and num_val must be >= 1')
        if not 1 <= self.min_shapes <= self.max_shapes:
            raise InputError('need 1 <= min_shapes <= max_shapes')
        h, w = self.image_size
        if min(h, w) < 32:
            raise InputError(f'image_size must be >= 32 pixels per side, '
                             f'got {self.image_size}')
        self.image_size = (int(h), int(w))
        if self.foreground_classes is None:
            reserved = {BACKGROUND_CLASS, LANDMARK_CLASS}
            pool = [c for c in range(150) if c not in reserved]
            self.foreground_classes = pool[:self.num_classes]
        elif (len(self.foreground_classes) != self.num_classes
              or len(set(self.foreground_classes)) != self.num_classes
              or not all(0 <= c < 150 for c in self.foreground_classes)
              or {BACKGROUND_CLASS, LANDMARK_CLASS} & set(
                  self.foreground_classes)):
            raise InputError(
                'foreground_classes must list num_classes distinct ADE20K '
                'class indices in [0, 150) other than 0 (wall, background) '
                f'and {LANDMARK_CLASS} (signboard, landmark)')

    @property
    def num_appearances(self) -> int:
        return (self.num_classes // 2 if self.variant == 'context' else
                self.num_classes)

    def appearances(self) -> List[Tuple[int, str]]:
        """(hue, texture) of each appearance; a colour x texture grid."""
        n = self.num_appearances
        n_hues = min(len(_HUES), max(2, math.ceil(n / 2)))
        return [(_HUES[i % n_hues], TEXTURES[i // n_hues]) for i in range(n)]

    def class_of(self, appearance: int, theme: int) -> int:
        """ADE20K class index (0-based) of an appearance under a theme."""
        if self.variant == 'appearance':
            return self.foreground_classes[appearance]
        return self.foreground_classes[appearance +
                                       theme * self.num_appearances]

    def classes_present(self) -> List[int]:
        extra = [LANDMARK_CLASS] if self.variant == 'context' else []
        return sorted([BACKGROUND_CLASS] + list(self.foreground_classes) +
                      extra)


def _hsv_to_rgb(hue_deg: float, sat: float, val: float) -> np.ndarray:
    c = val * sat
    hp = (hue_deg % 360) / 60.0
    x = c * (1 - abs(hp % 2 - 1))
    table = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)]
    r, g, b = table[int(hp) % 6]
    m = val - c
    return np.array([r + m, g + m, b + m], dtype=np.float32) * 255.0


def _texture(kind: str, yy: np.ndarray, xx: np.ndarray, period: float,
             phase: float) -> np.ndarray:
    """Texture value in [0, 1] at every pixel."""
    w = 2 * math.pi / period
    if kind == 'solid':
        return np.zeros_like(yy, dtype=np.float32)
    if kind == 'hstripes':
        t = np.sin(w * yy + phase) > 0
    elif kind == 'vstripes':
        t = np.sin(w * xx + phase) > 0
    elif kind == 'diagonal':
        t = np.sin(w * (xx + yy) / math.sqrt(2) + phase) > 0
    elif kind == 'checker':
        t = (np.sin(w * yy + phase) > 0) ^ (np.sin(w * xx + phase) > 0)
    elif kind == 'dots':
        oy = np.mod(yy + phase * period, period) - period / 2
        ox = np.mod(xx + phase * period, period) - period / 2
        t = oy**2 + ox**2 < (0.3 * period)**2
    else:
        raise ValueError(f'unknown texture {kind!r}')
    return t.astype(np.float32)


def _shape_mask(kind: str, yy: np.ndarray, xx: np.ndarray, cy: float,
                cx: float, ry: float, rx: float, angle: float) -> np.ndarray:
    dy, dx = yy - cy, xx - cx
    ca, sa = math.cos(angle), math.sin(angle)
    u = (ca * dx + sa * dy) / rx
    v = (-sa * dx + ca * dy) / ry
    if kind == 'ellipse':
        return u**2 + v**2 <= 1
    if kind == 'rectangle':
        return (np.abs(u) <= 1) & (np.abs(v) <= 1)
    if kind == 'triangle':
        return (v <= 1) & (v >= 2 * np.abs(u) - 1)
    raise ValueError(f'unknown shape {kind!r}')


def _paint(img: np.ndarray, mask: np.ndarray, hue: float, texture: str,
           rng: np.random.Generator, yy: np.ndarray, xx: np.ndarray) -> None:
    base = _hsv_to_rgb(hue + rng.uniform(-8, 8), rng.uniform(0.65, 0.9),
                       rng.uniform(0.75, 0.95))
    period = rng.uniform(5.0, 7.0)
    tex = _texture(texture, yy, xx, period, rng.uniform(0, 2 * math.pi))
    shade = 1.0 - 0.55 * tex
    img[mask] = base[None, :] * shade[mask][:, None]


def render_sample(spec: SyntheticADE20KSpec, split: str,
                  index: int) -> Tuple[np.ndarray, np.ndarray, Dict]:
    """Render one image.

    Returns ``(rgb uint8 HxWx3, label uint8 HxW in ADE png convention,
    info)``, where info records the theme and the shapes drawn.
    """
    split_id = list(SPLITS).index(split)
    rng = np.random.default_rng([spec.seed, split_id, index])
    max_h, max_w = spec.image_size
    scale = rng.uniform(1 - spec.size_jitter, 1.0, size=2)
    h, w = int(round(max_h * scale[0])), int(round(max_w * scale[1]))
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)

    # background: low-saturation grey with soft blotches, class "wall"
    img = np.empty((h, w, 3), dtype=np.float32)
    grey = rng.uniform(90, 160)
    blotch = np.sin(yy / rng.uniform(9, 20) + rng.uniform(0, 6)) * np.cos(
        xx / rng.uniform(9, 20) + rng.uniform(0, 6))
    img[:] = (grey + 18 * blotch)[..., None]
    img += rng.uniform(-10, 10, size=3)[None, None, :]
    label = np.full((h, w), BACKGROUND_CLASS + 1, dtype=np.uint8)

    theme = int(rng.integers(0, 2)) if spec.variant == 'context' else 0
    shapes = []
    appearances = spec.appearances()
    for _ in range(int(rng.integers(spec.min_shapes, spec.max_shapes + 1))):
        app = int(rng.integers(0, len(appearances)))
        kind = SHAPES[int(rng.integers(0, len(SHAPES)))]
        ry = rng.uniform(0.12, 0.28) * h
        rx = rng.uniform(0.12, 0.28) * w
        cy, cx = rng.uniform(0.1, 0.9) * h, rng.uniform(0.1, 0.9) * w
        mask = _shape_mask(kind, yy, xx, cy, cx, ry, rx,
                           rng.uniform(0, math.pi))
        hue, texture = appearances[app]
        _paint(img, mask, hue, texture, rng, yy, xx)
        cls = spec.class_of(app, theme)
        label[mask] = cls + 1
        shapes.append(dict(appearance=app, shape=kind, ade_class=cls))

    if spec.variant == 'context':
        # the landmark: a ring, light-on-dark (theme 0) or dark-on-light
        # (theme 1), drawn last so it is never hidden
        r = rng.uniform(0.12, 0.18) * min(h, w)
        cy = rng.uniform(r, h - r)
        cx = rng.uniform(r, w - r)
        dist = np.sqrt((yy - cy)**2 + (xx - cx)**2)
        disc = dist <= r
        ring = disc & (dist >= 0.55 * r)
        outer, inner = (235.0, 25.0) if theme == 0 else (25.0, 235.0)
        img[disc] = inner
        img[ring] = outer
        label[disc] = LANDMARK_CLASS + 1

    if rng.random() < spec.ignore_prob:
        # an unlabelled ("other") blob, ignored by the metric and the loss
        mask = _shape_mask('ellipse', yy, xx, rng.uniform(0, h),
                           rng.uniform(0, w), rng.uniform(0.05, 0.12) * h,
                           rng.uniform(0.05, 0.12) * w, 0.0)
        img[mask] = rng.uniform(0, 255, size=3)[None, :]
        label[mask] = 0

    img += rng.normal(0, spec.noise_std, size=img.shape)
    rgb = np.clip(img, 0, 255).astype(np.uint8)
    return rgb, label, dict(theme=theme, shapes=shapes)


def sample_name(split: str, index: int) -> str:
    return f'ADE_{SPLITS[split]}_{index:08d}'


def generate_synthetic_ade20k(out_dir: str,
                              spec: Optional[SyntheticADE20KSpec] = None,
                              overwrite: bool = False,
                              **kwargs) -> str:
    """Write the dataset under ``out_dir/ADEChallengeData2016``.

    Args:
        out_dir: parent folder (mmseg configs use ``data/ade``).
        spec: the dataset description; or pass its fields as keywords.
        overwrite: regenerate even if an identical dataset is already there.

    Returns:
        The ``ADEChallengeData2016`` folder (a config's ``data_root``).
    """
    if spec is None:
        spec = SyntheticADE20KSpec(**kwargs)
    elif kwargs:
        raise TypeError('pass either spec or its fields, not both')
    root = osp.join(out_dir, ADE_DIRNAME)
    meta_path = osp.join(root, META_FILENAME)
    meta = dict(generator='mmseg_whitebox.datasets.synthetic_ade20k',
                spec=asdict(spec))
    if osp.isfile(meta_path) and not overwrite:
        existing = read_json(meta_path, 'a synthetic dataset description',
                             _REGENERATE)
        if existing.get('spec') == json.loads(json.dumps(meta['spec'])):
            if existing.get('complete') and _complete(root, spec):
                return root
        else:
            raise FileExistsError(
                f'{root} already holds a different synthetic dataset '
                f'({existing.get("spec")}); choose another folder or pass '
                'overwrite=True (--overwrite) to replace it')
    elif osp.isdir(root) and os.listdir(root) and not osp.isfile(meta_path):
        raise FileExistsError(
            f'{root} exists and was not written by this generator (it may '
            'be the real ADE20K); refusing to write into it')

    os.makedirs(root, exist_ok=True)
    with open(meta_path, 'w') as f:  # marks the folder as ours, unfinished
        json.dump(dict(meta, complete=False), f, indent=1)
    names = _ade_class_names()
    counts = np.zeros(151, dtype=np.int64)
    themes = []
    for split, n in (('training', spec.num_train),
                     ('validation', spec.num_val)):
        img_dir = osp.join(root, 'images', split)
        ann_dir = osp.join(root, 'annotations', split)
        os.makedirs(img_dir, exist_ok=True)
        os.makedirs(ann_dir, exist_ok=True)
        for i in range(n):
            rgb, label, info = render_sample(spec, split, i)
            name = sample_name(split, i)
            Image.fromarray(rgb).save(
                osp.join(img_dir, name + '.jpg'), quality=95)
            Image.fromarray(label).save(osp.join(ann_dir, name + '.png'))
            if split == 'validation':
                counts += np.bincount(label.ravel(), minlength=151)
                themes.append(info['theme'])
    meta['classes_present'] = {
        int(c): names[c] for c in spec.classes_present()}
    meta['appearances'] = [
        dict(hue=hue, texture=tex,
             classes=[names[spec.class_of(i, t)]
                      for t in range(2 if spec.variant == 'context' else 1)])
        for i, (hue, tex) in enumerate(spec.appearances())]
    meta['val_pixel_counts'] = {
        str(c - 1): int(counts[c]) for c in range(1, 151) if counts[c]}
    meta['val_ignored_pixels'] = int(counts[0])
    meta['val_themes'] = themes
    meta['complete'] = True
    with open(meta_path, 'w') as f:
        json.dump(meta, f, indent=1)
    return root


def _complete(root: str, spec: SyntheticADE20KSpec) -> bool:
    for split, n in (('training', spec.num_train),
                     ('validation', spec.num_val)):
        for sub, ext in (('images', '.jpg'), ('annotations', '.png')):
            last = osp.join(root, sub, split, sample_name(split, n - 1) + ext)
            if not osp.isfile(last):
                return False
    return True


def load_meta(data_root: str) -> Dict:
    """Read ``synthetic_meta.json`` from a generated ``data_root``."""
    path = osp.join(data_root, META_FILENAME)
    if not osp.isfile(path):
        raise FileNotFoundError(
            f'{path} not found: {data_root} was not written by '
            'tools/dataset_converters/synthetic_ade20k.py')
    return read_json(path, 'a synthetic dataset description', _REGENERATE)


def chance_miou(pixel_counts: Dict[str, int]) -> float:
    """Expected mIoU (in %) of guessing uniformly at random among the K
    classes present, per pixel, from the ground-truth pixel counts."""
    counts = np.array([v for v in pixel_counts.values() if v > 0], float)
    k = len(counts)
    frac = counts / counts.sum()
    inter = frac / k
    union = frac + 1.0 / k - inter
    return float(100.0 * np.mean(inter / union))
