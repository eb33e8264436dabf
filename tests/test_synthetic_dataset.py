"""The synthetic ADE20K-layout generator: determinism, format, and that
mmseg's own dataset, pipeline and metric read it unchanged."""
import hashlib
import json
import os
import os.path as osp

import numpy as np
import pytest
import torch
from PIL import Image

from mmseg_whitebox.datasets.synthetic_ade20k import (
    BACKGROUND_CLASS, LANDMARK_CLASS, SyntheticADE20KSpec, chance_miou,
    generate_synthetic_ade20k, load_meta, render_sample)

from _helpers import run_tool


def digest(root):
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(('.jpg', '.png')):
                with open(osp.join(dirpath, name), 'rb') as f:
                    h.update(name.encode() + f.read())
    return h.hexdigest()


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    kw = dict(num_train=4, num_val=2, image_size=(64, 80))
    a = generate_synthetic_ade20k(str(tmp_path / 'a'), seed=3, **kw)
    b = generate_synthetic_ade20k(str(tmp_path / 'b'), seed=3, **kw)
    c = generate_synthetic_ade20k(str(tmp_path / 'c'), seed=4, **kw)
    assert digest(a) == digest(b) != digest(c)
    # an image depends on (seed, split, index) only, not on the counts
    more = generate_synthetic_ade20k(str(tmp_path / 'd'), seed=3,
                                     num_train=6, num_val=2,
                                     image_size=(64, 80))
    name = 'images/training/ADE_train_00000003.jpg'
    with open(osp.join(a, name), 'rb') as f1, \
            open(osp.join(more, name), 'rb') as f2:
        assert f1.read() == f2.read()


def test_ade20k_layout_and_label_convention(tiny_ade):
    spec = SyntheticADE20KSpec(**load_meta(tiny_ade)['spec'])
    allowed = {0} | {c + 1 for c in spec.classes_present()}
    for split, prefix, n in (('training', 'ADE_train', 8),
                             ('validation', 'ADE_val', 3)):
        imgs = sorted(os.listdir(osp.join(tiny_ade, 'images', split)))
        anns = sorted(os.listdir(osp.join(tiny_ade, 'annotations', split)))
        assert imgs == [f'{prefix}_{i:08d}.jpg' for i in range(n)]
        assert anns == [f'{prefix}_{i:08d}.png' for i in range(n)]
        for img_name, ann_name in zip(imgs, anns):
            img = Image.open(osp.join(tiny_ade, 'images', split, img_name))
            ann = Image.open(osp.join(tiny_ade, 'annotations', split,
                                      ann_name))
            assert img.format == 'JPEG' and img.mode == 'RGB'
            assert ann.format == 'PNG' and ann.mode == 'L'
            assert img.size == ann.size
            assert set(np.unique(np.asarray(ann))) <= allowed
            w, h = img.size
            assert 0.75 * 96 - 1 <= h <= 96 and 0.75 * 112 - 1 <= w <= 112


def test_labels_follow_appearance_and_theme():
    for variant in ('appearance', 'context'):
        spec = SyntheticADE20KSpec(variant=variant, num_classes=8)
        for i in range(6):
            rgb, label, info = render_sample(spec, 'training', i)
            for shape in info['shapes']:
                assert shape['ade_class'] == spec.class_of(
                    shape['appearance'], info['theme'])
            if variant == 'context':
                assert (label == LANDMARK_CLASS + 1).any()
    spec = SyntheticADE20KSpec(variant='context', num_classes=8)
    # one appearance, two themes, two different classes
    assert spec.class_of(0, 0) != spec.class_of(0, 1)
    assert BACKGROUND_CLASS not in spec.foreground_classes


def test_context_variant_cannot_be_solved_per_pixel():
    """The same appearance carries both of its classes across images."""
    spec = SyntheticADE20KSpec(variant='context', num_classes=4)
    seen = {}
    for i in range(40):
        _, _, info = render_sample(spec, 'training', i)
        for shape in info['shapes']:
            seen.setdefault(shape['appearance'], set()).add(
                shape['ade_class'])
    assert all(len(classes) == 2 for classes in seen.values())


