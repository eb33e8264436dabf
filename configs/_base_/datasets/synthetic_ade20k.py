# The synthetic ADE20K-layout dataset (generate it first:
#   python tools/dataset_converters/synthetic_ade20k.py --data-root data/synthetic
# ), read by mmseg's own ADE20KDataset, pipeline and IoUMetric: the ADE20K
# base with another data root, small images (about 96..128 px), 128x128
# crops, for CPU demos and tests. Loaders, samplers, the evaluator and the
# test-time augmentation (on this test resize target) are ADE20K's.
_base_ = './ade20k.py'
data_root = 'data/synthetic/ADEChallengeData2016'
crop_size = (128, 128)
img_scale = (256, 128)  # the test resize target
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegSample'),
    dict(
        type='RandomResize',
        scale=(256, 128),
        ratio_range=(0.75, 1.5),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    # class colours are 45 degrees of hue apart: keep the hue jitter below
    dict(type='PhotoMetricDistortion', hue_delta=9),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=img_scale, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegSample'),
    dict(type='PackSegInputs')
]
tta_pipeline = [
    _base_.tta_pipeline[0],
    dict(
        _base_.tta_pipeline[1],
        transforms=[[
            dict(
                type='Resize',
                scale=(int(img_scale[0] * r), int(img_scale[1] * r)),
                keep_ratio=True) for r in _base_.img_ratios
        ], *_base_.tta_pipeline[1].transforms[1:]])
]
train_dataloader = dict(
    batch_size=8,
    num_workers=2,
    dataset=dict(data_root=data_root, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=2, dataset=dict(data_root=data_root, pipeline=test_pipeline))
test_dataloader = val_dataloader