@pytest.mark.parametrize('kwargs, match', [
    (dict(variant='nope'), 'variant'),
    (dict(num_classes=1), 'num_classes'),
    (dict(variant='context', num_classes=5), 'even'),
    (dict(image_size=(16, 64)), 'image_size'),
    (dict(foreground_classes=[0, 1]), 'foreground_classes'),
])
def test_bad_spec_is_rejected_with_reason(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticADE20KSpec(**kwargs)


def test_refuses_foreign_or_different_folders(tmp_path):
    foreign = tmp_path / 'ade' / 'ADEChallengeData2016'
    foreign.mkdir(parents=True)
    (foreign / 'README.txt').write_text('the real ADE20K')
    with pytest.raises(FileExistsError, match='not written by'):
        generate_synthetic_ade20k(str(tmp_path / 'ade'), num_train=1,
                                  num_val=1)
    out = str(tmp_path / 'syn')
    generate_synthetic_ade20k(out, num_train=2, num_val=1, seed=0)
    with pytest.raises(FileExistsError, match='different synthetic'):
        generate_synthetic_ade20k(out, num_train=2, num_val=1, seed=1)
    generate_synthetic_ade20k(out, num_train=2, num_val=1, seed=1,
                              overwrite=True)
    assert load_meta(osp.join(out, 'ADEChallengeData2016'))['spec'][
        'seed'] == 1


def test_mmseg_dataset_pipeline_and_metric_read_it(tiny_ade):
    from mmengine.registry import init_default_scope
    from mmseg.datasets import ADE20KDataset
    from mmseg.evaluation import IoUMetric
    init_default_scope('mmseg')
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations', reduce_zero_label=True),
        dict(type='PackSegInputs')
    ]
    ds = ADE20KDataset(
        data_root=tiny_ade, pipeline=pipeline,
        data_prefix=dict(img_path='images/validation',
                         seg_map_path='annotations/validation'))
    assert len(ds) == 3
    metric = IoUMetric(iou_metrics=['mIoU'])
    metric.dataset_meta = ds.metainfo
    for i in range(len(ds)):
        sample = ds[i]['data_samples']
        gt = sample.gt_sem_seg.data
        assert gt.dtype == torch.int64
        values = set(torch.unique(gt).tolist())
        assert values <= set(range(150)) | {255}
        # a perfect prediction scores 100
        metric.process([], [dict(pred_sem_seg=dict(data=gt),
                                 gt_sem_seg=dict(data=gt))])
    results = metric.compute_metrics(metric.results)
    assert results['mIoU'] == pytest.approx(100.0)


def test_chance_miou():
    assert chance_miou({'0': 50, '1': 50}) == pytest.approx(
        100 * (0.25 / 0.75))
    assert chance_miou({'0': 1}) == pytest.approx(100.0)


def test_cli_writes_and_reports(tmp_path):
    proc = run_tool(['tools/dataset_converters/synthetic_ade20k.py',
                     '--data-root', str(tmp_path), '--variant', 'context',
                     '--num-train', '2', '--num-val', '2', '--shape', '64'])
    assert 'signboard' in proc.stdout and 'chance mIoU' in proc.stdout
    meta = json.load(open(tmp_path / 'ADEChallengeData2016' /
                          'synthetic_meta.json'))
    assert meta['complete'] and meta['spec']['variant'] == 'context'
    bad = run_tool(['tools/dataset_converters/synthetic_ade20k.py',
                    '--data-root', str(tmp_path / 'x'), '--num-classes',
                    '1'], check=False)
    assert bad.returncode == 2 and 'num_classes' in bad.stderr
    assert 'synthetic_ade20k.py: error: ' in bad.stderr
    assert 'Traceback' not in bad.stderr
